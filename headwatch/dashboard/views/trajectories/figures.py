"""The trajectory map: one point per head, placed by UMAP of its training trajectory, with kNN edges."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.analysis.trajectories.maps import edge_pairs
from headwatch.dashboard import style
from headwatch.dashboard.data import fixed_range
from headwatch.dashboard.figures.common import figure, layout, value_axis, value_axis_margin
from headwatch.dashboard.figures.points import head_points

MAP_HEIGHT = 620  # px: the maps are square-ish at the page's width


def _segments(x: np.ndarray, y: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges as one polyline: x0, x1, NaN, x0, x1, NaN, ..."""
    n = len(pairs)
    sx = np.full(3 * n, np.nan)
    sy = np.full(3 * n, np.nan)
    sx[0::3], sx[1::3] = x[pairs[:, 0]], x[pairs[:, 1]]
    sy[0::3], sy[1::3] = y[pairs[:, 0]], y[pairs[:, 1]]
    return sx, sy


def trajectory_map(
    x: np.ndarray,
    y: np.ndarray,
    layer: np.ndarray,
    head: np.ndarray,
    neighbors: np.ndarray,
    *,
    n_layers: int,
    highlight: int | None = None,
    method: str = "UMAP",
    sparks: list[str] | None = None,
    groups: np.ndarray | None = None,
    group_names: list[str] | None = None,
    group_colours: list[str] | None = None,
    group_title: str = "",
) -> go.Figure:
    """Heads as points coloured by layer (or by a grouping), joined to their nearest trajectories by grey edges.

    Args:
        x, y: ``(N,)`` map coordinates, heads in layer-major order.
        layer, head: ``(N,)`` each point's layer and head (hover names it).
        neighbors: ``(N, k)`` layer-major indices of each head's nearest trajectories.
        n_layers: number of layers (colour scale range).
        highlight: layer-major index of a head to ring, the edges to its own k nearest drawn darker.
        method: how the map was made (axis titles).
        sparks: one line of text per head shown in its hover (its trajectory in miniature,
            `views.trajectories.data.maps.sparklines`).
        groups: ``(N,)`` int group of each head (a head type, a cluster) to colour by instead of the layer: one
            legend entry per group, named by ``group_names`` and drawn in ``group_colours``, under ``group_title``.
    """
    pairs = edge_pairs(np.asarray(neighbors, dtype=np.int64)) if len(neighbors) else np.zeros((0, 2), dtype=np.int64)
    ex, ey = _segments(x, y, pairs)
    traces = [
        dict(
            type="scatter",
            x=ex,
            y=ey,
            mode="lines",
            line=dict(color=style.EDGE_COLOUR, width=0.8),
            hoverinfo="skip",
            name="k nearest trajectories",
            showlegend=False,
        ),
    ]
    traces += _head_traces(x, y, layer, head, n_layers, sparks, groups, group_names, group_colours)
    if highlight is not None and 0 <= highlight < len(x):
        nearest = np.asarray(neighbors[highlight] if len(neighbors) > highlight else [], dtype=np.int64)
        hx, hy = _segments(x, y, np.stack([np.full(len(nearest), highlight), nearest], axis=1))
        traces.insert(
            1,
            dict(
                type="scatter",
                x=hx,
                y=hy,
                mode="lines",
                line=dict(color="#333", width=1.6),
                hoverinfo="skip",
                name="its nearest trajectories",
                showlegend=False,
            ),
        )
        traces.append(
            dict(
                type="scatter",
                x=[x[highlight]],
                y=[y[highlight]],
                mode="markers",
                name="highlighted head",
                showlegend=False,
                marker=dict(size=18, color="rgba(0,0,0,0)", line=dict(color="#111", width=2.5)),
                hovertemplate=f"layer {int(layer[highlight])}, head {int(head[highlight])} (highlighted)<extra></extra>",
            )
        )
    y_range = fixed_range(y, pad=0.06)
    left = value_axis_margin(y_range, MAP_HEIGHT)
    return figure(
        traces,
        layout(
            height=MAP_HEIGHT,
            showlegend=groups is not None,
            legend=dict(title=dict(text=group_title)),
            # coloured by layer, the colour bar and its title stand right of the plot
            margin=dict(style.MARGIN, l=left, **({"r": 96} if groups is None else {})),
            xaxis=value_axis(f"map coordinate 1 ({method}, arbitrary units)", fixed_range(x, pad=0.06), zeroline=False),
            yaxis=value_axis(f"map coordinate 2 ({method}, arbitrary units)", y_range, zeroline=False),
        ),
    )


