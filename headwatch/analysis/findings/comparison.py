"""Comparing runs: relative-depth bins, time alignment, which checkpoint of each run stands for a point, and
the numbers per run at that point (the Compare runs page's "In numbers" table).

Pure numpy and pandas: the Compare runs page (`dashboard.views.compare`) and the joint trajectory map call it;
``tests/unit/test_findings.py`` and ``tests/app/test_compare.py`` check it against computations of their own.

Relative depth. Layer ``l`` (0-based) of a model with ``L`` layers sits at relative depth ``l / L``
in [0, 1). With ``B`` bins of equal width ``1 / B`` (bin ``b`` is ``[b / B, (b + 1) / B)``) it falls
in bin ``floor(B * l / L)``, computed in integers as ``(B * l) // L`` so no rounding moves a layer. A
4-layer model fills 4 bins with one layer each; a 6-layer one puts layers 0-1, 2, 3-4, 5 into bins
0-3. A bin can hold no layer of a shallow model (8 bins of a 4-layer model): it is empty for that run.

Time alignment (``align``):

- ``step``: the training step;
- ``tokens``: tokens seen at the checkpoint (``meta.json``: recorded counts, else step x tokens per step);
- ``fraction``: the step divided by the run's last checkpoint's step (the last checkpoint is 1).

Every run is drawn at its own checkpoints; nothing is interpolated. A chosen point ``p`` of training
stands, in each run, for its last checkpoint at or before ``p`` (`checkpoint_at`); a run with no
checkpoint at or before ``p`` has none. On a log axis each run plots ``x`` plus one step in the
alignment's unit (1 step; that run's tokens per step; ``1 / last step``), so step 0 sits at one step.
On a checkpoint-index axis the runs share one index: every aligned time at which some run has a
checkpoint, ascending, the i-th at x = i (`index_grid`, `on_index`); runs with the same schedule then
put their i-th checkpoints at i, and early training gets as much width as late.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pandas as pd

from headwatch.analysis.findings.headline import run_headline
from headwatch.analysis.findings.held_types import TYPE_LABELS, head_types
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.types import HEAD_TYPES

Align = Literal["step", "tokens", "fraction"]
ALIGNMENTS: dict[str, str] = {
    "step": "training step",
    "tokens": "tokens seen",
    "fraction": "fraction of the run (step / the run's last step)",
}
BIN_COUNTS = (2, 3, 4, 6, 8)  # relative-depth bins on offer (URL ``nbins``)
DEFAULT_BINS = 4
FRACTION_DIGITS = 4  # a fraction point in the URL has at most this many decimals
FRACTION_GRID = tuple(i / 10 for i in range(11))  # fraction points on offer whatever the runs' checkpoints


def depth_bins(n_layers: int, n_bins: int) -> np.ndarray:
    """The relative-depth bin of each layer, ``(n_layers,)`` int: ``floor(n_bins * layer / n_layers)``.

    Raises:
        ValueError: ``n_layers`` or ``n_bins`` below 1.
    """
    if n_layers < 1 or n_bins < 1:
        raise ValueError(f"need n_layers >= 1 and n_bins >= 1, got {n_layers}, {n_bins}")
    return (np.arange(n_layers) * n_bins) // n_layers


def bin_label(b: int, n_bins: int) -> str:
    """The relative-depth interval of bin ``b``: ``[0.25, 0.5)``."""
    return f"[{b / n_bins:.3g}, {(b + 1) / n_bins:.3g})"


def bin_layers(n_layers: int, n_bins: int, b: int) -> list[int]:
    """The layers of a model with ``n_layers`` layers that fall in bin ``b`` (empty when none do)."""
    return [int(layer) for layer in np.flatnonzero(depth_bins(n_layers, n_bins) == b)]


def default_bin(n_layers: list[int], n_bins: int) -> int:
    """The depth bin shown head by head when the link names none: the deepest bin every run has a layer in (2-layer
    runs in 4 bins have layers in bins 0 and 2 only, so the last bin would show nothing for them); the deepest bin the
    first run has when no bin is shared."""
    shared = set(range(n_bins))
    for n in n_layers:
        shared &= {int(b) for b in depth_bins(n, n_bins)}
    if shared:
        return max(shared)
    return int(depth_bins(n_layers[0], n_bins).max()) if n_layers else n_bins - 1


def emergence_table(stores: dict[str, Store]) -> pd.DataFrame:
    """When each head type formed, per run (`analysis.findings.headline.run_headline`): one row per run and type with
    the step the first heads formed at (empty: none holds the type at the end), that step as a fraction of the run,
    those heads, how many hold the type at the end, and the last to form's step. Runs without head types are left
    out."""
    rows = []
    for run, store in stores.items():
        for t in run_headline(store) or []:
            last = int(store.steps[-1]) if len(store.steps) else 0
            rows.append(
                {
                    "run": run,
                    "type": TYPE_LABELS.get(t.type, t.type),
                    "first formed at step": t.step,
                    "fraction of the run": (t.step / last if last else None) if t.step is not None else None,
                    "first heads": ", ".join(head_name(*h) for h in t.first),
                    "heads at the end": len(t.first) + t.later,
                    "last formed at step": t.last_step,
                }
            )
    columns = [
        "run",
        "type",
        "first formed at step",
        "fraction of the run",
        "first heads",
        "heads at the end",
        "last formed at step",
    ]
    table = pd.DataFrame(rows, columns=columns)
    return table.astype({"first formed at step": "Int64", "last formed at step": "Int64", "fraction of the run": "float64"})


def aligned_time(steps: np.ndarray, *, align: Align, tokens: np.ndarray | None = None) -> np.ndarray:
    """Each checkpoint's position on the common time axis, ``(S,)`` float64 (see the module docstring).

    Args:
        steps: ``(S,)`` ascending steps of the run's checkpoints.
        align: ``step``, ``tokens`` or ``fraction``.
        tokens: ``(S,)`` tokens seen at each of ``steps`` (needed for ``tokens``).

    Raises:
        ValueError: ``tokens`` asked for without token counts, or an unknown ``align``.
    """
    s = np.asarray(steps, dtype=np.float64)
    if align == "step":
        return s
    if align == "tokens":
        if tokens is None:
            raise ValueError("align='tokens' needs the token counts of the run's checkpoints")
        return np.asarray(tokens, dtype=np.float64)
    if align == "fraction":
        last = s[-1] if len(s) else 0.0
        return s / last if last > 0 else np.zeros_like(s)
    raise ValueError(f"unknown align {align!r}; choose from {sorted(ALIGNMENTS)}")


def log_shift(steps: np.ndarray, *, align: Align, tokens_per_step: float | None = None) -> float:
    """One training step in the alignment's unit: what a log time axis adds to ``x`` (step 0 sits there)."""
    if align == "tokens":
        return float(tokens_per_step or 1.0)
    if align == "fraction":
        last = float(steps[-1]) if len(steps) else 0.0
        return 1.0 / last if last > 0 else 1.0
    return 1.0


