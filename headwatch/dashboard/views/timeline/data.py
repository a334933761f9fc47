"""What the Timeline computes before it draws: the table of the heads that hold a type at the end of training, and
what the run's stages are read from, in words, and where the essential-dynamics path moves while the run's heads
form (the window and the share of PC1 it covers, as docs/stages.md measures them on the shipped runs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.findings.events import evidence_link
from headwatch.analysis.findings.held_types import TYPE_LABELS, head_types
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.stages.run import HELD_OUT
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.attention import EVAL_LOSS
from headwatch.analysis.store.lenses.types import HEAD_TYPES_TABLE

FORMING_SHARES = (0.9, 0.1)  # a window runs from 90% of a curve's change left to 10% left (one checkpoint either side)

# meta.json ``stages.run.trend_from`` (`analysis.stages.run`: the LLC's when the store has one, else the loss's) ->
# what the Timeline's caption says the run's stages are shaded by
RUN_TREND = {
    "llc": "the run's stages take the LLC's trend",
    "loss": "the run's stages take the loss's trend, this run having no LLC (llc.parquet)",
}


def run_trend(trend_from: str | None, distribution: str | None = None) -> str:
    """What the run's stages (the merged basis) are shaded by, for the Timeline's caption ("" without run stages);
    with the LLC's, the distribution its estimates were made under (meta.json ``stages.llc.distribution``; stores
    whose stages do not record it read the held-out text, `analysis.stages.run.HELD_OUT`)."""
    if trend_from is None:
        return ""
    text = RUN_TREND.get(trend_from, f"the run's stages take the trend of {trend_from}")
    if trend_from == "llc":
        text += f", estimated on {distribution or HELD_OUT}"
    return text


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


@dataclass(frozen=True)
class FormingWindow:
    """The checkpoints over which a run's heads form, one checkpoint either side.

    Attributes:
        heads: which heads (``induction heads``, ``previous-token heads``).
        rule: the curve read and how (``the induction probe's copy loss falls from 90% to 10% of its drop``).
        start, end: the first and last step of the window.
    """

    heads: str
    rule: str
    start: int
    end: int


def forming_window(store: Store) -> FormingWindow | None:
    """Where the run's heads form, by docs/stages.md's rule: where an induction head holds its type at the end, the
    checkpoints over which the induction probe's copy loss (eval_loss.parquet ``probe_copy_loss``) falls from 90% to
    10% of its drop (from its highest value before its lowest to its lowest); else, where previous-token heads do,
    those over which their number rises from 10% to 90% of its value at the last checkpoint with head types; one
    checkpoint either side. None when no head holds either type at the end, or the curve is not stored."""
    types = head_types(store)
    if types is None:
        return None
    if (types.emergence["induction"] >= 0).any():
        frame = store.frame(EVAL_LOSS, columns=["step", "probe_copy_loss"])
        if frame is None:
            return None
        frame = frame.dropna().sort_values("step")
        steps, copy = frame["step"].to_numpy(np.int64), frame["probe_copy_loss"].to_numpy(np.float64)
        if len(steps) < 2:
            return None
        low = int(np.argmin(copy))
        high = int(np.argmax(copy[: low + 1]))
        top, bottom = copy[high], copy[low]
        if not top > bottom:
            return None
        start = high + int(np.argmax(copy[high:] <= bottom + FORMING_SHARES[0] * (top - bottom)))
        end = start + int(np.argmax(copy[start:] <= bottom + FORMING_SHARES[1] * (top - bottom)))
        rule = "the induction probe's copy loss falls from 90% to 10% of its drop"
        return FormingWindow("induction heads", rule, *_widened(steps, start, end))
    if (types.emergence["previous_token"] >= 0).any():
        with_rows = np.isin(types.steps, store.steps_with(HEAD_TYPES_TABLE))
        steps = np.asarray(types.steps, dtype=np.int64)[with_rows]
        count = types.held["previous_token"][with_rows].sum(axis=(1, 2))  # (S,) heads holding the type
        start = int(np.argmax(count >= FORMING_SHARES[1] * count[-1]))
        end = int(np.argmax(count >= FORMING_SHARES[0] * count[-1]))
        rule = "the number of previous-token heads rises from 10% to 90% of its last value"
        return FormingWindow("previous-token heads", rule, *_widened(steps, start, end))
    return None


def _widened(steps: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """The steps at ``start`` and ``end`` (indices), one checkpoint further out on each side."""
    return int(steps[max(start - 1, 0)]), int(steps[min(end + 1, len(steps) - 1)])


def pc1_share(path: pd.DataFrame, start: int, end: int) -> float | None:
    """The share of PC1's range (its largest score minus its smallest, over every checkpoint) that the path covers
    between ``start`` and ``end``: ``|pc1(end) - pc1(start)| / range``, read at the path's first and last checkpoints
    in the window. None when the window holds fewer than two of them or PC1 does not move.

    Args:
        path: `analysis.stages.essential.store_trajectory`'s rows (``step``, ``pc1``, ...), in step order.
    """
    pc1 = path["pc1"].to_numpy(np.float64)
    inside = np.flatnonzero((path["step"].to_numpy() >= start) & (path["step"].to_numpy() <= end))
    span = float(np.nanmax(pc1) - np.nanmin(pc1)) if len(pc1) else 0.0
    if len(inside) < 2 or not span > 0:
        return None
    return abs(float(pc1[inside[-1]] - pc1[inside[0]])) / span
