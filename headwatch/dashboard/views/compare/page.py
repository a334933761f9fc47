"""Compare runs: two or more runs side by side, lined up in relative depth and in training time.

The layout; the widgets are `views.compare.choice`'s (the runs and the statistic) and `views.compare.alignment`'s
(time and depth), the panels `views.compare.panels`' and `views.compare.sizes`' (across sizes), what they say
`analysis.findings.comparison`'s and `views.compare.data`'s, the figures `views.compare.figures`' and
`views.compare.figures.depth`'. A run that cannot be opened, or lacks the statistic or the matrix, is named in a
warning; the others are shown.
"""

from __future__ import annotations

import streamlit as st

from headwatch.dashboard import viewstate
from headwatch.dashboard.views.compare import alignment, choice, panels
from headwatch.dashboard.views.compare import sizes as across


def main() -> None:
    st.title("Compare runs")
    # --- empty case: nothing offered ---
    frame = viewstate.frame()
    if not frame.runs:
        st.info(
            "No runs to compare: put statistics stores under data/ (`python -m headwatch.precompute --out data/NAME`), "
            "or point HEADWATCH_STORE at one."
        )
        return

    # --- widgets: the runs; open them (one that cannot be opened is named, the others shown) ---
    runs = choice.pick_runs(frame)
    colour = {r: i for i, r in enumerate(runs)}  # a run keeps its colour when another is left out
    stores = choice.open_runs(frame, runs)
    if not stores:
        return

    # --- widgets: statistic and matrix (every statistic some run has; a run without it is named below) ---
    pick = choice.pick_statistic(stores)
    shown = choice.run_values(stores, pick)
    if not shown:
        st.info("None of the chosen runs has this statistic; choose another.")
        return

    # --- widgets: time alignment, depth bins, the point of training ---
    time = alignment.pick_time(frame, stores, shown, colour)

    # --- in numbers: the statistic at the point and each run's loss, where curves overlap ---
    panels.summary_section(pick, time, shown)

    # --- in numbers: when each head type formed, per run ---
    panels.emergence_section(stores)

    # --- panel (a): mean and spread per relative-depth bin over training ---
    panels.bands_panel(pick, time, stores)

    # --- panel (b): one depth bin's heads, run by run on shared axes ---
    panels.bin_panel(pick, time)

    # --- panel (c): the distribution over all heads (layers) at one point of training ---
    panels.distribution_panel(pick, time)

    # --- panel: heads of each type over training ---
    panels.type_counts_panel(stores, colour, time)

    # --- panel (d): the runs' losses on the same time axis ---
    panels.loss_panel(shown, colour, time)

    # --- across sizes: emergence, consolidation, scaling, joint trajectory clusters ---
    across.sizes_section(stores, matrix=pick.matrix)
