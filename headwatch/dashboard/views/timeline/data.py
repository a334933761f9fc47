"""What the Timeline computes before it draws: the table of the heads that hold a type at the end of training, and
what the run's stages are read from, in words."""

from __future__ import annotations

import pandas as pd

from headwatch.analysis.findings.events import evidence_link
from headwatch.analysis.findings.held_types import TYPE_LABELS
from headwatch.analysis.findings.names import head_name

# meta.json ``stages.run.trend_from`` (`analysis.run_stages`: the LLC's when the store has one, else the loss's) ->
# what the Timeline's caption says the run's stages are shaded by
RUN_TREND = {
    "llc": "the run's stages take the LLC's trend",
    "loss": "the run's stages take the loss's trend, this run having no LLC (llc.parquet)",
}


def run_trend(trend_from: str | None) -> str:
    """What the run's stages (the merged basis) are shaded by, for the Timeline's caption ("" without run stages)."""
    if trend_from is None:
        return ""
    return RUN_TREND.get(trend_from, f"the run's stages take the trend of {trend_from}")


def emerged_table(held: pd.DataFrame, run: str) -> pd.DataFrame:
    """One row per head and type it holds at the end of training, as the Timeline lists them.

    Args:
        held: `analysis.findings.held_types.emerged_rows`' rows (layer, head, type, emergence_step, first_step,
            peak_score, final_score).
        run: the run's name, for the evidence links.

    Returns:
        Columns head (``L1 H0``), type (its label), emerged at step, first above threshold, peak score, final score
        and evidence (a link to the head explorer at the emergence step, on the type's score).
    """
    steps = held["emergence_step"].astype(int)
    return pd.DataFrame(
        {
            "head": [head_name(a, b) for a, b in zip(held["layer"], held["head"], strict=True)],
            "type": [TYPE_LABELS.get(t, t) for t in held["type"]],
            "emerged at step": steps.to_numpy(),
            "first above threshold": held["first_step"].astype("Int64").to_numpy(),
            "peak score": held["peak_score"].to_numpy(),
            "final score": held["final_score"].to_numpy(),
            "evidence": [
                evidence_link(run, int(a), int(b), int(s), t)
                for a, b, s, t in zip(held["layer"], held["head"], steps, held["type"], strict=True)
            ],
        }
    )
