"""The Timeline's essential-dynamics panel: the outputs' trajectory in its first two principal components, coloured by
the shaded stages (`views.timeline.figures`); a click on a checkpoint opens the Forward lenses page at that step."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from headwatch.analysis.essential import store_trajectory
from headwatch.dashboard import charts, export, viewstate
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.figures.points import picked_step
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.views.timeline import figures

# the outputs' path in its first two principal components (`analysis.essential.store_trajectory`), once per version
_trajectory = store_cached(store_trajectory, max_entries=8)


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
    cusps = recorded.get("cusps") or []
    st.caption(
        f"Each point is a checkpoint: the model's next-token log-probabilities on a fixed sample "
        f"({recorded.get('values_per_checkpoint', '?'):,} numbers: the evaluation text and the induction probe, "
        "meta.json essential) projected on their first two principal components over the checkpoints, coloured by "
        "the stage shaded above; open circles are cusps, where the path turns by more than "
        f"{recorded.get('turn_degrees', 90):g} degrees ({', '.join(f'{c:,}' for c in cusps) or 'none'}). Hover names "
        "the step; a click opens the Forward lenses page on its losses at that step, marked (docs/stages.md)."
    )
