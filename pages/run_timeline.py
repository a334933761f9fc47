"""Timeline: what happened in a run, on one time axis.

The loss with the run's developmental stages shaded (stages.parquet, docs/stages.md), and every event
(`dashboard.events`): each head type's first emergence, the largest rLLC rises, the first departure of
each kind of weight from its Marchenko-Pastur law, the first level crossings. Every event links to the
view that shows its evidence; the table below the chart lists them with those links.
"""

import pandas as pd
import streamlit as st

from analysis.errors import StoreError
from analysis.store.format import HEAD_EMERGENCE, HEAD_TYPE_SCORES, STAGES
from analysis.type_association import ASSOCIATION_PAIRS, end_types, has_statistic, replicates
from dashboard import charts, export, loader, viewstate, widgets
from dashboard.data import loss_curve
from dashboard.events import KINDS, TYPE_TEXT, events_frame, head_link, type_sentences
from dashboard.figures import timeline as figs
from dashboard.labels import LLC_STAT, STATS


def main() -> None:
    st.title("Timeline")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    axis = frame.axis()
    recorded = store.meta.stages or {}
    stored = store.frame(STAGES)
    bases = sorted(set(stored["basis"])) if stored is not None else []

    # --- widgets ---
    c_basis, c_kinds = st.columns([1, 3], vertical_alignment="bottom")
    primary = recorded.get("primary")
    basis = (
        widgets.select(
            "basis",
            "Stages shaded, read from",
            bases,
            primary if primary in bases else bases[0],
            fmt=lambda b: {"llc": "whole-model LLC", "loss": "loss"}[b],
            kind="radio",
            where=c_basis,
        )
        if bases
        else None
    )
    events = loader.run_events(store)
    kinds = widgets.multiselect("kinds", "Events shown", list(KINDS), list(KINDS), where=c_kinds)
    shown = [e for e in events if e.kind in kinds]

    # --- panel: the timeline ---
    if not bases:
        st.info(
            "This store has no developmental stages (stages.parquet). Add them with "
            "`python -m precompute.lenses.stages STORE` (made from llc.parquet and eval_loss.parquet)."
        )
    for note in recorded.get("notes", []):
        st.caption(f"Stages: {note}.")
    stages = store.frame(STAGES)
    stages = stages[stages["basis"] == basis].sort_values("stage") if stages is not None and basis else None
    curve = loss_curve(store)
    loss, label = (curve[0], curve[1]) if curve else (None, "")
    charts.chart(
        figs.timeline(axis, loss, label, stages, shown, run=frame.run, basis=basis),
        "timeline",
        title=frame.run,
        filename=export.safe_name(frame.run, "timeline"),
        csv=lambda: events_frame(shown, frame.run).assign(run=frame.run),
    )
    parameters = recorded.get("parameters", {})
    st.caption(
        "Top: the loss; shaded: the stages (orange rising, blue falling, grey flat for the LLC; green drop, grey "
        f"plateau for the loss), boundaries where the curve's trend changes by more than {parameters.get('k', 3):g} "
        "standard errors (docs/stages.md). Bottom: one lane per kind of event, one marker per event at its "
        "checkpoint; hover for what happened, the table below links each to its evidence."
    )

    # --- panel: the stages ---
    st.subheader("Stages")
    if stages is not None and len(stages):
        st.dataframe(
            stages.drop(columns=["basis"]).assign(stage=stages["stage"] + 1),
            hide_index=True,
            key="stages_table",
            column_config={
                "start_step": st.column_config.NumberColumn("from step", format="%d"),
                "end_step": st.column_config.NumberColumn("to step", format="%d"),
                "change_se": st.column_config.NumberColumn("± (1 s.e.)", format="%.3g"),
                "loss_change": st.column_config.NumberColumn("loss change (nats/token)", format="%.3f"),
            },
        )
    else:
        st.markdown("No stages.")

    # --- panel: head types ---
    st.subheader("Head types")
    for sentence in type_sentences(store):
        st.markdown(f"- {sentence}")
    _emerged_table(frame, store)

    # --- panel: the study's open question, in one paragraph (the Trajectory map shows the whole table) ---
    _open_question(frame, store)

    # --- panel: the events ---
    st.subheader("Events")
    if not shown:
        st.markdown("No events of the kinds shown.")
        return
    st.dataframe(
        events_frame(shown, frame.run),
        hide_index=True,
        key="events_table",
        column_config={
            "step": st.column_config.NumberColumn("step", format="%d"),
            "link": st.column_config.LinkColumn("evidence", display_text="open ↗", help="The view that shows it"),
        },
        height=min(40 + 35 * len(shown), 640),
    )


