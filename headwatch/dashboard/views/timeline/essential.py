"""The Timeline's essential-dynamics panel: the outputs' trajectory in its first two principal components, coloured by
the shaded stages, its direction and some steps marked (`views.timeline.figures`); a click on a checkpoint opens the
Forward lenses page at that step. Its caption says why a turn matters and how much of PC1's range the path covers
while the run's heads form (`views.timeline.data`)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from headwatch.analysis.stages import essential as ed
from headwatch.analysis.stages.essential import store_trajectory
from headwatch.dashboard import charts, export, viewstate
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.figures.points import picked_step
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.views.timeline import figures
from headwatch.dashboard.views.timeline.data import forming_window, pc1_share

# the outputs' path in its first two principal components (`analysis.stages.essential.store_trajectory`), once per version
_trajectory = store_cached(store_trajectory, max_entries=8)
# where the run's heads form (`views.timeline.data.forming_window`), once per version
_forming_window = store_cached(forming_window, max_entries=8)


def essential_panel(frame: RunFrame, stages: pd.DataFrame | None) -> None:
    """The essential dynamics: the outputs' trajectory in its first two principal components, coloured by the shaded
    stages; a click on a checkpoint opens the Forward lenses page at that step."""
    st.subheader("Essential dynamics")
    found = _trajectory(frame.store)
    if found is None:
        st.info(
            "This store has no essential dynamics (essential.parquet). Add them with "
            "`python -m headwatch.precompute --source SOURCE --out STORE --lenses essential` (it reads the checkpoints again)."
        )
        return
    path, explained = found
    event = charts.chart(
        figures.trajectory(path, explained, stages),
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
    st.caption(
        f"Each point is a checkpoint: the model's next-token log-probabilities on a fixed sample "
        f"({recorded.get('values_per_checkpoint', '?'):,} numbers: the evaluation text and the induction probe, "
        "meta.json essential) projected on their first two principal components over the checkpoints, coloured by "
        "the stage shaded above; the arrowheads give the direction of training, from the start to the end labelled "
        "with their steps. Why a turn matters: where the path turns, the outputs stop changing one way and start "
        "changing another, and a developmental stage boundary tends to sit there (Hoogland et al. check the LLC's "
        "stages against it). The dashed line is the path smoothed over checkpoints by a Gaussian filter of standard "
        f"deviation {ed.SMOOTHING:g} checkpoint(s), which the rule reads: a cusp is a minimum of its speed where it "
        f"turns by more than {ed.TURN_DEGREES:g} degrees, measured over {ed.ARC:.0%} of the path's length either side; "
        f"open circles are cusps, clearing the limit by more than {ed.MARGIN_DEGREES:g} degrees, dotted ones turns "
        "within that margin of it. "
        f"{turns_text(path)} "
        f"{_forming_text(frame, path)}Hover names the step; a click opens the Forward lenses page on its losses at that "
        "step, marked (docs/stages.md)."
    )


def turns_text(path: pd.DataFrame) -> str:
    """The turns of the path in words: each cusp and near one with its step, angle, speed and travel; "no cusp" only
    where no turn is either (`analysis.stages.essential.turns`)."""
    if "verdict" not in path:
        return ""
    picked = path[path["verdict"].isin(["cusp", "near"])]
    if picked.empty:
        return "No cusp: no minimum of the speed turns to within the margin of the rule's angle."
    words = {"cusp": "cusp", "near": "near a cusp"}
    return (
        "Turns: "
        + "; ".join(
            f"{words[str(r.verdict)]} at step {int(r.step):,} ({r.turn:.0f} degrees, speed {r.speed:.3g} nats per checkpoint)"
            for r in picked.itertuples(index=False)
        )
        + "."
    )


def _forming_text(frame: RunFrame, path: pd.DataFrame) -> str:
    """What docs/stages.md measures on every shipped run, for this one: the share of PC1's range the path covers
    while the run's heads form (`views.timeline.data.forming_window`); empty where no heads form."""
    window = _forming_window(frame.store)
    share = pc1_share(path, window.start, window.end) if window is not None else None
    if window is None or share is None:
        return ""
    return (
        f"While the {window.heads} form (steps {window.start:,} to {window.end:,}, where {window.rule}, one checkpoint "
        f"either side), the path covers {share:.0%} of PC1's range (its largest score minus its smallest): how much "
        "of the outputs' main change happens then. "
    )
