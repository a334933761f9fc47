"""The Timeline's head panels: the head types in sentences with every head that holds one at the end, and the study's
open question in one paragraph (do the trajectory clusters correspond to the head types?)."""

from __future__ import annotations

import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.association import asked_of, judged_run, open_question_text, study_pairs
from headwatch.analysis.findings.held_types import emerged_rows, type_sentences
from headwatch.analysis.findings.replicates import replicate_hint, replicates_of
from headwatch.analysis.trajectories.type_association import end_types
from headwatch.dashboard import derived, loader
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import LLC_STAT, STATS
from headwatch.dashboard.views.timeline.data import emerged_table


def types_panel(frame: RunFrame) -> None:
    """The head types in one sentence each, then every head that holds a type at the end."""
    st.subheader("Head types")
    for sentence in type_sentences(frame.store):
        st.markdown(f"- {sentence}")
    _emerged_table(frame, frame.store)


def _emerged_table(frame: RunFrame, store) -> None:
    """Every head that holds a type at the end of training, with its emergence step and a link to it there."""
    held = emerged_rows(store)
    if held is None or held.empty:
        return
    table = emerged_table(held, frame.run)
    st.dataframe(
        table,
        hide_index=True,
        key="emerged_table",
        column_config={
            "emerged at step": st.column_config.NumberColumn(format="%d"),
            "first above threshold": st.column_config.NumberColumn(format="%d"),
            "peak score": st.column_config.NumberColumn(format="%.3f"),
            "final score": st.column_config.NumberColumn(format="%.3f"),
            "evidence": st.column_config.LinkColumn("evidence", display_text="open ↗", help="The head at that step"),
        },
        height=min(40 + 35 * len(table), 480),
    )
    st.caption(
        "Every head that holds a type at the last checkpoint: the step from which it holds it to the end (emerged), "
        "the first step its score reached the threshold at all, its largest and last score; the link opens the head "
        "explorer at the emergence step with the type's score in its statistic tab (docs/head-types.md). A multigram "
        "or other head's scores are its mean-ablation loss increase on the evaluation text (nats per token), at the "
        "checkpoints with tokens in context, and its emergence step is the first checkpoint with tokens in context at "
        "which it holds the type (it is decided nowhere else); the other types' scores are attention shares."
    )


def open_question_panel(frame: RunFrame) -> None:
    """The study's open question in one paragraph (the Trajectory map shows the whole table): do the trajectory
    clusters correspond to the head types? Which statistics say so here, and which also in this run's replicates
    (runs of the same recipe with another seed, `analysis.findings.replicates`), named; the other runs named apart."""
    store = frame.store
    st.subheader("Do the trajectory clusters correspond to head types?")
    if end_types(store) is None:
        st.markdown(
            "This store has no head types, so the question cannot be asked of it "
            "(`python -m headwatch.precompute.lenses.types STORE`)."
        )
        return
    opened = {r: loader.try_load_store(frame.runs[r]) for r in frame.runs if r != frame.run}
    others = {r: o for r, o in opened.items() if not isinstance(o, StoreError) and end_types(o) is not None and len(o.steps) >= 2}
    replicates = replicates_of(store, others)
    me = frame.run or store.path.name
    # every run's statistics judged together, Holm over each run's own (as `headwatch report` and the Trajectory map)
    judged = {r: judged_run(s, associate=derived.association) for r, s in [(me, store), *((r, others[r]) for r in replicates)]}
    names = {p: STATS[p[0]].short() + ("" if p[0] == LLC_STAT else f" of W_{p[1].upper()}") for p in study_pairs(store)}
    text = open_question_text(
        asked_of(judged, me, replicates, names),
        replicates=replicates,
        other_runs=[r for r in others if r not in replicates],
        hint=replicate_hint(store, me),
    )
    st.markdown(text)
    st.page_link(
        "pages/trajectory_map.py",
        label="The whole comparison, statistic by statistic, on the Trajectory map",
        icon=":material/scatter_plot:",
        query_params={"run": frame.run or "", "colour": "type"},
    )