def _emerged_table(frame, store) -> None:
    """Every head that holds a type at the end of training, with its emergence step and a link to it there."""
    emergence = store.frame(HEAD_EMERGENCE)
    if emergence is None:
        return
    held = emergence[emergence["emergence_step"].notna()].sort_values(["emergence_step", "layer", "head", "type"])
    if held.empty:
        return
    steps = held["emergence_step"].astype(int)
    table = pd.DataFrame(
        {
            "head": [f"L{a} H{b}" for a, b in zip(held["layer"], held["head"], strict=True)],
            "type": [TYPE_TEXT.get(t, t) for t in held["type"]],
            "emerged at step": steps.to_numpy(),
            "first above threshold": held["first_step"].astype("Int64").to_numpy(),
            "peak score": held["peak_score"].to_numpy(),
            "final score": held["final_score"].to_numpy(),
            "evidence": [
                head_link(frame.run, int(a), int(b), int(s), stat=HEAD_TYPE_SCORES[t])
                for a, b, s, t in zip(held["layer"], held["head"], steps, held["type"], strict=True)
            ],
        }
    )
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
        "explorer at the emergence step with the type's score (docs/head-types.md)."
    )


def _open_question(frame, store) -> None:
    """Do the trajectory clusters correspond to the head types? Which statistics say so here and in every run."""
    st.subheader("Do the trajectory clusters correspond to head types?")
    if end_types(store) is None:
        st.markdown(
            "This store has no head types, so the question cannot be asked of it (`python -m precompute.lenses.types STORE`)."
        )
        return
    others = [o for r in frame.runs if r != frame.run for o in [loader.try_load_store(frame.runs[r])]]
    runs = [store, *[o for o in others if not isinstance(o, StoreError) and end_types(o) is not None and len(o.steps) >= 2]]
    found, tested, held = [], 0, []
    for stat, matrix in ASSOCIATION_PAIRS:
        results = [loader.association(s, stat, matrix=matrix)[0] for s in runs if has_statistic(s, stat, matrix)]
        if not results or not results[0].testable:
            continue
        tested += 1
        name = STATS[stat].short() + ("" if stat == LLC_STAT else f" of W_{matrix.upper()}")
        if results[0].significant:
            found.append(f"{name} (AMI {results[0].ami:.3f}, p = {results[0].p_value:.3g})")
        if len(results) > 1 and replicates(results):
            held.append(name)
    text = (
        f"Of {tested} statistics whose trajectory clusters were compared with the heads' types at the last checkpoint, "
        f"{len(found)} reach p < 0.05 in this run: {', '.join(found) or 'none'} (about {0.05 * tested:.1f} would by chance). "
    )
    if len(runs) > 1:
        text += (
            f"In every one of the {len(runs)} runs with head types: "
            + (", ".join(held) if held else "none, so no association replicates")
            + "."
        )
    st.markdown(text)
    st.page_link(
        "pages/trajectory_map.py",
        label="The whole comparison, statistic by statistic, on the Trajectory map",
        icon=":material/scatter_plot:",
        query_params={"run": frame.run or "", "colour": "type"},
    )


main()
