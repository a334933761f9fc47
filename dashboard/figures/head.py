"""Figures of one head over training: its weight density, its spectrum, one statistic in context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.stats.crossings import Crossings
from dashboard import style
from dashboard.data import StepAxis, fixed_range, log10_or_nan, nan_mean
from dashboard.figures.common import (
    colour_layer,
    duplicate_shapes,
    figure,
    layout,
    step_marks,
    step_xaxis,
    value_axis,
    with_gaps,
)
from dashboard.figures.points import clickable
from dashboard.labels import Stat

K_TITLE = "singular-value index k (0 = largest)"


def w_title(matrix_name: str = "W_QK") -> str:
    """The P(w) axes' title: ``w: entry of W_OV (raw units)`` for the matrix shown."""
    return f"w: entry of {matrix_name} (raw units)"


def _step_custom(axis: StepAxis, rows: int) -> np.ndarray:
    return np.broadcast_to(axis.steps, (rows, len(axis.steps)))


def density_map(
    axis: StepAxis,
    w: np.ndarray,
    density: np.ndarray,
    *,
    chosen_x: Sequence[float] = (),
    colours: Sequence[str] = (),
    matrix_name: str = "W_QK",
) -> go.Figure:
    """P(w) of one head as a map over (training time, w), log colour.

    Args:
        axis: the step axis (its ``x`` matches the rows of ``density``).
        w: ``(W,)`` grid of entry values in raw units.
        density: ``(S, W)`` p(w) in 1/raw unit; NaN where no entry falls.
        chosen_x, colours: chosen steps (axis coordinates), marked by ticks along the top.
        matrix_name: the matrix whose entries ``w`` are (``W_QK``, ``W_OV``), named on the w axis.
    """
    return _step_map(
        axis,
        w,
        density,
        colour_title="p(w) (1 / raw unit)",
        y_axis=value_axis(w_title(matrix_name), (float(w[0]), float(w[-1]))),
        hover="w = %{y:.3g}<br>log10 p(w) = %{z:.2f}",
        chosen_x=chosen_x,
        colours=colours,
    )


def _step_map(
    axis: StepAxis,
    y: np.ndarray,
    values: np.ndarray,
    *,
    colour_title: str,
    y_axis: dict,
    hover: str,
    chosen_x: Sequence[float],
    colours: Sequence[str],
) -> go.Figure:
    """A log-colour heatmap over (training time, y) of ``values`` ``(S, len(y))``, chosen steps ticked on top.

    The colour bar lies under the time axis, across the plot: the right margin then holds no more than the curves'
    (the loss axis), so the page's charts over training share their margins (`stacked`) in a narrow column too.
    """
    colour = colour_layer(values, log=True, title=colour_title)
    colour["colorbar"] = dict(
        colour["colorbar"],
        title=dict(text=f"{colour_title} (log colour)", side="bottom"),
        orientation="h",
        x=0,
        xanchor="left",
        y=-0.3,
        yanchor="top",
        len=1,
        thickness=10,
    )
    heat = dict(
        type="heatmap",
        x=axis.edges,
        y=y,
        z=colour.pop("z").T,
        customdata=_step_custom(axis, len(y)),
        hovertemplate=f"step %{{customdata}}<br>{hover}<extra></extra>",
        **colour,
    )
    return figure(
        [heat],
        layout(
            xaxis=step_xaxis(axis),
            yaxis=y_axis,
            shapes=duplicate_shapes(axis) + step_marks(list(chosen_x), list(colours), full=False),
        ),
    )