def _head_traces(
    x: np.ndarray,
    y: np.ndarray,
    layer: np.ndarray,
    head: np.ndarray,
    n_layers: int,
    sparks: list[str] | None,
    groups: np.ndarray | None,
    group_names: list[str] | None,
    group_colours: list[str] | None,
) -> list[dict[str, Any]]:
    """The heads' points: one trace coloured by layer, or one trace per group (legend entries)."""
    hover = (
        "layer %{customdata[0]}, head %{customdata[1]}"
        + ("<br>%{text}" if sparks is not None else "")
        + "<extra>%{fullData.name} · click to open</extra>"
    )
    outline = dict(color="rgba(40,40,40,0.6)", width=0.6)
    if groups is None:
        return [
            dict(
                type="scatter",
                x=x,
                y=y,
                mode="markers",
                name="heads",
                customdata=head_points(layer, head).tolist(),  # plain lists: a click returns them as such
                marker=dict(
                    color=layer,
                    cmin=-0.5,
                    cmax=n_layers - 0.5,
                    colorscale=style.layer_steps(n_layers),
                    size=10,
                    line=outline,
                    showscale=True,
                    colorbar=dict(title=dict(text="layer", side="right"), thickness=14, tick0=0, dtick=max(1, n_layers // 8)),
                ),
                **({"text": sparks} if sparks is not None else {}),
                hovertemplate=hover.replace("%{fullData.name} · ", ""),
            )
        ]
    names = group_names or [str(g) for g in range(int(np.max(groups)) + 1)]
    colours = group_colours or list(style.layer_colours(len(names)))
    traces = []
    for g, name in enumerate(names):
        idx = np.flatnonzero(np.asarray(groups) == g)
        if not len(idx):
            continue
        traces.append(
            dict(
                type="scatter",
                x=np.asarray(x)[idx],
                y=np.asarray(y)[idx],
                mode="markers",
                name=f"{name} ({len(idx)})",
                showlegend=True,
                customdata=head_points(np.asarray(layer)[idx], np.asarray(head)[idx]).tolist(),
                marker=dict(color=colours[g % len(colours)], size=10, line=outline),
                **({"text": [sparks[i] for i in idx]} if sparks is not None else {}),
                hovertemplate=hover,
            )
        )
    return traces


def joint_trajectory_map(
    x: np.ndarray,
    y: np.ndarray,
    run: np.ndarray,
    layer: np.ndarray,
    head: np.ndarray,
    neighbors: np.ndarray,
    *,
    runs: list[str],
    n_layers: list[int],
    method: str = "UMAP",
    groups: np.ndarray | None = None,
    group_names: list[str] | None = None,
    group_colours: list[str] | None = None,
    group_title: str = "",
) -> go.Figure:
    """The heads of several runs on one map: one marker symbol (and legend entry) per run, every head
    coloured by its relative depth (layer / n_layers of its run), or by its group when ``groups`` is given,
    grey edges to its nearest trajectories.

    The legend stands right of the map, from its top down (the runs, then the groups under ``group_title``), clear
    of the figure's title above the plot; filled by depth, the colour bar takes the lower half beneath it. Filled by
    a group, every head is outlined in one dark grey and the runs' legend entries are their symbols alone, so the
    only colours on the map are the groups' (`dashboard.style.JOINT_CLUSTER_COLOURS` for the joint clusters, none
    of them a run's).

    Args:
        x, y: ``(N,)`` map coordinates.
        run, layer, head: ``(N,)`` each point's run (an index into ``runs``), layer and head.
        neighbors: ``(N, k)`` row indices of each point's nearest trajectories in the joint set.
        runs: the runs' names; n_layers: each run's number of layers.
        groups: ``(N,)`` int group of each head (its run, its type, its joint cluster) to fill it by instead of
            its depth: one legend entry per group, named by ``group_names`` in ``group_colours`` (default: the
            joint clusters' colours), under ``group_title`` (the hover names the group too).
    """
    run, layer, head = (np.asarray(a, dtype=np.int64) for a in (run, layer, head))
    depth = layer / np.asarray(n_layers, dtype=np.float64)[run]
    pairs = edge_pairs(np.asarray(neighbors, dtype=np.int64)) if len(neighbors) else np.zeros((0, 2), dtype=np.int64)
    ex, ey = _segments(x, y, pairs)
    traces: list[dict[str, Any]] = [
        dict(
            type="scatter",
            x=ex,
            y=ey,
            mode="lines",
            line=dict(color=style.EDGE_COLOUR, width=0.8),
            hoverinfo="skip",
            name="k nearest trajectories",
            showlegend=False,
        ),
    ]
    names = group_names or ([str(g) for g in range(int(np.max(groups)) + 1)] if groups is not None else [])
    colours = group_colours or [style.JOINT_CLUSTER_COLOURS[g % len(style.JOINT_CLUSTER_COLOURS)] for g in range(len(names))]
    for i, name in enumerate(runs):
        on = run == i
        symbol = style.RUN_SYMBOLS[i % len(style.RUN_SYMBOLS)]
        label = f"{name} ({int(on.sum())} heads)"
        if groups is None:
            fill: dict[str, Any] = dict(
                color=depth[on],
                cmin=0,
                cmax=1,
                colorscale=style.LAYER_SCALE,
                showscale=i == 0,
                colorbar=dict(
                    title=dict(text="relative depth<br>(layer / n_layers)", side="right"),
                    thickness=14,
                    len=0.5,
                    y=0,
                    yanchor="bottom",  # the lower half: the legend of the runs stands above it
                ),
            )
            said, text, outline = "", None, style.run_colour(i)
        else:
            g = np.asarray(groups, dtype=np.int64)[on]
            fill = dict(color=[colours[int(v)] for v in g])
            said, text, outline = f"<br>{group_title}: %{{text}}", [names[int(v)] for v in g], style.GROUP_OUTLINE
            traces.append(  # the run's legend entry: its symbol alone (its points are filled by their groups)
                dict(
                    type="scatter",
                    x=[None],
                    y=[None],
                    mode="markers",
                    name=label,
                    legendgroup=f"run {i}",
                    legendgrouptitle=dict(text="run (marker)") if i == 0 else None,
                    marker=dict(symbol=symbol, size=10, color="white", line=dict(color=outline, width=1.5)),
                    meta=dict(run=name, kind="run"),
                    hoverinfo="skip",
                )
            )
        traces.append(
            dict(
                type="scatter",
                x=x[on],
                y=y[on],
                mode="markers",
                name=label,
                legendgroup=f"run {i}",
                showlegend=groups is None,
                customdata=head_points(layer[on], head[on], None, run[on]).tolist(),
                text=text,
                meta=dict(run=name, kind="heads"),
                marker=dict(symbol=symbol, size=10, line=dict(color=outline, width=1.5), **fill),
                hovertemplate=f"{name}<br>layer %{{customdata[0]}} of {n_layers[i]}, head %{{customdata[1]}}{said}"
                "<extra>click to open</extra>",
            )
        )
    for g, (gname, colour) in enumerate(zip(names, colours, strict=True)):  # the groups' legend: a swatch each
        traces.append(
            dict(
                type="scatter",
                x=[None],
                y=[None],
                mode="markers",
                name=gname,
                marker=dict(color=colour, size=10, symbol="square"),
                legendgroup="groups",
                legendgrouptitle=dict(text=group_title) if g == 0 else None,
                meta=dict(kind="group"),
                hoverinfo="skip",
            )
        )
    y_range = fixed_range(y, pad=0.06)
    left = value_axis_margin(y_range, MAP_HEIGHT)
    return figure(
        traces,
        layout(
            height=MAP_HEIGHT,
            showlegend=True,
            legend=dict(  # right of the map, from its top: never under the title, which stands above the plot
                orientation="v", x=1.02, xanchor="left", y=1, yanchor="top", font=dict(size=11)
            ),
            margin=dict(style.MARGIN, l=left),
            xaxis=value_axis(f"map coordinate 1 ({method}, arbitrary units)", fixed_range(x, pad=0.06), zeroline=False),
            yaxis=value_axis(f"map coordinate 2 ({method}, arbitrary units)", y_range, zeroline=False),
        ),
    )
