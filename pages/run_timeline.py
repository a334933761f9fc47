"""Timeline: what happened in a run, on one time axis.

The loss with the run's developmental stages shaded (stages.parquet, docs/stages.md), and every event
(`analysis.findings.events`): each head type's first emergence, the largest rLLC rises, the first departure of
each kind of weight from its Marchenko-Pastur law, the first level crossings. Every event links to the
view that shows its evidence; the table below the chart lists them with those links. The layout; the widgets and
panels are `dashboard.pagepanels.run_timeline`'s.
"""

import streamlit as st

from headwatch.dashboard import viewstate
from headwatch.dashboard.pagepanels import run_timeline as panels


def main() -> None:
    st.title("Timeline")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    axis = frame.axis()

    # --- panel: the headline, which heads formed when (each a link to its evidence) ---
    panels.headline_panel(frame)

    # --- widgets: the stages' basis and the kinds of events shown ---
    view = panels.pick_view(frame.store)

    # --- panel: the timeline ---
    panels.timeline_panel(frame, axis, view)

    # --- panel: the stages ---
    panels.stages_panel(view)

    # --- panel: essential dynamics (the outputs' trajectory, coloured by stage) ---
    panels.essential_panel(frame, view)

    # --- panel: head types ---
    panels.types_panel(frame)

    # --- panel: the study's open question, in one paragraph (the Trajectory map shows the whole table) ---
    panels.open_question_panel(frame)

    # --- panel: the events ---
    panels.events_panel(frame, view)


main()
