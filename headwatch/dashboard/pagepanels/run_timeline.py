"""The Timeline page's widgets and panels (``pages/run_timeline.py`` lays them out): the basis of the shaded stages
and the kinds of events shown as one frozen record, and one function per panel.

What the panels say is computed in `analysis.findings.events` (the events, the stages read for display) and
`analysis.findings.held_types` (the head types in sentences, the heads that hold a type at the end); the figure is
`dashboard.figures.timeline`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.essential import store_trajectory
from headwatch.analysis.findings.association import Asked, open_question_text
from headwatch.analysis.findings.events import (
    KINDS,
    Event,
    basis_text,
    events_frame,
    evidence_link,
    primary_basis,
    stage_bases,
    stage_curve,
    stage_notes,
    stage_rows,
    stages_table,
)
from headwatch.analysis.findings.headline import headline_markdown
from headwatch.analysis.findings.held_types import TYPE_LABELS, emerged_rows, type_sentences
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.type_association import ASSOCIATION_PAIRS, end_types, has_statistic
from headwatch.dashboard import charts, derived, export, loader, viewstate, widgets
from headwatch.dashboard.data import loss_curve
from headwatch.dashboard.figures import essential as ed_figs
from headwatch.dashboard.figures import timeline as figs
from headwatch.dashboard.figures.points import picked_step
from headwatch.dashboard.labels import LLC_STAT, STATS


@dataclass(frozen=True)
class TimelineView:
    """What the Timeline shows (the widgets above the chart).

    Attributes:
        basis: the curve the shaded stages are read from (URL ``basis``: ``run``, ``llc``, ``loss``, ``copy_loss``,
            ``heads_<type>``); None without stages.
        bases: the bases the store has stages of (empty: none).
        stages: the shaded basis's stages (`analysis.findings.events.stage_rows`), or None.
        shown: the run's events of the kinds picked (URL ``kinds``), by step.
    """

    basis: str | None
    bases: list[str]
    stages: pd.DataFrame | None
    shown: list[Event]
    curve: str = ""  # the curve whose values the stages report, with its unit (`stage_curve`)


def pick_view(store) -> TimelineView:
    """The basis radio and the kinds of events, in one row; the stages and events they select."""
    bases = stage_bases(store)
    c_basis, c_kinds = st.columns([1, 3], vertical_alignment="bottom")
    primary = primary_basis(store)
    basis = (
        widgets.select(
            "basis",
            "Stages shaded, read from",
            bases,
            primary if primary in bases else bases[0],
            fmt=basis_text,
            kind="radio",
            where=c_basis,
        )
        if bases
        else None
    )
    events = derived.run_events(store)
    kinds = widgets.multiselect("kinds", "Events shown", list(KINDS), list(KINDS), where=c_kinds)
    return TimelineView(
        basis=basis,
        bases=bases,
        stages=stage_rows(store, basis=basis) if basis else None,
        shown=[e for e in events if e.kind in kinds],
        curve=stage_curve(store, basis) if basis else "",
    )


def timeline_panel(frame, axis, view: TimelineView) -> None:
    """The loss with the stages shaded and the events in lanes below, on the page's time axis."""
    store = frame.store
    recorded = store.meta.stages or {}
    if not view.bases:
        st.info(
            "This store has no developmental stages (stages.parquet). Add them with "
            "`python -m headwatch.precompute.lenses.stages STORE` (made from llc.parquet and eval_loss.parquet)."
        )
    for note in stage_notes(store, view.basis):
        st.caption(f"Stages: {note}.")
    curve = loss_curve(store)
    loss, label = (curve[0], curve[1]) if curve else (None, "")
    event = charts.chart(
        figs.timeline(axis, loss, label, view.stages, view.shown, run=frame.run, basis=view.basis),
        "timeline",
        title=frame.run,
        filename=export.safe_name(frame.run, "timeline"),
        csv=lambda: events_frame(view.shown, frame.run).assign(run=frame.run),
        select=True,
    )
    charts.open_link_on_click(event)  # a click on an event's marker opens its evidence
    parameters = recorded.get("parameters", {})
    st.caption(
        "Top: the loss; shaded: the stages (orange rising, blue falling, grey flat for the LLC and the counts of heads; "
        "green drop, grey plateau for the losses; the run's stages take the LLC's trend), a dotted line at each "
        f"boundary, where a curve's trend or rate changes by more than {parameters.get('k', 3):g} standard errors; "
        f"the run's boundaries merge the curves' within {parameters.get('merge', 2)} checkpoints and are named after "
        "the heads that form in the stage they open (docs/stages.md). Bottom: one lane per kind of event, one marker "
        "per event at its checkpoint; hover for what happened, click a marker to open its evidence (the table below "
        "links each too)."
    )


def stages_panel(view: TimelineView) -> None:
    """The shaded basis's stages as a table (`analysis.findings.events.stages_table`)."""
    st.subheader("Stages")
    stages = view.stages
    if stages is None or not len(stages) or view.basis is None:
        st.markdown("No stages.")
        return
    table = stages_table(stages, view.curve)
    st.dataframe(
        table,
        hide_index=True,
        key="stages_table",
        column_config={
            **{c: st.column_config.NumberColumn(c, format="%d") for c in ("from step", "to step")},
            **{c: st.column_config.NumberColumn(c, format="%.4g") for c in table.columns if " at " in c or "change" in c},
            "end − start": st.column_config.NumberColumn("end − start", format="%.4g"),
            "± (1 s.e.)": st.column_config.NumberColumn("± (1 s.e.)", format="%.3g"),
        },
    )
    st.caption(
        "Each stage's curve at its start and end and the change between them; the fitted change is the sum of the "
        "straight stretches fitted in log10(1 + step), which the stage rule reads, with its standard error "
        "(docs/stages.md); the loss change is the loss's own end minus start. The run's stages (every curve, merged) "
        "lie between the merged boundaries and give no standard error; each lists the curves' boundaries that support "
        "it."
    )


