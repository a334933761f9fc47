"""Overview (the app's front page): what headwatch shows, links to every view, every run it can open.

The views are `dashboard.navigation.VIEWS` (the list the sidebar's navigation is built from); the runs
are the frame's (`dashboard.loader.runs`, what the sidebar's run picker offers, Hub stores included).
"""

from __future__ import annotations

import re

import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.events import primary_basis, stage_rows
from headwatch.analysis.findings.headline import headline_markdown
from headwatch.analysis.store import read_meta
from headwatch.dashboard import charts, derived, loader, viewstate
from headwatch.dashboard.data import loss_curve, step_axis
from headwatch.dashboard.figures.timeline import compact
from headwatch.dashboard.model_card import model_card_lines, timeline_card_lines
from headwatch.dashboard.navigation import VIEWS


def main() -> None:
    st.title("headwatch: attention heads over training")
    st.markdown(
        "For every attention head, W_QK = W_Qᵀ W_K is a d_model × d_model matrix of rank at most d_head. "
        "headwatch follows the distribution of its entries (σ, kurtosis, D_KL from a Gaussian, the whole P(w)) and "
        "its spectrum (λ_k = s_k², stable rank, spectral entropy) across training checkpoints."
    )
    st.caption(
        "Conventions: raw checkpoint weights, no 1/√d_head factor, rotary position encoding ignored, no biases. "
        "Every view is a link: the address bar (and the sidebar's *Link to this view*) reproduces it."
    )
    frame = viewstate.frame()
    run = frame.run

    # --- panel: what the chosen run shows, first: which heads formed when, each a link to its evidence ---
    if run and run in frame.runs:
        _headline(run, frame.runs[run])

    # --- panel: the views ---
    st.subheader("Views")
    for view in VIEWS:
        c_link, c_what = st.columns([1, 2])
        c_link.page_link(view.file, label=view.title, icon=view.icon, query_params={"run": run} if run else None)
        c_what.markdown(view.description)

    # --- panel: the runs ---
    st.subheader("Runs")
    if not frame.runs:
        st.info(
            "No stores found under data/. Make one with `python -m headwatch.precompute --source DIR --out data/NAME`, "
            "or set HEADWATCH_STORE to a store directory."
        )
        return
    for name, path in frame.runs.items():
        with st.container(border=True):
            st.markdown(f"**{name}** · `{path}`")
            try:  # meta.json only: describing a run must not read its whole table
                st.markdown("  \n".join(model_card_lines(read_meta(path))))
            except (StoreError, KeyError) as exc:
                st.error(f"{name}: {exc}")
                continue
            _timeline_card(name, path)


def _headline(name: str, path) -> None:
    """The run's headline (`analysis.findings.headline`): one line per head type, every head a link to its evidence."""
    store = loader.try_load_store(path)
    if isinstance(store, StoreError) or len(store.steps) == 0:
        return
    st.subheader(f"What {name} shows")
    charts.app_links("  \n".join(headline_markdown(store, name)), key="headline")
    st.caption(
        "Each head named opens its evidence in this tab: the head explorer on the type's score at the step it formed, "
        "the type's threshold drawn; a source opens Circuits at that step. Every event of the run, with its link: the "
        "Timeline."
    )


def _timeline_card(name: str, path) -> None:
    """The card's compact timeline: the stages in a line, the key events, the loss with both marked."""
    store = loader.try_load_store(path)
    if isinstance(store, StoreError) or len(store.steps) == 0:
        return
    stages = stage_rows(store)
    events = derived.run_events(store)
    charts.app_links("  \n".join(headline_markdown(store, name)), key=f"card_headline_{_key(name)}")
    st.markdown("  \n".join(timeline_card_lines(stages, events, basis=primary_basis(store))))
    curve = loss_curve(store)
    if curve is not None:
        st.plotly_chart(
            compact(step_axis(store, scale="log"), curve[0], stages, events, run=name),
            key=f"card_timeline_{name}",
            config={"displayModeBar": False},
        )
    st.page_link("pages/run_timeline.py", label="Timeline of this run", icon=":material/timeline:", query_params={"run": name})


def _key(name: str) -> str:
    """A run's name as part of a widget key (a CSS class: letters, digits, ``-`` and ``_``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)
