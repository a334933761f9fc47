"""Timeline: what happened in a run, on one time axis.

The loss with the run's developmental stages shaded (stages.parquet, docs/stages.md), and every event
(`analysis.findings.events`): each head type's first emergence, the largest rLLC rises, the first departure of
each kind of weight from its Marchenko-Pastur law, the first level crossings. Every event links to the
view that shows its evidence; the table below the chart lists them with those links. This module: the layout, the
widgets as one record and the panels of the timeline itself; the head types and the open question are
`views.timeline.heads`', the essential dynamics `views.timeline.essential`'s.

What the panels say is computed in `analysis.findings.events` (the events, the stages read for display) and
`analysis.findings.held_types`; the timeline figure is `dashboard.figures.timeline`'s (the Overview draws its
compact form).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from headwatch.analysis.findings.events import (
    KINDS,
    Event,
    basis_text,
    events_frame,
    primary_basis,
    stage_bases,
    stage_curve,
    stage_notes,
    stage_rows,
    stages_table,
)
from headwatch.analysis.findings.headline import headline_markdown
from headwatch.analysis.store import Store
from headwatch.dashboard import charts, derived, export, viewstate, widgets
from headwatch.dashboard.data import StepAxis, loss_curve
from headwatch.dashboard.figures import timeline as figs
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.views.timeline import data, essential, heads
from headwatch.dashboard.views.timeline.icl import timeline_icl_panel


def main() -> None:
    st.title("Timeline")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    axis = frame.axis()

    # --- panel: the headline, which heads formed when (each a link to its evidence) ---
    headline_panel(frame)

    # --- widgets: the stages' basis and the kinds of events shown ---
    view = pick_view(frame.store)

    # --- panel: the timeline ---
    timeline_panel(frame, axis, view)

    # --- panel: the in-context-learning scores, against the same stages ---
    timeline_icl_panel(frame, view.stages, view.basis)

    # --- panel: the stages ---
    stages_panel(view)

    # --- panel: essential dynamics (the outputs' trajectory, coloured by stage) ---
    essential.essential_panel(frame, view.stages)

    # --- panel: head types ---
    heads.types_panel(frame)

    # --- panel: the study's open question, in one paragraph (the Trajectory map shows the whole table) ---
    heads.open_question_panel(frame)

    # --- panel: the events ---
    events_panel(frame, view)


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


def pick_view(store: Store) -> TimelineView:
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


def headline_panel(frame: RunFrame) -> None:
    """Which heads formed when, one line per head type, each head a link to its evidence that opens in this tab, as a
    click on the events lane does (`analysis.findings.headline`, `dashboard.charts.app_links`)."""
    charts.app_links("  \n".join(headline_markdown(frame.store, frame.run)), key="timeline_headline")


def timeline_panel(frame: RunFrame, axis: StepAxis, view: TimelineView) -> None:
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
    trend = data.run_trend((recorded.get("run") or {}).get("trend_from"), (recorded.get("llc") or {}).get("distribution"))
    st.caption(
        "Top: the loss; shaded: the stages (orange rising, blue falling, grey flat for the LLC and the counts of heads; "
        f"green drop, grey plateau for the losses{'; ' + trend if trend else ''}), a dotted line at each "
        f"boundary, where a curve's trend or rate changes by more than {parameters.get('k', 3):g} standard errors, "
        "and a darker band over the checkpoints where the boundary could sit (chi2 within 1 of its best place, from at "
        "least the checkpoint before it, over every curve's boundary merged into it); the run's boundaries merge the "
        f"curves' within {parameters.get('merge', 2)} checkpoint(s), stand on two curves or one strong one, keep the "
        "best-supported one's step, and are named by the heads whose scores change most in the "
        "stage they open (docs/stages.md). Bottom: one lane per kind of event, one marker "
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
            **{
                c: st.column_config.NumberColumn(c, format="%d")
                for c in ("from step", "to step", "boundary could sit from step", "boundary could sit to step")
            },
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
        "it, and the checkpoints its boundary could sit at (chi2 within 1 of its best place; -1 for the first stage)."
    )


def events_panel(frame: RunFrame, view: TimelineView) -> None:
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