def _slices_layout(
    axis: StepAxis,
    left_x: dict,
    left_y: dict,
    right: tuple[tuple[Stat, np.ndarray], ...],
    chosen_idx: Sequence[int],
    colours: Sequence[str],
    bands: Sequence[Any] = (),
    compare: Sequence[tuple[int, int, tuple[np.ndarray, ...]]] = (),
) -> dict[str, Any]:
    """A wide left panel (x, y) and two stacked right panels (x2/y2 top, x3/y3 bottom) over training time."""
    lay = layout(
        height=style.HEIGHT + 20,
        xaxis=dict(left_x, domain=[0.0, 0.55], anchor="y"),
        yaxis=dict(left_y, domain=[0.0, 1.0], anchor="x"),
        shapes=[],
    )
    for i, ((stat, values), dom) in enumerate(zip(right, ([0.57, 1.0], [0.0, 0.43]), strict=False), start=2):
        lay[f"xaxis{i}"] = step_xaxis(
            axis,
            domain=[0.68, 1.0],
            anchor=f"y{i}",
            title=dict(text=axis.title if i == 3 else ""),
            showticklabels=i == 3,
            nticks=5,
        )
        band = bands[i - 2] if len(bands) > i - 2 else None
        shown = np.concatenate([with_band(values, band)] + [np.ravel(c[2][i - 2]) for c in compare])
        lay[f"yaxis{i}"] = value_axis(stat.title(), fixed_range(shown), domain=dom, anchor=f"x{i}")
        lay["shapes"] += band_shapes(band, xref=f"x{i}", yref=f"y{i}")
        lay["shapes"] += step_marks([axis.x[j] for j in chosen_idx], list(colours), xref=f"x{i}", yref=f"y{i}")
        lay["shapes"] += duplicate_shapes(axis, xref=f"x{i}", yref=f"y{i}")
    lay["xaxis2"]["matches"] = "x3"
    return lay


def band_shapes(band: Any, *, xref: str = "x", yref: str = "y", log: bool = False) -> list[dict]:
    """A grey band (the random-head 5-95% range, ``band.lo`` .. ``band.hi``) across a panel, its mean dotted.

    On a log axis (``log``) Plotly places shapes in log10 units.
    """
    if band is None or not (np.isfinite(band.lo) and np.isfinite(band.hi)):
        return []
    lo, hi, mean = band.lo, band.hi, band.mean
    if log:
        if min(lo, hi, mean) <= 0:
            return []
        lo, hi, mean = np.log10(lo), np.log10(hi), np.log10(mean)
    return [
        dict(
            type="rect",
            xref=f"{xref} domain",
            yref=yref,
            x0=0,
            x1=1,
            y0=lo,
            y1=hi,
            layer="below",
            line=dict(width=0),
            fillcolor=style.REFERENCE_FILL,
        ),
        dict(
            type="line",
            xref=f"{xref} domain",
            yref=yref,
            x0=0,
            x1=1,
            y0=mean,
            y1=mean,
            layer="below",
            line=dict(color=style.REFERENCE_LINE, width=1, dash="dot"),
        ),
    ]


