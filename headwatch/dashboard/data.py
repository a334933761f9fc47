"""Display-side slices for the views: step axes, the loss curve, fixed ranges, the approach table.

Pure numpy on an opened `analysis.store.Store` (no streamlit); `dashboard.loader`
caches what is worth caching. Everything is vectorised over steps, layers and
heads: a rerun slices arrays, it never loops over table rows. The math the views
show lives in `analysis/` (p(w): `analysis.stats.density`; level crossings:
`analysis.stats.crossings`; a statistic's values: `analysis.findings.values`); this module only places
and formats it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from headwatch.analysis.stats.crossings import Approach
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.attention import EVAL_LOSS

Unit = Literal["step", "tokens"]
Scale = Literal["linear", "log", "index"]
SCALES: dict[str, str] = {"linear": "linear", "log": "log", "index": "checkpoint index"}  # URL value -> label
INDEX_TICKS = 9  # at most this many labelled checkpoints on a checkpoint-index axis


# --------------------------------------------------------------------------- step axes


@dataclass(frozen=True)
class StepAxis:
    """Where each checkpoint sits on a plot's training-time axis.

    Attributes:
        x: coordinate of each real checkpoint (aligned with ``store.steps``).
        steps: the real checkpoints' steps (for hover text).
        dup_x: coordinates of listed checkpoints that are not training states: whole duplicates, and
            partial ones unless the view includes them (flagged, never plotted as states).
        dup_text: one label per such checkpoint, ``step 3 repeats step 0's weights (not plotted)``.
        title: axis title with unit, saying how step 0 is placed on a log axis.
        log: whether the axis is logarithmic.
        range: fixed axis range in plotly's units (log10 of the coordinate on a log axis).
        hover_label: what a coordinate is, for hover text (``step``, ``step + 1``, ``tokens``, ...).
        edges: ``(S + 1,)`` heatmap cell boundaries around each ``x``: midpoints on a linear axis,
            geometric midpoints on a log axis (so each checkpoint's cell looks right on either).
        tickvals, ticktext: on a checkpoint-index axis, the labelled positions and their steps (or tokens);
            empty on the others (plotly places the ticks).
    """

    x: np.ndarray
    steps: np.ndarray
    dup_x: np.ndarray
    dup_text: tuple[str, ...]
    title: str
    log: bool
    range: tuple[float, float]
    hover_label: str = "step"
    edges: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tickvals: tuple[float, ...] = ()
    ticktext: tuple[str, ...] = ()

    def at(self, step: int) -> float:
        """Coordinate of a real checkpoint's step."""
        return float(self.x[int(np.searchsorted(self.steps, step))])


def _si(n: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}"


def step_axis(store: Store, *, unit: Unit = "step", scale: Scale = "linear") -> StepAxis:
    """The training-time axis for the store's real checkpoints and its duplicates.

    A log axis cannot show step 0, so it plots step + 1 (tokens: tokens + one step's
    tokens) and says so in the title. A checkpoint-index axis plots the i-th real checkpoint
    at i (0, 1, 2, ...), so each checkpoint gets the same width however the run spaced them,
    and labels its ticks with their steps (or tokens); a duplicate sits between its neighbours
    (`index_position`). Hover text and clicks read the real step from each point's customdata.

    Raises:
        ValueError: ``unit="tokens"`` for a store without token counts.
    """
    steps = store.steps
    hidden = store.hidden_steps
    dup_steps = np.array([d for d, _ in hidden], dtype=np.int64)
    dup_text = tuple(f"{text} (not plotted)" for _, text in hidden)
    if scale == "index":
        return index_axis(steps, dup_steps, dup_text, tokens=store.meta.tokens_at(steps) if unit == "tokens" else None)
    log = scale == "log"
    if unit == "tokens":
        tok = store.meta.tokens_at(steps)
        dup_tok = store.meta.tokens_at(dup_steps)
        if tok is None or dup_tok is None:
            raise ValueError("this store records no token counts; use unit='step'")
        shift = store.meta.tokens_per_step or 1.0
        x, dup_x = (tok + shift, dup_tok + shift) if log else (tok, dup_tok)
        title = f"tokens seen + {_si(shift)} (log scale)" if log else "tokens seen"
        hover = f"tokens + {_si(shift)}" if log else "tokens"
    else:
        x = steps.astype(np.float64) + (1 if log else 0)
        dup_x = dup_steps.astype(np.float64) + (1 if log else 0)
        title = "training step + 1 (log scale)" if log else "training step"
        hover = "step + 1" if log else "step"
    if len(x) == 0:
        rng = (0.0, 1.0)
    elif log:
        lo, hi = np.log10(x.min()), np.log10(max(x.max(), x.min() * 10))
        pad = 0.03 * (hi - lo)
        rng = (lo - pad, hi + pad)
    else:
        lo, hi = float(x.min()), float(max(x.max(), x.min() + 1))
        pad = 0.02 * (hi - lo)
        rng = (lo - pad, hi + pad)
    return StepAxis(
        x=x,
        steps=steps,
        dup_x=dup_x,
        dup_text=dup_text,
        title=title,
        log=log,
        range=rng,
        hover_label=hover,
        edges=cell_edges(x, log=log),
    )


def index_position(steps: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Where the steps ``at`` sit on a checkpoint-index axis of ``steps`` (ascending): a listed step at its index,
    one between two checkpoints proportionally between their indices (a duplicate's mark), clipped to the ends."""
    s = np.asarray(steps, dtype=np.float64)
    if len(s) == 0:
        return np.zeros(len(at))
    return np.interp(np.asarray(at, dtype=np.float64), s, np.arange(len(s), dtype=np.float64))


def index_ticks(n: int, *, most: int = INDEX_TICKS) -> np.ndarray:
    """The labelled indices of an axis of ``n`` checkpoints: every ``ceil(n / most)``-th from 0, and the last
    (unless it would crowd the one before)."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    stride = max(1, -(-n // most))
    ticks = list(range(0, n, stride))
    if ticks[-1] != n - 1:
        if n - 1 - ticks[-1] < stride / 2:
            ticks.pop()
        ticks.append(n - 1)
    return np.array(ticks, dtype=np.int64)


def index_axis(
    steps: np.ndarray, dup_steps: np.ndarray, dup_text: tuple[str, ...] = (), *, tokens: np.ndarray | None = None
) -> StepAxis:
    """A checkpoint-index axis (`step_axis` with ``scale="index"``): the i-th checkpoint at x = i, ticks labelled
    with the step (with ``tokens``, the tokens seen), cells one unit wide."""
    steps = np.asarray(steps, dtype=np.int64)
    x = np.arange(len(steps), dtype=np.float64)
    ticks = index_ticks(len(steps))
    if tokens is not None:
        labels = tuple(_si(float(tokens[i])) for i in ticks)
        title = "checkpoint (index; ticks: tokens seen)"
    else:
        labels = tuple(str(int(steps[i])) if steps[i] < 10_000 else _si(float(steps[i])) for i in ticks)
        title = "checkpoint (index; ticks: training step)"
    return StepAxis(
        x=x,
        steps=steps,
        dup_x=index_position(steps, dup_steps),
        dup_text=dup_text,
        title=title,
        log=False,
        range=(-0.5, max(len(steps) - 0.5, 0.5)),
        hover_label="checkpoint",
        edges=cell_edges(x, log=False),
        tickvals=tuple(float(t) for t in ticks),
        ticktext=labels,
    )


def cell_edges(x: np.ndarray, *, log: bool) -> np.ndarray:
    """Boundaries ``(S + 1,)`` of heatmap cells centred on ascending ``x`` (in log10 space on a log axis)."""
    if len(x) == 0:
        return np.zeros(0)
    u = np.log10(x) if log else np.asarray(x, dtype=np.float64)
    if len(u) == 1:
        half = 0.15 if log else 0.5
        e = np.array([u[0] - half, u[0] + half])
    else:
        mid = (u[:-1] + u[1:]) / 2
        e = np.concatenate([[2 * u[0] - mid[0]], mid, [2 * u[-1] - mid[-1]]])
    return 10**e if log else e


def default_steps(steps: np.ndarray, n: int = 5) -> list[int]:
    """About ``n`` checkpoints spread evenly in log(step + 1), always the first and the last."""
    if len(steps) <= n:
        return [int(s) for s in steps]
    pos = np.log1p(steps.astype(np.float64))
    targets = np.linspace(pos[0], pos[-1], n)
    idx = np.unique([int(np.argmin(np.abs(pos - t))) for t in targets])
    return [int(steps[i]) for i in idx]


# --------------------------------------------------------------------------- statistics


def uniform_attention(seq_len: int, repeat: int) -> dict[str, float]:
    """What uniform causal attention scores on each forward statistic (analysis/store/format.py
    ATTENTION_COLUMN_DOCS; docs/design-notes.md section 8): query i (1-based, of T = ``seq_len``) spreads 1/i
    over keys 1..i, so its entropy is log2 i, its span (i - 1)/2, its sink, previous-token and current-token mass
    1/i; the induction score on R = ``repeat`` tokens repeated twice is the mean over k = 1..R-1 of 1/(R + k).
    """
    i = np.arange(1, seq_len + 1, dtype=np.float64)
    k = np.arange(1, repeat, dtype=np.float64)
    h = np.log2(i)
    return {
        "entropy": float(h.mean()),
        "entropy_std": float(h.std()),
        "span": float(np.mean((i - 1) / 2)),
        "sink": float(np.mean(1 / i)),
        "prev_token": float(np.mean(1 / i[1:])),
        "induction": float(np.mean(1 / (repeat + k))),
        "current_token": float(np.mean(1 / i[1:])),
    }


def loss_curve(store: Store) -> tuple[np.ndarray, str] | None:
    """The loss at each of ``store.steps`` for the loss overlay, and its label: the forward lens's loss on
    its evaluation sequences when the store has it, else the validation loss ``run.json`` recorded for a
    run trained here (NaN at steps it lacks); None when the store has neither."""
    loss = store.dense(EVAL_LOSS, "loss")
    if loss is not None and np.isfinite(loss).any():
        return loss, "eval loss (nats/token)"
    losses = store.meta.training_losses
    by_step = {int(r["step"]): r.get("val_loss") for r in losses}
    values = np.array([by_step.get(int(s)) if by_step.get(int(s)) is not None else np.nan for s in store.steps], dtype=np.float64)
    if not np.isfinite(values).any():
        return None
    return values, "validation loss (nats/token)"


def fixed_range(values: np.ndarray, *, log: bool = False, pad: float = 0.04) -> tuple[float, float]:
    """A range that holds every finite value (positive ones on a log axis), padded; in log10 units if ``log``."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)] if log else v[np.isfinite(v)]
    if v.size == 0:
        return (0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if log:
        lo, hi = np.log10(lo), np.log10(hi)
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        lo, hi = lo - 0.5 * max(abs(lo), 1e-12), hi + 0.5 * max(abs(hi), 1e-12)
    span = hi - lo
    return (lo - pad * span, hi + pad * span)


def nan_mean(values: np.ndarray, axis: int) -> np.ndarray:
    """The mean over ``axis`` of the values that are not NaN; NaN, without numpy's "Mean of empty
    slice" warning, where there are none (a sparse statistic such as the refined LLC, estimated
    at a few steps, or a change that ends at the last checkpoint)."""
    v = np.asarray(values, dtype=np.float64)
    present = ~np.isnan(v)
    count = present.sum(axis=axis)
    total = np.where(present, v, 0.0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)


def log10_or_nan(values: np.ndarray) -> np.ndarray:
    """log10 where positive and finite, NaN elsewhere (a gap in a heatmap)."""
    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, np.nan)
    ok = np.isfinite(v) & (v > 0)
    out[ok] = np.log10(v[ok])
    return out


def null_spectra(lam: np.ndarray, store: Store) -> np.ndarray:
    """Typical spectra of a random head with the same Frobenius norm as each row of ``lam`` ``(n, d_head)``."""
    from headwatch.analysis.rmt.nullmodel import null_ordered_spectrum

    return null_ordered_spectrum(lam.mean(axis=1), store.d_head, int(store.d_model))


# --------------------------------------------------------------------------- level crossings (display)


def approach_table(approaches: list[Approach], steps: np.ndarray) -> pd.DataFrame:
    """The approaches as a table for display: step, levels, gap, verdict, swap score."""
    return pd.DataFrame(
        {
            "step": [int(steps[a.t]) for a in approaches],
            "levels": [f"λ_{a.level}, λ_{a.level + 1}" for a in approaches],
            "gap of s, %": [round(100 * a.gap, 2) for a in approaches],
            "verdict": [a.kind for a in approaches],
            "swap score": [round(a.swap_score, 3) for a in approaches],
        }
    )