@dataclass(frozen=True)
class RunSeries:
    """One run's statistic on the common time axis.

    Attributes:
        run: the run's name (URL value).
        steps: ``(S,)`` its checkpoints' steps.
        x: ``(S,)`` their aligned times (`aligned_time`).
        values: ``(S, n_layers, n_units)``: per head (units are heads) or per layer (one unit).
        shift: what a log axis adds to ``x`` (`log_shift`).
    """

    run: str
    steps: np.ndarray
    x: np.ndarray
    values: np.ndarray
    shift: float = 1.0

    @property
    def n_layers(self) -> int:
        return int(self.values.shape[1])

    def plot_x(self, *, log: bool) -> np.ndarray:
        """The x coordinates to draw: ``x``, or ``x + shift`` on a log axis."""
        return self.x + self.shift if log else self.x


def run_series(
    run: str,
    steps: np.ndarray,
    values: np.ndarray,
    *,
    align: Align,
    tokens: np.ndarray | None = None,
    tokens_per_step: float | None = None,
) -> RunSeries:
    """A `RunSeries` of ``values`` ``(S, n_layers, n_units)`` at ``steps``, aligned by ``align``."""
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    assert values.ndim == 3 and values.shape[0] == len(steps), (values.shape, len(steps))
    return RunSeries(
        run=run,
        steps=steps,
        x=aligned_time(steps, align=align, tokens=tokens),
        values=values,
        shift=log_shift(steps, align=align, tokens_per_step=tokens_per_step),
    )