def with_band(values: np.ndarray, band: Any) -> np.ndarray:
    """``values`` and the band's ends, so a fixed range computed from them shows the band too."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if band is None or not (np.isfinite(band.lo) and np.isfinite(band.hi)):
        return v
    return np.append(v, [band.lo, band.hi])


def _time_traces(
    axis: StepAxis,
    right: tuple[tuple[Stat, np.ndarray], ...],
    chosen_idx: Sequence[int],
    colours: Sequence[str],
    compare: Sequence[tuple[int, int, tuple[np.ndarray, ...]]] = (),
) -> list[dict]:
    """Each right-panel statistic over training, with the chosen steps as coloured markers, and compared heads
    (``(layer, head, (values of panel 1, values of panel 2))``) dotted."""
    traces = []
    for j, (c_layer, c_head, series) in enumerate(compare):
        for i, values in enumerate(series, start=2):
            traces.append(
                dict(
                    type="scatter",
                    x=axis.x,
                    y=values,
                    mode="lines",
                    xaxis=f"x{i}",
                    yaxis=f"y{i}",
                    showlegend=False,
                    name=f"L{c_layer} H{c_head}",
                    line=dict(color=COMPARE_COLOURS[j % len(COMPARE_COLOURS)], width=1.4, dash="dot"),
                    customdata=np.stack([np.full(len(axis.x), c_layer), np.full(len(axis.x), c_head), axis.steps], axis=1),
                    hovertemplate=f"L{c_layer} H{c_head}<br>step %{{customdata[2]}}<br>%{{y:.4g}}<extra>click to open</extra>",
                )
            )
    idx = list(chosen_idx)
    for i, (stat, values) in enumerate(right, start=2):
        ax = dict(xaxis=f"x{i}", yaxis=f"y{i}", showlegend=False)
        traces.append(
            dict(
                type="scatter",
                x=axis.x,
                y=values,
                mode="lines",
                line=dict(color="#555", width=1.8),
                name=stat.symbol,
                customdata=axis.steps,
                hovertemplate=f"step %{{customdata}}<br>{stat.symbol} = %{{y:.4g}}<extra></extra>",
                **ax,
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=axis.x[idx],
                y=values[idx],
                mode="markers",
                name=stat.symbol,
                marker=dict(color=list(colours), size=9, line=dict(color="white", width=1)),
                customdata=axis.steps[idx],
                hovertemplate=f"step %{{customdata}}: {stat.symbol} = %{{y:.4g}}<extra></extra>",
                **ax,
            )
        )
    return traces


def density_slices(
    w: np.ndarray,
    p: np.ndarray,
    *,
    labels: Sequence[str],
    colours: Sequence[str],
    axis: StepAxis,
    chosen_idx: Sequence[int],
    sigma: np.ndarray,
    kl: np.ndarray,
    stats: tuple[Stat, Stat],
    w_range: tuple[float, float],
    p_range: tuple[float, float],
    log_p: bool = True,
    gauss: Sequence[tuple[float, float]] = (),
    bands: Sequence[Any] = (),
    standardized: bool = False,
    compare: Sequence[tuple[int, int, tuple[np.ndarray, np.ndarray]]] = (),
    matrix_name: str = "W_QK",
) -> go.Figure:
    """P(w) at the chosen steps overlaid (left); sigma(t) and D_KL(t) with those steps marked (right).

    Args:
        w, p: ``(n, B)`` bin centres (raw units) and densities of the n chosen steps.
        labels, colours: one per chosen step.
        axis: the step axis; ``chosen_idx`` indexes its checkpoints.
        sigma, kl: ``(S,)`` the head's sigma and D_KL over training.
        stats: the `Stat` entries of sigma and D_KL (axis titles).
        w_range: fixed w range (raw units); p_range: fixed density range (log10 units if ``log_p``).
        log_p: logarithmic density axis.
        gauss: ``(mu, sigma)`` per chosen step: the Gaussian of the same mean and sigma, dashed in the step's colour.
        bands: the random-head references of sigma and D_KL (`analysis.rmt.references.Reference`), drawn as grey bands.
        standardized: ``w`` and ``p`` are z = (w - mu)/sigma and p_z (the x axis says so).
        compare: other heads' ``(layer, head, (sigma, kl))`` over training, dotted on the right panels.
        matrix_name: the matrix whose entries ``w`` are (``W_QK``, ``W_OV``), named on the w axis.
    """
    var, dens = ("z", "p(z)") if standardized else ("w", "p(w)")
    traces = [
        dict(
            type="scatter",
            x=w[i],
            y=p[i],
            mode="lines",
            name=label,
            line=dict(color=colour, width=1.8),
            hovertemplate=f"{label}<br>{var} = %{{x:.3g}}<br>{dens} = %{{y:.3g}}<extra></extra>",
        )
        for i, (label, colour) in enumerate(zip(labels, colours, strict=False))
    ]
    for i, ((mu, sd), label, colour) in enumerate(zip(gauss, labels, colours, strict=False)):
        x = np.linspace(w_range[0], w_range[1], 241)
        g = np.exp(-0.5 * ((x - mu) / sd) ** 2) / (sd * np.sqrt(2 * np.pi)) if sd > 0 else np.full_like(x, np.nan)
        traces.append(
            dict(
                type="scatter",
                x=x,
                y=np.where(g > 0, g, np.nan),
                mode="lines",
                name=f"Gaussian, {label}",
                legendgroup="gauss",
                showlegend=i == 0,
                line=dict(color=colour, width=1, dash="dash"),
                hovertemplate=f"N(μ, σ) of {label}<br>{var} = %{{x:.3g}}<br>{dens} = %{{y:.3g}}<extra></extra>",
            )
        )
    right = ((stats[0], sigma), (stats[1], kl))
    traces += _time_traces(axis, right, chosen_idx, colours, compare)
    x_title = "z = (w − μ)/σ (standardized)" if standardized else w_title(matrix_name)
    y_title = "p(z)" if standardized else "p(w) (1 / raw unit)"
    return figure(
        traces,
        _slices_layout(
            axis,
            value_axis(x_title, w_range),
            value_axis(y_title, p_range, log=log_p),
            right,
            chosen_idx,
            colours,
            bands,
            compare,
        ),
    )


def spectrum_map(axis: StepAxis, lam: np.ndarray, *, chosen_x: Sequence[float] = (), colours: Sequence[str] = ()) -> go.Figure:
    """lambda_k = s_k^2 of one head over (training time, k), log colour.

    Args:
        axis: the step axis; lam: ``(S, d_head)`` descending per row.
    """
    return _step_map(
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
    traces += _time_traces(axis, right, chosen_idx, colours, compare)
    return figure(
        traces,
        _slices_layout(
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


COMPARE_COLOURS = ("#e377c2", "#17becf", "#bcbd22", "#8c564b", "#ff7f0e", "#2ca02c")  # overlaid other heads


def head_in_layer(
    axis: StepAxis,
    values: np.ndarray,
    *,
    head: int,
    stat: Stat,
    k: int | None = None,
    y_range: tuple[float, float],
    log_y: bool = False,
    chosen_x: Sequence[float] = (),
    colours: Sequence[str] = (),
    layer: int = 0,
    compare: Sequence[tuple[int, int, np.ndarray]] = (),
    band: Any = None,
) -> go.Figure:
    """One statistic of the chosen head over training, its layer's other heads behind it and the layer mean.

    Args:
        values: ``(S, n_heads)`` the statistic for every head of the layer.
        head: the head drawn in front.
        y_range: fixed range (log10 units if ``log_y``), shared by every layer and head.
        layer: the head's layer (hover, and a click on another head of the layer opens it).
        compare: other heads to overlay, from any layer: ``(layer, head, values (S,))`` each.
        band: the statistic's random-head reference, a grey band (`analysis.rmt.references.Reference`), or None.
    """
    n_heads = values.shape[1]
    other_heads = np.delete(np.arange(n_heads), head)
    others = np.delete(values, head, axis=1).T  # (n_heads - 1, S)
    gx, gy = with_gaps(axis.x, others)
    sym = stat.short(k)
    hx = np.repeat(other_heads, len(axis.x) + 1)
    traces = [
        clickable(
            dict(
                type="scatter",
                x=gx,
                y=gy,
                mode="lines",
                name="other heads of the layer",
                line=dict(color=style.CONTEXT_COLOUR, width=1),
                customdata=np.stack([np.full(len(hx), layer), hx], axis=1),  # [layer, head]: a click opens it
                hovertemplate=f"L{layer} H%{{customdata[1]}}<br>{sym} = %{{y:.4g}}<extra>click to open</extra>",
            )
        ),
        dict(
            type="scatter",
            x=axis.x,
            y=nan_mean(values, axis=1),
            mode="lines",
            name="layer mean",
            line=dict(color=style.LAYER_MEAN_COLOUR, dash=style.LAYER_MEAN_DASH, width=style.LAYER_MEAN_WIDTH),
            customdata=axis.steps,
            hovertemplate=f"step %{{customdata}}<br>layer mean {sym} = %{{y:.4g}}<extra></extra>",
        ),
        dict(
            type="scatter",
            x=axis.x,
            y=values[:, head],
            mode="lines",
            name=f"head {head}",
            line=dict(color="#1f3b73", width=style.FOCUS_WIDTH),
            customdata=axis.steps,
            hovertemplate=f"step %{{customdata}}<br>head {head}: {sym} = %{{y:.4g}}<extra></extra>",
        ),
    ]
    for i, (c_layer, c_head, c_values) in enumerate(compare):
        traces.append(
            clickable(
                dict(
                    type="scatter",
                    x=axis.x,
                    y=c_values,
                    mode="lines",
                    name=f"L{c_layer} H{c_head}",
                    line=dict(color=COMPARE_COLOURS[i % len(COMPARE_COLOURS)], width=2, dash="dot"),
                    customdata=np.stack([np.full(len(axis.x), c_layer), np.full(len(axis.x), c_head), axis.steps], axis=1),
                    hovertemplate=f"L{c_layer} H{c_head}<br>step %{{customdata[2]}}<br>{sym} = %{{y:.4g}}"
                    "<extra>click to open</extra>",
                )
            )
        )
    return figure(
        traces,
        layout(
            xaxis=step_xaxis(axis),
            yaxis=value_axis(stat.title(k), y_range, log=log_y),
            shapes=band_shapes(band, log=log_y) + duplicate_shapes(axis) + step_marks(list(chosen_x), list(colours)),
        ),
    )


def log_density_range(p: np.ndarray, *, floor_decades: float = 8.0) -> tuple[float, float]:
    """Fixed log10 range for densities: the peak down to its smallest value, at most ``floor_decades`` below."""
    lp = log10_or_nan(p)
    if not np.isfinite(lp).any():
        return (-1.0, 1.0)
    hi = float(np.nanmax(lp))
    lo = max(float(np.nanmin(lp)), hi - floor_decades)
    pad = 0.04 * (hi - lo if hi > lo else 1.0)
    return (lo - pad, hi + pad)


def z_range(hist: np.ndarray) -> tuple[float, float]:
    """A fixed z range holding every occupied histogram bin of the run (``hist`` ``(S, 202)``, tails excluded)."""
    from analysis.store.format import HIST_Z_EDGES

    occupied = np.flatnonzero(np.asarray(hist)[:, 1:-1].sum(axis=0) > 0)
    if occupied.size == 0:
        return (-4.0, 4.0)
    lo, hi = float(HIST_Z_EDGES[occupied[0]]), float(HIST_Z_EDGES[occupied[-1] + 1])
    return (lo - 0.2, hi + 0.2)


MATRIX_COLOURS = {"qk": "#1f4e9c", "ov": "#c2410c"}  # W_QK blue, W_OV orange, on every both-matrices chart


def both_matrices(
    axis: StepAxis,
    series: dict[str, np.ndarray],
    *,
    stat: Stat,
    k: int | None = None,
    y_range: tuple[float, float],
    log_y: bool = False,
) -> go.Figure:
    """One head's statistic for W_QK and W_OV over training on one pair of axes (shared x and y).

    Args:
        series: matrix (``qk``, ``ov``) -> ``(S,)`` the head's values at every checkpoint of ``axis``.
        y_range: fixed range over both matrices (log10 units if ``log_y``).
    """
    names = {"qk": "W_QK", "ov": "W_OV"}
    traces = [
        dict(
            type="scatter",
            x=axis.x,
            y=values,
            mode="lines+markers",
            name=names.get(m, m),
            line=dict(color=MATRIX_COLOURS.get(m, "#444"), width=2),
            marker=dict(size=4),
            customdata=axis.steps,
            hovertemplate=f"{names.get(m, m)}<br>step %{{customdata:,}}<br>{stat.short(k)} = %{{y:.4g}}<extra></extra>",
        )
        for m, values in series.items()
    ]
    return figure(
        traces,
        layout(
            showlegend=True,
            legend=dict(orientation="h", x=0, y=1.02, xanchor="left", yanchor="bottom"),
            xaxis=step_xaxis(axis),
            yaxis=value_axis(stat.title(k), y_range, log=log_y),
            shapes=duplicate_shapes(axis),
        ),
    )
