"""Figures of one head's spectrum: lambda_k over (training time, k), lambda_k at the chosen steps beside stable rank
and spectral entropy, lambda_0..lambda_3 over training and their close approaches (crossings, repulsions)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from headwatch.analysis.stats.crossings import Crossings
from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import duplicate_shapes, figure, layout, step_marks, step_xaxis, value_axis
from headwatch.dashboard.labels import Stat
from headwatch.dashboard.views.head.figures.over_training import slices_layout, step_map, time_traces

K_TITLE = "singular-value index k (0 = largest)"


def spectrum_map(axis: StepAxis, lam: np.ndarray, *, chosen_x: Sequence[float] = (), colours: Sequence[str] = ()) -> go.Figure:
    """lambda_k = s_k^2 of one head over (training time, k), log colour.

    Args:
        axis: the step axis; lam: ``(S, d_head)`` descending per row.
    """
    return step_map(
        axis,
        np.arange(lam.shape[1]),
        lam,
        colour_title="λ_k (raw units²)",
        y_axis=value_axis(K_TITLE, (-0.5, lam.shape[1] - 0.5)),
        hover="k = %{y}<br>log10 λ_k = %{z:.3f}",
        chosen_x=chosen_x,
        colours=colours,
    )


def spectrum_slices(
    lam: np.ndarray,
    *,
    labels: Sequence[str],
    colours: Sequence[str],
    axis: StepAxis,
    chosen_idx: Sequence[int],
    stable_rank: np.ndarray,
    entropy: np.ndarray,
    stats: tuple[Stat, Stat],
    lam_range: tuple[float, float],
    null_lam: np.ndarray | None = None,
    compare: Sequence[tuple[int, int, tuple[np.ndarray, np.ndarray]]] = (),
) -> go.Figure:
    """lambda_k versus k at the chosen steps (left, log scale); stable rank and spectral entropy over training (right).

    Args:
        lam: ``(n, d_head)`` spectra at the n chosen steps.
        lam_range: fixed log10 range of lambda over the whole run.
        stable_rank, entropy: ``(S,)`` over training.
        null_lam: ``(n, d_head)`` typical spectra of a random head at matched scale, drawn
            dotted in the matching colours (`analysis.rmt.nullmodel.null_ordered_spectrum`).
    """
    k = np.arange(lam.shape[1])
    traces = [
        dict(
            type="scatter",
            x=k,
            y=lam[i],
            mode="lines+markers",
            name=label,
            line=dict(color=colour, width=1.6),
            marker=dict(size=3),
            hovertemplate=f"{label}<br>k = %{{x}}<br>λ_k = %{{y:.4g}}<extra></extra>",
        )
        for i, (label, colour) in enumerate(zip(labels, colours, strict=False))
    ]
    if null_lam is not None:
        traces += [
            dict(
                type="scatter",
                x=k,
                y=null_lam[i],
                mode="lines",
                name="random head, same norm" if i == 0 else label,
                showlegend=i == 0,
                legendgroup="null",
                line=dict(color=colour, width=1.2, dash="dot"),
                hovertemplate=f"null at {label}<br>k = %{{x}}<br>λ_k = %{{y:.4g}}<extra></extra>",
            )
            for i, (label, colour) in enumerate(zip(labels, colours, strict=False))
        ]
    right = ((stats[0], stable_rank), (stats[1], entropy))
    traces += time_traces(axis, right, chosen_idx, colours, compare)
    return figure(
        traces,
        slices_layout(
            axis,
            value_axis(K_TITLE, (-0.5, lam.shape[1] - 0.5)),
            value_axis("λ_k = s_k² (raw units²)", lam_range, log=True),
            right,
            chosen_idx,
            colours,
            (),
            compare,
        ),
    )


def leading_lambdas(
    axis: StepAxis, lam: np.ndarray, *, chosen_x: Sequence[float] = (), colours: Sequence[str] = (), log_y: bool = False
) -> go.Figure:
    """lambda_0 .. lambda_3 of one head over training.

    Args:
        lam: ``(S, m)``, m >= 1 leading values per step (at most 4 are drawn).
    """
    n = min(4, lam.shape[1])
    traces = [
        dict(
            type="scatter",
            x=axis.x,
            y=lam[:, j],
            mode="lines",
            name=f"λ_{j}",
            line=dict(color=style.LEADING_COLOURS[j], width=2),
            customdata=axis.steps,
            hovertemplate=f"step %{{customdata}}<br>λ_{j} = %{{y:.4g}}<extra></extra>",
        )
        for j in range(n)
    ]
    return figure(
        traces,
        layout(
            xaxis=step_xaxis(axis),
            yaxis=value_axis("λ_k = s_k² (raw units²)", fixed_range(lam[:, :n], log=log_y), log=log_y),
            shapes=duplicate_shapes(axis) + step_marks(list(chosen_x), list(colours)),
        ),
    )


APPROACH_MARKERS = {  # how each verdict of `analysis.stats.crossings` is drawn
    "crossing": dict(symbol="x-thin", color="#c0392b", size=13, line=dict(color="#c0392b", width=3)),
    "repulsion": dict(symbol="circle-open", color="#1f3b73", size=12, line=dict(color="#1f3b73", width=2.5)),
    "unresolved": dict(symbol="diamond-open", color="#888888", size=11, line=dict(color="#888888", width=2)),
}


def level_crossings(
    axis: StepAxis,
    lam: np.ndarray,
    crossings: Crossings,
    *,
    chosen_x: Sequence[float] = (),
    colours: Sequence[str] = (),
    log_y: bool = False,
) -> go.Figure:
    """lambda_0 .. lambda_3 over training with each close approach marked as a crossing or a repulsion
    (top), and how much each level kept its singular directions between consecutive checkpoints (bottom).

    Args:
        lam: ``(S, >= m)`` lambda_k per step; the first ``m = crossings.kept.shape[1]`` are drawn.
        crossings: from `analysis.stats.crossings.level_crossings`.
        log_y: log lambda axis.
    """
    m = crossings.kept.shape[1]
    top = dict(xaxis="x", yaxis="y")
    bottom = dict(xaxis="x2", yaxis="y2", showlegend=False)
    traces: list[dict] = [
        dict(
            type="scatter",
            x=axis.x,
            y=lam[:, j],
            mode="lines",
            name=f"λ_{j}",
            legendgroup=f"l{j}",
            line=dict(color=style.LEADING_COLOURS[j], width=2),
            customdata=axis.steps,
            hovertemplate=f"step %{{customdata}}<br>λ_{j} = %{{y:.4g}}<extra></extra>",
            **top,
        )
        for j in range(m)
    ]
    for kind, marker in APPROACH_MARKERS.items():
        found = [a for a in crossings.approaches if a.kind == kind]
        t = np.array([a.t for a in found], dtype=int)
        lvl = np.array([a.level for a in found], dtype=int)
        traces.append(
            dict(
                type="scatter",
                mode="markers",
                name=kind,
                marker=marker,
                x=axis.x[t],
                y=np.sqrt(lam[t, lvl] * lam[t, lvl + 1]),
                customdata=np.column_stack([axis.steps[t], lvl, lvl + 1, [a.gap for a in found], [a.swap_score for a in found]])
                if found
                else np.zeros((0, 5)),
                hovertemplate=(
                    f"step %{{customdata[0]}}: λ_%{{customdata[1]}} and λ_%{{customdata[2]}}, {kind}<br>"
                    "relative gap of s: %{customdata[3]:.3f}<br>swap score: %{customdata[4]:.2f}<extra></extra>"
                ),
                **top,
            )
        )
    pair_steps = np.column_stack([axis.steps[:-1], axis.steps[1:]])
    for j in range(m):
        traces.append(
            dict(
                type="scatter",
                x=axis.x[1:],
                y=crossings.kept[:, j],
                mode="lines+markers",
                name=f"λ_{j} kept",
                legendgroup=f"l{j}",
                line=dict(color=style.LEADING_COLOURS[j], width=1.5),
                marker=dict(size=4),
                customdata=pair_steps,
                hovertemplate=(f"step %{{customdata[0]}} → %{{customdata[1]}}<br>O_{j}{j} = %{{y:.3f}}<extra></extra>"),
                **bottom,
            )
        )
    marks = list(chosen_x), list(colours)
    return figure(
        traces,
        layout(
            height=style.HEIGHT + 140,
            xaxis=step_xaxis(axis, anchor="y", matches="x2", showticklabels=False, title=dict(text="")),
            yaxis=value_axis("λ_k = s_k² (raw units²)", fixed_range(lam[:, :m], log=log_y), log=log_y, domain=[0.34, 1.0]),
            xaxis2=step_xaxis(axis, anchor="y2"),
            yaxis2=value_axis("direction kept O_kk", (-0.04, 1.04), domain=[0.0, 0.26]),
            shapes=duplicate_shapes(axis)
            + step_marks(*marks)
            + duplicate_shapes(axis, xref="x2", yref="y2")
            + step_marks(*marks, xref="x2", yref="y2"),
        ),
    )