def type_count_series(run: str, store: Store, *, align: Align) -> RunSeries | None:
    """How many of the run's heads hold each head type at each of its checkpoints, as a `RunSeries` with ``values``
    ``(S, 1, len(HEAD_TYPES))`` (`analysis.findings.held_types.HeadTypes.counts`, types in `HEAD_TYPES` order; NaN
    where the run does not decide the type).

    Returns:
        None for a store without head types, or without token counts when ``align`` is ``tokens``.
    """
    kinds = head_types(store)
    tokens = store.meta.tokens_at(store.steps) if align == "tokens" else None
    if kinds is None or (align == "tokens" and tokens is None):
        return None
    counts = kinds.counts()
    values = np.stack([counts[name] for name in HEAD_TYPES], axis=-1)[:, None, :]  # (S, 1, types)
    return run_series(run, store.steps, values, align=align, tokens=tokens, tokens_per_step=store.meta.tokens_per_step)


def index_grid(xs: list[np.ndarray]) -> np.ndarray:
    """The checkpoint index shared by several runs: every aligned time at which some run has a checkpoint, ascending
    and each once; the i-th sits at x = i on a checkpoint-index axis."""
    values = np.concatenate([np.asarray(x, dtype=np.float64) for x in xs]) if xs else np.zeros(0)
    return np.unique(values)


def on_index(series: list[RunSeries], grid: np.ndarray) -> list[RunSeries]:
    """``series`` with each checkpoint's ``x`` replaced by its position in ``grid`` (`index_grid`; between two
    positions for a time the grid lacks), for drawing on a checkpoint-index axis. Steps and values are unchanged."""
    at = np.arange(len(grid), dtype=np.float64)
    return [replace(s, x=np.interp(s.x, grid, at) if len(grid) else s.x, shift=0.0) for s in series]


