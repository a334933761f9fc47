"""Circuits between heads over training: the composition matrix animated over checkpoints, and one head's strongest
sources and targets as lines (`views.circuits.page`; the scores come from ``composition.parquet``, as a matrix of
heads by `views.circuits.data.pair_matrix`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import FRAME_MS, figure, layout, play_menu, step_xaxis, value_axis
from headwatch.dashboard.figures.heads_axis import head_labels
from headwatch.dashboard.figures.points import head_points, invisible_markers
from headwatch.dashboard.style import MARGIN

KIND_NAMES = {"q": "Q-composition", "k": "K-composition", "v": "V-composition"}
KIND_READS = {
    "q": "B's queries read A's output",
    "k": "B's keys read A's output",
    "v": "B's values read A's output",
}
PATH_COLOUR = "#d62728"
# A matrix cell's customdata: target layer, head, step (NaN), source layer, head, then each frame's values.
SOURCE_LAYER, SOURCE_HEAD = 3, 4
CELL_VALUES = 5
# Above this many cells x frames, the matrix is drawn at the chosen step only (no frames to play).
MAX_ANIMATED_CELLS = 3_000_000


def matrix_left_margin(labels: Sequence[str]) -> int:
    """The composition map's left margin in px: its axis title and its longest head label (``L5 H7``: 92 px, as
    Plotly's ``automargin`` lays it out at Streamlit's 12 px tick font; 7 px more per character beyond 5).

    The map's y axis does without ``automargin``: with it Plotly measures every tick label on each draw to size the
    margin, about half the map's draw (`docs/dashboard.md`, Performance), although the labels' widths follow from
    their characters."""
    return 92 + 7 * max(0, max((len(label) for label in labels), default=0) - 5)


def composition_animation(
    matrix: np.ndarray,
    *,
    steps: Sequence[int],
    start: int,
    n_heads: int,
    kind: str,
    unit: str,
    paths: list[np.ndarray] | None = None,
    types: list[list[str]] | None = None,
    divisor: float = 1.0,
    frame_ms: int = FRAME_MS,
    title: str = "",
) -> go.Figure:
    """Target heads x source heads, the composition score of each pair, one frame per checkpoint.

    Args:
        matrix: ``(S, N, N)`` values (rows: target B, columns: source A; NaN where A is not in an earlier layer).
        steps: the S checkpoints (frame names).
        start: index of the frame shown first (the page's ``step``).
        n_heads: heads per layer (labels ``L{layer} H{head}``).
        kind: ``q``, ``k`` or ``v``.
        unit: what a value is (colour-bar title): the score, or the score over the random baseline.
        paths: per frame, ``(P, 2)`` (source index, target index) pairs to ring: each induction head's strongest
            previous-token source (`analysis.findings.paths.strongest_paths`).
        types: per frame, per head (layer-major), the types it holds there (``previous-token, induction``; ``""``:
            none), named in each cell's hover; None without head types.
        divisor: what ``matrix`` was divided by (the random-heads mean; 1: raw scores): the hover gives the raw score
            and, when not 1, the ratio to random heads.
        title: put before each frame's ``step N`` title.

    What the browser gets: what changes over training once per frame, the rest once. Each frame carries the matrix
    (``z``), the ring, its title, its step (the pairs trace's ``meta[0]``) and a hovertemplate naming its columns.
    Each cell's ``customdata`` is sent once: ``[target layer, head, step (NaN), source layer, head]`` (`head_points`;
    the source at `SOURCE_LAYER`, `SOURCE_HEAD`), then, from `CELL_VALUES` on, at each frame in turn the raw score
    and, when ``divisor`` is not 1, the ratio to random heads. The cells' types (B's as ``text``, A's as
    ``hovertext``) are sent once per set of types: in the base trace when they never change, else as frames named
    ``types K``, never played, that each step frame names as its ``baseframe`` (Plotly merges that one first).
    A frame's data replaces the attributes it names and leaves the others as they are, so at every frame the pairs
    trace shows that frame's step, values and types, and a click reads the cell's heads from ``customdata`` and the
    step from ``meta`` (`dashboard.newtab`).
    """
    s, n, _ = matrix.shape
    n_layers = n // n_heads
    labels = head_labels(n_layers, n_heads)
    finite = np.isfinite(matrix)
    lo, hi = fixed_range(matrix[finite] if finite.any() else np.zeros(1), pad=0.0)
    lo = min(lo, 0.0)
    tgt, src = np.nonzero(finite.any(axis=0))  # every cell that has a score at some checkpoint
    animated = s * len(tgt) <= MAX_ANIMATED_CELLS
    frames_at = list(range(s)) if animated else [start]
    per = 2 if divisor != 1.0 else 1  # value columns per frame: the raw score, then its ratio to random heads
    values = matrix[frames_at][:, tgt, src]  # (F, C) each drawn frame's value of each cell
    columns = np.stack([values * divisor, values], axis=1)[:, :per]  # (F, per, C)
    # One row per cell, the same in every frame: [target layer, head, step (NaN: every frame's), source layer,
    # head, then per frame its columns]; a frame names its own columns in its hovertemplate and its step in meta.
    cells = head_points(
        tgt // n_heads,
        tgt % n_heads,
        None,
        src // n_heads,
        src % n_heads,
        *columns.reshape(len(frames_at) * per, len(tgt)),
        dtype=np.float32,
    )
    held = [tuple(types[i]) for i in frames_at] if types is not None else []  # per drawn frame, each head's types
    # a cell's types: B's as its text, A's as its hovertext (the hover's "B: ..." and "A: ..." are in the template)
    texts = {
        h: dict(text=[h[b] or "no type" for b in tgt], hovertext=[h[a] or "no type" for a in src]) for h in dict.fromkeys(held)
    }
    shared = {h: f"types {k}" for k, h in enumerate(texts)} if len(texts) > 1 else {}  # a frame per set of types

    def hover(j: int) -> str:
        """The hover of the ``j``-th drawn frame: its step is the trace's ``meta[0]``, its values its columns."""
        raw = CELL_VALUES + per * j
        return (
            f"target B: L%{{customdata[0]}} H%{{customdata[1]}}<br>source A: L%{{customdata[{SOURCE_LAYER}]}} "
            f"H%{{customdata[{SOURCE_HEAD}]}}<br>step %{{meta[0]:,}}<br>{KIND_NAMES[kind]} = %{{customdata[{raw}]:.4g}}"
            + (f" = %{{customdata[{raw + 1}]:.2f}}× random heads" if per == 2 else "")
            + ("<br>B: %{text}<br>A: %{hovertext}" if types is not None else "")
            + "<extra>click: B with A, in a new tab</extra>"
        )

    def frame_data(j: int) -> list[dict[str, Any]]:
        i = frames_at[j]
        ring = paths[i] if paths is not None and len(paths[i]) else np.zeros((0, 2), dtype=np.int64)
        return [
            dict(type="heatmap", z=matrix[i].astype(np.float32)),
            dict(type="scatter", hovertemplate=hover(j), meta=[int(steps[i])]),
            dict(type="scatter", x=ring[:, 0].tolist(), y=ring[:, 1].tolist()),
        ]

    j_start = frames_at.index(start)
    first = frame_data(j_start)
    first[0].update(
        x=list(range(n)),
        y=list(range(n)),
        zmin=lo,
        zmax=hi,
        colorscale="Viridis",
        hoverinfo="skip",
        colorbar=dict(title=dict(text=unit, side="right"), thickness=14),
    )
    first[1].update(
        x=src,
        y=tgt,
        customdata=cells,
        mode="markers",
        name="pairs",
        showlegend=False,
        **invisible_markers(),
        **(texts[held[j_start]] if texts else {}),
    )
    first[2].update(
        mode="markers",
        name="each induction head's strongest previous-token source (K-composition)",
        showlegend=paths is not None,
        marker=dict(symbol="square-open", size=max(6, min(16, 560 // max(n, 1))), color=PATH_COLOUR, line=dict(width=2)),
        hoverinfo="skip",
    )
    # The cells' types text changes only where a head gains or loses a type: each set once, as a frame that is never
    # played but that every step frame with those types builds on (its baseframe).
    frames: list[dict[str, Any]] = [
        dict(name=name, data=[dict(type="scatter", **texts[k])], traces=[1]) for k, name in shared.items()
    ]
    frames += [
        dict(
            name=str(steps[i]),
            data=frame_data(j),
            traces=[0, 1, 2],
            layout=dict(title=dict(text=f"{title} · step {steps[i]:,}" if title else f"step {steps[i]:,}")),
            **({"baseframe": shared[held[j]]} if shared else {}),
        )
        for j, i in enumerate(frames_at)
    ]
    ticks = list(range(n)) if n <= 64 else list(range(0, n, n_heads))
    lay = layout(
        height=max(480, min(1000, 26 * n + 200)),
        margin=dict(l=matrix_left_margin([labels[t] for t in ticks]), r=108, t=56, b=168),
        hoverdistance=-1,
        title=dict(text=f"{title} · step {steps[start]:,}" if title else f"step {steps[start]:,}", x=0.01, xanchor="left"),
        xaxis=dict(
            title=dict(text="source head A (writes to the residual stream)"),
            range=[-0.5, n - 0.5],
            tickvals=ticks,
            ticktext=[labels[t] for t in ticks],
            tickangle=-90,
        ),
        yaxis=dict(
            title=dict(text=f"target head B ({KIND_READS[kind]})"),
            automargin=False,  # the left margin holds its labels (`matrix_left_margin`): no measuring of each label
            range=[n - 0.5, -0.5],
            tickvals=ticks,
            ticktext=[labels[t] for t in ticks],
        ),
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="right", x=1.0),
        updatemenus=[play_menu(steps, start, frame_ms=frame_ms, y=-0.16)] if animated and s > 1 else [],
    )
    return figure(first, lay, frames if animated else None)


def partner_lines(
    axis: StepAxis,
    values: np.ndarray,
    partners: Sequence[tuple[int, int]],
    *,
    kind: str,
    unit: str,
    role: str,
    baseline: float | None = None,
) -> go.Figure:
    """One head's strongest partners over training: one line per partner head.

    Args:
        axis: the training-time axis (`dashboard.data.step_axis`), aligned with ``values``' first axis.
        values: ``(S, P)`` the score of each partner at each checkpoint (NaN where not computed).
        partners: the P partner heads (layer, head), in legend order.
        role: ``source`` or ``target`` (what a partner is to the chosen head; hover and legend).
        baseline: the random-heads value in the same unit (a dotted line), or None.
    """
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    traces: list[dict[str, Any]] = []
    for j, (layer, head) in enumerate(partners):
        y = values[:, j]
        keep = np.isfinite(y)
        traces.append(
            dict(
                type="scatter",
                x=axis.x[keep],
                y=y[keep],
                mode="lines+markers",
                marker=dict(size=4),
                line=dict(color=colours[j % len(colours)], width=1.8),
                name=f"{role} L{layer} H{head}",
                customdata=head_points(layer, head, axis.steps[keep]).tolist(),
                hovertemplate=f"{role} L{layer} H{head}<br>step %{{customdata[2]:,}}<br>{KIND_NAMES[kind]} = "
                "%{y:.4g}<extra>click to open</extra>",
            )
        )
    finite = values[np.isfinite(values)]
    rng = fixed_range(np.append(finite, baseline) if baseline is not None else finite, pad=0.06) if finite.size else (0, 1)
    shapes = []
    if baseline is not None:
        shapes.append(
            dict(type="line", xref="paper", x0=0, x1=1, y0=baseline, y1=baseline, line=dict(color="#777", dash="dot", width=1))
        )
    return figure(
        traces,
        layout(
            height=360,
            margin=dict(MARGIN, l=72),
            xaxis=step_xaxis(axis),
            yaxis=value_axis(f"{KIND_NAMES[kind]} ({unit})", rng),
            shapes=shapes,
        ),
    )