def headline_panel(frame) -> None:
    """Which heads formed when, one line per head type, each head a link to its evidence
    (`analysis.findings.headline`)."""
    st.markdown("  \n".join(headline_markdown(frame.store, frame.run)))


def types_panel(frame) -> None:
    """The head types in one sentence each, then every head that holds a type at the end."""
    st.subheader("Head types")
    for sentence in type_sentences(frame.store):
        st.markdown(f"- {sentence}")
    _emerged_table(frame, frame.store)


def events_panel(frame, view: TimelineView) -> None:
    """The events shown, each with a link to the view that shows its evidence."""
    st.subheader("Events")
    shown = view.shown
    if not shown:
        st.markdown("No events of the kinds shown.")
        return
    st.dataframe(
        events_frame(shown, frame.run),
        hide_index=True,
        key="events_table",
        column_config={
            "step": st.column_config.NumberColumn("step", format="%d"),
            "link": st.column_config.LinkColumn("evidence", display_text="open ↗", help="The view that shows it", width="small"),
            "detail": st.column_config.TextColumn("detail", width="large"),
        },
        height=min(40 + 35 * len(shown), 640),
    )


def _emerged_table(frame, store) -> None:
    """Every head that holds a type at the end of training, with its emergence step and a link to it there."""
    held = emerged_rows(store)
    if held is None or held.empty:
        return
    steps = held["emergence_step"].astype(int)
    table = pd.DataFrame(
        {
            "head": [head_name(a, b) for a, b in zip(held["layer"], held["head"], strict=True)],
            "type": [TYPE_LABELS.get(t, t) for t in held["type"]],
            "emerged at step": steps.to_numpy(),
            "first above threshold": held["first_step"].astype("Int64").to_numpy(),
            "peak score": held["peak_score"].to_numpy(),
            "final score": held["final_score"].to_numpy(),
            "evidence": [
                evidence_link(frame.run, int(a), int(b), int(s), t)
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
        "explorer at the emergence step with the type's score in its statistic tab (docs/head-types.md)."
    )


def open_question_panel(frame) -> None:
    """The study's open question in one paragraph (the Trajectory map shows the whole table): do the trajectory
    clusters correspond to the head types? Which statistics say so here and in every run."""
    store = frame.store
    st.subheader("Do the trajectory clusters correspond to head types?")
    if end_types(store) is None:
        st.markdown(
            "This store has no head types, so the question cannot be asked of it "
            "(`python -m headwatch.precompute.lenses.types STORE`)."
        )
        return
    opened = [loader.try_load_store(frame.runs[r]) for r in frame.runs if r != frame.run]
    others = [o for o in opened if not isinstance(o, StoreError) and end_types(o) is not None and len(o.steps) >= 2]
    asked = []
    for stat, matrix in ASSOCIATION_PAIRS:
        if not has_statistic(store, stat, matrix):  # this run's paragraph holds this run's figures only
            continue
        name = STATS[stat].short() + ("" if stat == LLC_STAT else f" of W_{matrix.upper()}")
        own = derived.association(store, stat, matrix=matrix)
        assert own is not None  # the store has head types (end_types above)
        rest = [derived.association(o, stat, matrix=matrix) for o in others if has_statistic(o, stat, matrix)]
        asked.append(Asked(name, own[0], [r[0] for r in rest if r is not None]))
    text = open_question_text(asked, n_runs=1 + len(others))
    st.markdown(text)
    st.page_link(
        "pages/trajectory_map.py",
        label="The whole comparison, statistic by statistic, on the Trajectory map",
        icon=":material/scatter_plot:",
        query_params={"run": frame.run or "", "colour": "type"},
    )


def essential_panel(frame, view: TimelineView) -> None:
    """The essential dynamics: the outputs' trajectory in its first two principal components, coloured by the shaded
    stages; a click on a checkpoint opens the Forward lenses page at that step."""
    st.subheader("Essential dynamics")
    found = store_trajectory(frame.store)
    if found is None:
        st.info(
            "This store has no essential dynamics (essential.parquet). Add them with "
            "`python -m headwatch.precompute --source SOURCE --out STORE --lenses essential` (it reads the checkpoints again)."
        )
        return
    path, explained = found
    event = charts.chart(
        ed_figs.trajectory(path, explained, view.stages),
        "essential",
        title=frame.run,
        filename=export.safe_name(frame.run, "essential"),
        csv=lambda: path.assign(run=frame.run),
        select=True,
    )
    step = picked_step(event, [int(s) for s in frame.store.steps])
    if step is not None:
        viewstate.switch_page("pages/forward_lenses.py", step=step, panel="losses")  # the losses, that step marked
    recorded = frame.store.meta.records.get("essential") or {}
    cusps = recorded.get("cusps") or []
    st.caption(
        f"Each point is a checkpoint: the model's next-token log-probabilities on a fixed sample "
        f"({recorded.get('values_per_checkpoint', '?'):,} numbers: the evaluation text and the induction probe, "
        "meta.json essential) projected on their first two principal components over the checkpoints, coloured by "
        "the stage shaded above; open circles are cusps, where the path turns by more than "
        f"{recorded.get('turn_degrees', 90):g} degrees ({', '.join(f'{c:,}' for c in cusps) or 'none'}). Hover names "
        "the step; a click opens the Forward lenses page on its losses at that step, marked (docs/stages.md)."
    )