def bin_summary(values: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and population standard deviation over every unit (head) of the layers in each depth bin.

    Args:
        values: ``(S, n_layers, n_units)``.
        n_bins: relative-depth bins (`depth_bins`).

    Returns:
        ``mean`` and ``sd``, each ``(S, n_bins)`` (NaN for an empty bin, or where no value is finite),
        and ``count`` ``(n_bins,)``: the units in each bin.
    """
    s, n_layers, _n_units = values.shape
    bins = depth_bins(n_layers, n_bins)
    mean = np.full((s, n_bins), np.nan)
    sd = np.full((s, n_bins), np.nan)
    count = np.zeros(n_bins, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows (a step without forward rows)
        for b in range(n_bins):
            part = values[:, bins == b, :].reshape(s, -1)  # (S, units in bin b)
            count[b] = part.shape[1]
            if part.shape[1]:
                mean[:, b] = np.nanmean(part, axis=1)
                sd[:, b] = np.nanstd(part, axis=1)
    return mean, sd, count


def checkpoint_at(x: np.ndarray, point: float) -> int | None:
    """Index of the last of the ascending times ``x`` at or before ``point``; None when every one is later."""
    tol = 1e-9 * max(1.0, abs(float(point)))
    i = int(np.searchsorted(np.asarray(x, dtype=np.float64), float(point) + tol, side="right")) - 1
    return i if i >= 0 else None


def _fraction_up(v: float) -> float:
    """``v`` rounded up to `FRACTION_DIGITS` decimals (so the checkpoint at ``v`` is at or before it)."""
    scale = 10**FRACTION_DIGITS
    return round(math.ceil(v * scale - 1e-6) / scale, FRACTION_DIGITS)


def point_options(xs: list[np.ndarray], *, align: Align) -> list[int] | list[float]:
    """The points of training a view can be opened at: every run's checkpoints on the common axis (ints for
    steps and tokens; fractions rounded up to `FRACTION_DIGITS` decimals, plus 0, 0.1, ..., 1)."""
    values = np.concatenate([np.asarray(x, dtype=np.float64) for x in xs]) if xs else np.zeros(0)
    if align == "fraction":
        return sorted({_fraction_up(float(v)) for v in values} | set(FRACTION_GRID))
    return sorted({round(float(v)) for v in values})


def default_point(options: list, xs: list[np.ndarray]) -> int | float:
    """The latest point every run has reached: the largest option at or before the earliest last checkpoint."""
    assert options
    if not xs or any(len(x) == 0 for x in xs):
        return options[-1]
    reach = min(float(np.asarray(x)[-1]) for x in xs)
    fit = [o for o in options if o <= reach + 1e-9 * max(1.0, abs(reach))]
    return fit[-1] if fit else options[0]


def layer_values(table: pd.DataFrame, steps: np.ndarray, *, n_layers: int, role: str, column: str) -> np.ndarray:
    """A whole-layer statistic laid out like a per-head one with one unit per layer: ``(S, n_layers, 1)``.

    Args:
        table: rows of ``layers.parquet`` with ``step``, ``layer``, ``role`` and ``column``.
        steps: the run's steps (axis 0); a step or layer without a row is NaN.
        role: the weight (``attn_out``, ``mlp_in``, ...).
    """
    out = np.full((len(steps), n_layers, 1), np.nan)
    rows = table[table["role"] == role]
    index = {int(s): i for i, s in enumerate(steps)}
    t = np.array([index.get(int(s), -1) for s in rows["step"]], dtype=np.int64)
    layer = rows["layer"].to_numpy(dtype=np.int64)
    keep = (t >= 0) & (layer >= 0) & (layer < n_layers)
    out[t[keep], layer[keep], 0] = rows[column].to_numpy(dtype=np.float64)[keep]
    return out


def common_grid(
    steps: list[np.ndarray], *, align: Align = "fraction", tokens: list[np.ndarray] | None = None
) -> tuple[np.ndarray, list[np.ndarray], bool]:
    """The points several runs' trajectories are compared at (the joint trajectory map and its clusters).

    The resampling rule. Runs whose checkpoints sit at the same aligned times use them as they are.
    Otherwise the grid is the aligned times (`aligned_time`: fractions of the run, or tokens seen) of the
    checkpoints of the run with the fewest checkpoints (of several such runs, the one whose aligned times come first
    lexicographically, so the grid does not depend on the order of the runs), cut, for ``tokens``, to
    the span every run covers (up to the smallest last token count); every run contributes, at each grid
    point, its last checkpoint at or before it (`checkpoint_at`; its first one where it has none so early):
    values are picked, never interpolated, so every value is a state the run was in.

    Args:
        steps: each run's ascending steps.
        align: ``fraction`` (step / the run's last step) or ``tokens`` (``step`` keeps the runs' own steps
            and works like ``tokens`` with one token per step).
        tokens: each run's tokens seen at its checkpoints (needed for ``tokens``).

    Returns:
        ``grid`` ``(G,)`` (aligned times: fractions, tokens or steps), one index array ``(G,)`` per run into
        its steps, and whether the runs shared their aligned times.

    Raises:
        ValueError: ``tokens`` asked for without every run's token counts.
    """
    assert steps and all(len(s) for s in steps)
    if align == "tokens" and (tokens is None or len(tokens) != len(steps) or any(t is None for t in tokens)):
        raise ValueError("align='tokens' needs the token counts of every run's checkpoints")
    xs = [aligned_time(np.asarray(s), align=align, tokens=None if tokens is None else tokens[i]) for i, s in enumerate(steps)]
    first = xs[0]
    if all(len(x) == len(first) and np.allclose(x, first, rtol=1e-12, atol=0) for x in xs):
        return first, [np.arange(len(first)) for _ in steps], True
    ref = min(range(len(steps)), key=lambda i: (len(steps[i]), tuple(xs[i].tolist())))
    grid = xs[ref]
    if align != "fraction":
        grid = grid[grid <= min(float(x[-1]) for x in xs) * (1 + 1e-12)]
    picks = [np.array([max(checkpoint_at(x, g) or 0, 0) for g in grid], dtype=np.int64) for x in xs]
    return grid, picks, False


def joint_trajectories(
    values: list[np.ndarray],
    steps: list[np.ndarray],
    *,
    align: Align = "fraction",
    tokens: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Every head of several runs as one set of trajectories on their `common_grid`.

    Args:
        values: each run's ``(S_i, n_layers_i, n_heads_i)`` statistic.
        steps: each run's ``(S_i,)`` steps.
        align: the common time axis (`common_grid`).
        tokens: each run's ``(S_i,)`` tokens seen (for ``align="tokens"``).

    Returns:
        ``traj`` ``(sum_i n_layers_i n_heads_i, G)``, runs in order, each run's heads layer-major;
        ``index`` ``(N, 3)`` int: run, layer, head of each row; whether the runs shared their aligned times.
    """
    _, picks, same = common_grid(steps, align=align, tokens=tokens)
    rows, index = [], []
    for i, (v, pick) in enumerate(zip(values, picks, strict=True)):
        g, n_layers, n_heads = np.asarray(v)[pick].shape  # (G, n_layers, n_heads)
        rows.append(np.asarray(v, dtype=np.float64)[pick].reshape(g, n_layers * n_heads).T)
        index.append(
            np.stack(
                [np.full(n_layers * n_heads, i), np.repeat(np.arange(n_layers), n_heads), np.tile(np.arange(n_heads), n_layers)],
                axis=1,
            )
        )
    return np.concatenate(rows), np.concatenate(index).astype(np.int64), same


