"""Circuits: how heads wire together over training, from the weights (Q-, K- and V-composition between heads).

The layout; the widgets and panels are `dashboard.pagepanels.composition_circuits`'s, the paths and partners
`analysis.findings.paths`'s.
"""

import streamlit as st

from headwatch.analysis.store.format import COMPOSITION
from headwatch.dashboard import viewstate
from headwatch.dashboard.pagepanels import composition_circuits as panels


def main() -> None:
    st.title("Circuits")
    # --- empty case: no run, no composition scores, or one layer ---
    frame = viewstate.run_frame()
    if frame is None or panels.no_composition(frame.store):
        return

    # --- widgets ---
    view = panels.pick_view(frame.store)
    scores = frame.store.require(COMPOSITION, view.kind)  # (S, L, H, L, H) over store.steps, NaN without a row

    # --- panel: the composition matrix, animated over training ---
    panels.matrix_panel(frame, view, scores)

    # --- panel: one head's strongest sources and targets over training ---
    panels.partners_panel(frame, view, scores)


main()
