"""How alike heads are, from the weights (`views.similarity`; ``similarity.parquet`` and ``ultrametricity.parquet``):
the heads' similarity matrix, in the order `views.similarity.data.shown` gives (a dendrogram's leaves), and how
ultrametric each layer is over training."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import figure, layout, step_xaxis, value_axis
from headwatch.dashboard.figures.points import head_points, invisible_markers

STAT_NAMES = {
    "qk_frob": "W_QK: normalized Frobenius inner product",
    "qk_col": "W_QK: column spaces (what the queries read), mean cos² of the principal angles",
    "qk_row": "W_QK: row spaces (what the keys read), mean cos² of the principal angles",
    "ov_frob": "W_OV: normalized Frobenius inner product",
    "ov_col": "W_OV: column spaces (where the heads write), mean cos² of the principal angles",
    "ov_row": "W_OV: row spaces (what the values read), mean cos² of the principal angles",
}
SHORT = {
    "qk_frob": "⟨W_QK,a, W_QK,b⟩ (normalized)",
    "qk_col": "W_QK column spaces: mean cos²",
    "qk_row": "W_QK row spaces: mean cos²",
    "ov_frob": "⟨W_OV,a, W_OV,b⟩ (normalized)",
    "ov_col": "W_OV column spaces: mean cos²",
    "ov_row": "W_OV row spaces: mean cos²",
}


def similarity_matrix(
    sim: np.ndarray,
    heads: Sequence[tuple[int, int]],
    *,
    step: int,
    stat: str,
    rng: tuple[float, float],
    separators: Sequence[int] = (),
) -> go.Figure:
    """Heads x heads similarity at one checkpoint, heads in the given order (``heads[i]`` is row and column i).

    Args:
        sim: ``(n, n)`` the similarity, rows and columns in the order of ``heads``.
        heads: (layer, head) of each row.
        rng: the colour range (fixed over training by the page).
        separators: positions between which a thin white line separates layers (the all-heads matrix).
    """
    n = len(heads)
    labels = [f"L{a} H{b}" for a, b in heads]
    layer = np.array([a for a, _ in heads])
    head = np.array([b for _, b in heads])
    ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    cells = head_points(layer[ii.ravel()], head[ii.ravel()], step, sim.ravel(), layer[jj.ravel()], head[jj.ravel()])
    signed = stat.endswith("frob")
    colour: dict[str, Any] = (
        dict(colorscale=style.SIGNED_SCALE, zmin=-max(abs(rng[0]), abs(rng[1])), zmax=max(abs(rng[0]), abs(rng[1])))
        if signed
        else dict(colorscale="Viridis", zmin=rng[0], zmax=rng[1])
    )
    traces: list[dict[str, Any]] = [
        dict(
            type="heatmap",
            z=sim.astype(np.float32),
            x=list(range(n)),
            y=list(range(n)),
            hoverinfo="skip",
            colorbar=dict(title=dict(text=SHORT[stat], side="right"), thickness=14),
            **colour,
        ),
        dict(
            type="scatter",
            x=jj.ravel(),
            y=ii.ravel(),
            mode="markers",
            name="pairs",
            customdata=cells,
            **invisible_markers(),
            showlegend=False,
            hovertemplate="L%{customdata[0]} H%{customdata[1]} and L%{customdata[4]} H%{customdata[5]}<br>step "
            f"%{{customdata[2]:,}}<br>{SHORT[stat]} = %{{customdata[3]:.4g}}<extra>click to open the row's head</extra>",
        ),
    ]
    shapes = [
        dict(type="line", x0=p - 0.5, x1=p - 0.5, y0=-0.5, y1=n - 0.5, line=dict(color="white", width=1.5)) for p in separators
    ] + [dict(type="line", y0=p - 0.5, y1=p - 0.5, x0=-0.5, x1=n - 0.5, line=dict(color="white", width=1.5)) for p in separators]
    ticks = list(range(n)) if n <= 64 else list(range(0, n, max(1, n // 32)))
    return figure(
        traces,
        layout(
            height=max(380, min(900, 22 * n + 180)),
            margin=dict(l=92, r=114, t=40, b=90),
            hoverdistance=-1,
            shapes=shapes,
            xaxis=dict(
                range=[-0.5, n - 0.5],
                tickvals=ticks,
                ticktext=[labels[t] for t in ticks],
                tickangle=-90,
                title=dict(text="head"),
                scaleanchor="y",
            ),
            yaxis=dict(range=[n - 0.5, -0.5], tickvals=ticks, ticktext=[labels[t] for t in ticks], title=dict(text="head")),
        ),
    )


def ultrametric_lines(
    axis: StepAxis, share: np.ndarray, baseline: np.ndarray, *, layers: Sequence[int], distance: str
) -> go.Figure:
    """Each layer's share of ultrametric triangles over training, its random-heads baseline dotted.

    Args:
        axis: the training-time axis, aligned with the rows of ``share``.
        share, baseline: ``(S, L)`` per checkpoint and layer (NaN where not computed).
        layers: the L layers' indices.
    """
    colours = style.layer_colours(max(layers) + 1 if len(layers) else 1)
    traces: list[dict[str, Any]] = []
    for j, layer in enumerate(layers):
        keep = np.isfinite(share[:, j])
        traces.append(
            dict(
                type="scatter",
                x=axis.x[keep],
                y=share[keep, j],
                mode="lines+markers",
                marker=dict(size=4),
                line=dict(color=colours[layer], width=1.8),
                name=f"L{layer}",
                customdata=np.column_stack([np.full(int(keep.sum()), layer), axis.steps[keep]]).tolist(),
                hovertemplate=f"layer {layer}<br>step %{{customdata[1]:,}}<br>ultrametric share %{{y:.3f}}<extra></extra>",
            )
        )
        keep_b = np.isfinite(baseline[:, j])
        if keep_b.any():
            traces.append(
                dict(
                    type="scatter",
                    x=axis.x[keep_b],
                    y=baseline[keep_b, j],
                    mode="lines",
                    line=dict(color=colours[layer], width=1, dash="dot"),
                    name=f"L{layer} random heads",
                    showlegend=False,
                    hovertemplate=f"layer {layer}: random heads of the same shapes %{{y:.3f}}<extra></extra>",
                )
            )
    both = np.concatenate([share[np.isfinite(share)], baseline[np.isfinite(baseline)]])
    return figure(
        traces,
        layout(
            height=380,
            margin=dict(style.MARGIN, l=78),
            xaxis=step_xaxis(axis),
            yaxis=value_axis(
                f"share of ultrametric triangles ({distance} distance)", fixed_range(both, pad=0.06) if both.size else (0, 1)
            ),
        ),
    )