def summary_table(
    series: list[RunSeries],
    indices: list[int | None],
    losses: dict[str, tuple[np.ndarray, str]],
    *,
    unit: str = "head",
) -> pd.DataFrame:
    """One row per run: the statistic over its units at the checkpoint used for ``point`` (mean, median, smallest,
    largest) and the run's final and minimum loss with their steps, where curves overlap too closely to read.

    Args:
        series: the runs' statistic (`run_series`).
        indices: per run, the checkpoint used for the point (`checkpoint_at`), None when it has none.
        losses: run -> (loss at each of its checkpoints, label), for runs with a loss curve (`dashboard.data.loss_curve`).
        unit: ``head`` or ``layer`` (a column title).
    """
    rows = []
    for s, i in zip(series, indices, strict=True):
        row: dict[str, object] = {"run": s.run}
        if i is None:
            row |= {"step used": None, f"mean over {unit}s": np.nan, "median": np.nan, "smallest": np.nan, "largest": np.nan}
        else:
            v = s.values[i].ravel()
            v = v[np.isfinite(v)]
            row |= {
                "step used": int(s.steps[i]),
                f"mean over {unit}s": float(v.mean()) if v.size else np.nan,
                "median": float(np.median(v)) if v.size else np.nan,
                "smallest": float(v.min()) if v.size else np.nan,
                "largest": float(v.max()) if v.size else np.nan,
            }
        loss = losses.get(s.run)
        if loss is not None and np.isfinite(loss[0]).any():
            finite = np.flatnonzero(np.isfinite(loss[0]))
            last, low = int(finite[-1]), int(finite[np.argmin(loss[0][finite])])
            row |= {
                "final loss": float(loss[0][last]),
                "final loss step": int(s.steps[last]),
                "minimum loss": float(loss[0][low]),
                "minimum loss step": int(s.steps[low]),
                "loss": loss[1],
            }
        else:
            row |= {"final loss": np.nan, "final loss step": None, "minimum loss": np.nan, "minimum loss step": None, "loss": ""}
        rows.append(row)
    return pd.DataFrame(rows)


def bands_frame(series: list[RunSeries], n_bins: int, *, stat: str, matrix: str) -> pd.DataFrame:
    """The depth bins' means over training as a table (`bin_summary`): one row per run, bin with units and
    checkpoint, with the run, the matrix, the statistic, the bin, its depth interval, the step, the aligned time,
    the mean, the sd and the units (heads) in the bin."""
    rows = []
    for s in series:
        mean, sd, count = bin_summary(s.values, n_bins)
        for b in range(n_bins):
            if count[b]:
                rows.append(
                    pd.DataFrame(
                        {
                            "run": s.run,
                            "matrix": matrix,
                            "statistic": stat,
                            "bin": b,
                            "depth": bin_label(b, n_bins),
                            "step": s.steps,
                            "time": s.x,
                            "mean": mean[:, b],
                            "sd": sd[:, b],
                            "heads": int(count[b]),
                        }
                    )
                )
    return pd.concat(rows, ignore_index=True)


def type_counts_frame(series: list[RunSeries]) -> pd.DataFrame:
    """Head-type counts (`type_count_series`) as a table: one row per run, type and checkpoint the run decides the
    type at, with the step, the aligned time and how many heads hold the type."""
    frame = pd.concat(
        [
            pd.DataFrame({"run": s.run, "type": name, "step": s.steps, "time": s.x, "heads": s.values[:, 0, i]})
            for s in series
            for i, name in enumerate(HEAD_TYPES)
        ],
        ignore_index=True,
    ).dropna(subset=["heads"])  # a type the run does not decide at a checkpoint has no row
    return frame.astype({"heads": np.int64}).reset_index(drop=True)
