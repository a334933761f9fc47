"""The one format of a chart point that opens a head: ``customdata = [layer, head, step, *more]``.

Every figure whose points open a head in the head explorer writes its ``customdata`` with
`head_points` (or `cell_picker`, for heatmaps), and every page reads a click with `picked_head`,
`picked_step` and `picked_run_head`, so a figure cannot write one order while its page reads
another. ``step`` is NaN where a point is not at one checkpoint (a trajectory-map head); anything
more (a heatmap cell's value, a joint map's run index) comes after it. Hover templates name the
fields through `HOVER_HEAD` and `HOVER_STEP`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

LAYER, HEAD, STEP = 0, 1, 2  # positions in customdata; extras start at 3
HOVER_HEAD = "layer %{customdata[0]}, head %{customdata[1]}"
HOVER_STEP = "step %{customdata[2]:,}"


def head_points(layer: Any, head: Any, step: Any = None, *more: Any, dtype: Any = np.float64) -> np.ndarray:
    """``(N, 3 + len(more))`` customdata rows ``[layer, head, step, *more]``, each argument broadcast to N.

    Args:
        layer, head: the heads (scalars or ``(N,)``).
        step: the checkpoint of each point, or None (NaN: not at one checkpoint).
        more: further columns (a cell's value, a run index), after the step.
        dtype: float64, or float32 to halve a large payload (steps stay exact below 2**24).
    """
    columns = [layer, head, np.nan if step is None else step, *more]
    n = max(np.size(c) for c in columns)
    out = np.empty((n, len(columns)), dtype=dtype)
    for i, column in enumerate(columns):
        out[:, i] = np.broadcast_to(np.asarray(column, dtype=dtype), (n,))
    return out


def cell_picker(
    x: Any,
    y: Any,
    values: np.ndarray,
    steps: np.ndarray | None,
    *,
    n_heads: int,
    sym: str,
    xaxis: str = "x",
    yaxis: str = "y",
    heads_on: str = "x",
) -> dict[str, Any]:
    """An invisible marker at the centre of every heatmap cell that carries its hover and makes a click open the head.

    Plotly cannot select a heatmap cell (Streamlit's ``on_select`` sees only selectable traces), so each
    cell gets a transparent scatter point with ``customdata`` ``[layer, head, step, value]`` (`head_points`).
    With ``hoverdistance=-1`` the nearest cell always answers.

    Args:
        x: ``(N,)`` the heads' coordinates, layer-major (category names, or numbers on a numeric axis);
            y: ``(S,)`` the rows' coordinates (the checkpoints').
        values: ``(S, N)`` the raw values (hover).
        steps: ``(S,)`` the rows' steps, or None when the rows are not steps (then step is NaN and not shown).
        heads_on: ``"x"`` when the heads run along the x axis (columns), ``"y"`` when they run along y
            (rows of the figure; ``x`` and ``y`` are then swapped in the trace).
    """
    s, n = values.shape
    x = np.asarray(x)
    xs = np.tile(x, s) if x.dtype.kind in "fiu" else np.tile(x.astype(object), s).tolist()
    ys = np.repeat(np.asarray(y, dtype=np.float32), n)
    head_idx = np.tile(np.arange(n), s)
    custom = head_points(
        head_idx // n_heads,
        head_idx % n_heads,
        None if steps is None else np.repeat(steps, n),
        np.asarray(values, dtype=np.float32).ravel(),
        dtype=np.float32,
    )
    step_text = f"<br>{HOVER_STEP}" if steps is not None else ""
    if heads_on == "y":
        xs, ys = ys, xs
    gl = s * n > 20000
    return dict(
        type="scattergl" if gl else "scatter",
        x=xs,
        y=ys,
        mode="markers",
        xaxis=xaxis,
        yaxis=yaxis,
        customdata=custom,
        showlegend=False,
        name="cells",
        **invisible_markers(gl=gl),
        hovertemplate=(f"{HOVER_HEAD}{step_text}<br>{sym} = %{{customdata[3]:.4g}}<extra>click to open</extra>"),
    )


def clickable(trace: dict[str, Any]) -> dict[str, Any]:
    """A line trace whose points a click can pick: plotly selects only traces with markers (a click on a
    ``mode="lines"`` trace selects nothing, so Streamlit reports no point), so each point gets an invisible marker
    that stays invisible when selected."""
    return {**trace, "mode": "lines+markers", **invisible_markers(size=8, color=(trace.get("line") or {}).get("color"))}


def invisible_markers(*, size: int = 6, color: str | None = "black", gl: bool = False) -> dict[str, Any]:
    """The ``marker``, ``selected`` and ``unselected`` of points that only answer a hover and a click: transparent,
    also once selected, and drawn for one point of the trace only (``maxdisplayed``; not an attribute of WebGL
    traces, ``gl``). Plotly finds the hovered and the clicked point in the trace's data, not among its drawn markers,
    so every point still answers, and the browser draws one SVG path per trace rather than one per point
    (docs/dashboard.md, Performance)."""
    hidden = dict(marker=dict(opacity=0))
    marker: dict[str, Any] = dict(size=size, opacity=0, color=color)
    if not gl:
        marker["maxdisplayed"] = 1
    return dict(marker=marker, selected=hidden, unselected=hidden)


def _clicked(event: Any, n: int) -> Iterator[Any]:
    """The ``customdata`` of each clicked point of a chart's selection event, as given (a typed array
    comes back as a dict keyed "0", "1", ...: then as a list of its first ``n`` entries)."""
    for point in ((event or {}).get("selection") or {}).get("points") or []:
        custom = point.get("customdata")
        yield [custom.get(str(i)) for i in range(n)] if isinstance(custom, dict) else custom


def picked_head(event: Any, *, n_layers: int, n_heads: int) -> tuple[int, int] | None:
    """(layer, head) of the first clicked point that names a head of the run, or None."""
    for custom in _clicked(event, 2):
        try:
            layer, head = int(custom[LAYER]), int(custom[HEAD])
        except (TypeError, ValueError, IndexError, KeyError):
            continue
        if 0 <= layer < n_layers and 0 <= head < n_heads:
            return layer, head
    return None


def picked_step(event: Any, steps: list[int]) -> int | None:
    """The step of the first clicked point at one of the run's checkpoints, or None."""
    for custom in _clicked(event, 3):
        try:
            step = float(custom[STEP])
        except (TypeError, ValueError, IndexError, KeyError):
            continue
        if np.isfinite(step) and int(step) in steps:
            return int(step)
    return None


def picked_row(event: Any, n: int) -> list[float] | None:
    """The first ``n`` customdata entries of the first clicked point that has them all as numbers, or None (a
    composition cell's ``[target layer, target head, step, value, source layer, source head]``)."""
    for custom in _clicked(event, n):
        try:
            row = [float(custom[i]) for i in range(n)]
        except (TypeError, ValueError, IndexError, KeyError):
            continue
        if np.isfinite(row).all():
            return row
    return None


def picked_run_head(event: Any) -> tuple[int, int, int] | None:
    """(run index, layer, head) of the first clicked point of a joint map (run index after the step), or None."""
    for custom in _clicked(event, 4):
        try:
            return int(custom[3]), int(custom[LAYER]), int(custom[HEAD])
        except (TypeError, ValueError, IndexError, KeyError):
            continue
    return None
