"""Head explorer: one head's weight distribution and spectrum over training, with chosen steps, what it does and
its card.

This module: the layout (the head and its widgets, `views.head.choice`; one tab drawn at a time) and the URL's
panels. The tabs' panels: `views.head.weights` (P(w), the spectrum), `views.head.leading` (lambda_0 .. lambda_3 and
their crossings), `views.head.statistic` (one statistic against its layer), `views.head.does` (its tokens in context
and ablation effect), `views.head.card` (what the store knows of it); what they compute, `views.head.data`.
"""

from __future__ import annotations

import streamlit as st

from headwatch.dashboard import charts, viewstate, widgets
from headwatch.dashboard.views.head.card import card_panel
from headwatch.dashboard.views.head.choice import pick_head, with_both
from headwatch.dashboard.views.head.does import does_panels
from headwatch.dashboard.views.head.leading import both_leading, leading_panel
from headwatch.dashboard.views.head.statistic import STATISTIC_PANEL, statistic_panels
from headwatch.dashboard.views.head.weights import both_weight_panels, weight_panels

PANELS = {  # URL panel -> its tab; one drawn at a time (a link to an event's evidence names its panel)
    "weights": "Weight distribution P(w)",
    "spectrum": "Spectrum λ_k",
    "leading": "λ_0 … λ_3: crossings",
    "statistic": "One statistic against its layer",
    "does": "What this head does",
    "card": "Head card",
}
# The URL parameters of each tab's own widgets (the rest are above the tabs): a link keeps those of the tabs not drawn.
OWNS = {
    "weights": ("both", "gauss", "logp", "zview"),
    "spectrum": ("both", "null"),
    "leading": ("both", "gap", "loglam"),
    "statistic": ("stat", "k", "logy"),
    "does": ("ctxstep",),  # `views.head.does.CONTEXT_STEP`
    "card": (),
}


def main() -> None:
    st.title("Head explorer")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return

    # --- widgets: matrix, layer, head, the loss, the chosen steps, other heads to overlay ---
    h = pick_head(frame)
    widgets.image_format()  # above the tabs: the same place on every tab, and two panels side by side start level

    # --- one panel at a time, in tabs (URL panel): only the chosen one is computed and drawn ---
    panel, tab = widgets.panel_tabs("panel", PANELS, "weights", owns=OWNS)
    stat = k = None
    with tab:
        if panel == "statistic":  # any statistic of this head against its layer
            picked = statistic_panels(h)
            if picked is None:
                return
            stat, k, _, event = picked
            clicks = [event]
            if viewstate.opened_with("panel"):  # opened on it as evidence (a link, a click): the chart in view
                charts.bring_into_view(STATISTIC_PANEL, "head_in_layer")
        elif panel == "does":  # the tokens in context it serves, its ablation effect over training
            does_panels(h)
            clicks = []
        elif panel == "card":  # what the product knows of the head, on one card
            card_panel(h)
            clicks = []
        elif panel == "leading":  # lambda_0 .. lambda_3, their crossings and repulsions
            h = with_both(h)
            if h.both:
                both_leading(h)
            else:
                leading_panel(h)
            clicks = []
        else:  # P(w) or the spectrum, over training and at the chosen steps
            h = with_both(h)
            clicks = weight_panels(h, panel) if not h.both else both_weight_panels(h, panel)
    for clicked in clicks:  # a click on another head's line opens it
        charts.open_head_on_click(clicked, h.store, stat=stat, k=k, matrix=h.matrix)
