"""Figures of several runs side by side: depth-bin means over training, one bin's heads per run, the
distribution over heads at a point of training, and the runs' losses (Compare runs page).

Every run is drawn at its own checkpoints (markers on the lines), one colour per run
(`dashboard.style.run_colour`); the binning and the alignment are `analysis.findings.runs`'s. Each data
trace carries ``meta`` (``run``, ``kind`` and its bin, layer or step) so tests and readers can find it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.analysis.findings.runs import RunSeries, bin_label, bin_layers, bin_summary
from headwatch.dashboard import style
from headwatch.dashboard.data import fixed_range
from headwatch.dashboard.figures.common import figure, layout, value_axis, with_gaps


def time_axis(series: list[RunSeries], *, title: str, log: bool, **extra: Any) -> dict[str, Any]:
    """An x axis holding every run's checkpoints (log: ``x + shift``), range fixed over all of them; ``title`` empty
    (a panel's second and later axes, which share the first's) leaves it untitled."""
    xs = np.concatenate([s.plot_x(log=log) for s in series]) if series else np.zeros(0)
    out = dict(
        type="log" if log else "linear",
        range=list(fixed_range(xs, log=log, pad=0.02)),
        title=dict(text=(f"{title} + one step (log scale)" if log else title) if title else ""),  # untitled: no stray unit
    )
    out.update(extra)
    return out


def index_axes(fig: go.Figure, ticks: tuple[list[float], list[str]]) -> go.Figure:
    """``fig``'s time axes (every x axis) as a checkpoint-index axis: linear, ticks at ``ticks``' positions labelled
    with their times (`analysis.findings.runs.index_labels`), range around every index; each trace's ``x`` must already
    be its index (`analysis.findings.runs.on_index`)."""
    vals, text = ticks
    hi = max(vals, default=0.0)
    for key in [k for k in fig.layout.to_plotly_json() if k.startswith("xaxis")]:
        fig.layout[key].update(type="linear", range=[-0.5, hi + 0.5], tickmode="array", tickvals=vals, ticktext=text)
    return fig


def _panels(n: int, gap: float = 0.02) -> list[tuple[float, float]]:
    width = (1 - gap * (n - 1)) / n
    return [(max(0.0, i * (width + gap)), min(1.0, i * (width + gap) + width)) for i in range(n)]


def _axis_names(i: int) -> tuple[str, str, str]:
    """Plotly's names of the i-th panel's axes: ('x', 'y', '') for the first, ('x2', 'y2', '2') after."""
    n = "" if i == 0 else str(i + 1)
    return f"x{n}", f"y{n}", n


def _finite_range(arrays: list[np.ndarray], *, log: bool) -> tuple[float, float]:
    values = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.zeros(0)
    return fixed_range(values, log=log)


def depth_bands(
    series: list[RunSeries],
    *,
    n_bins: int,
    stat_title: str,
    x_title: str,
    log_x: bool = False,
    log_y: bool = False,
    colours: list[int] | None = None,
) -> go.Figure:
    """The statistic's mean over the heads of each relative-depth bin over training, with a band of
    +-1 standard deviation (population, over the same heads): one panel per bin, one colour per run.

    Args:
        series: the runs (`analysis.findings.runs.RunSeries`).
        n_bins: relative-depth bins (`analysis.findings.runs.depth_bins`).
        stat_title: the value axis's title (symbol and unit).
        x_title: what the aligned time is.
        log_x, log_y: log axes.
        colours: each run's colour index (default: its position).
    """
    colours = colours or list(range(len(series)))
    domains = _panels(n_bins)
    summaries = [bin_summary(s.values, n_bins) for s in series]
    y_range = _finite_range([m - sd for m, sd, _ in summaries] + [m + sd for m, sd, _ in summaries], log=log_y)
    lay = layout(
        height=style.HEIGHT,
        annotations=[],
        margin=dict(style.MARGIN, t=84),
        legend=dict(orientation="h", yanchor="bottom", y=1.09, xanchor="left", x=0, font=dict(size=11)),
    )
    traces: list[dict[str, Any]] = []
    for b, dom in enumerate(domains):
        xa, ya, n = _axis_names(b)
        lay[f"xaxis{n}"] = time_axis(
            series,
            title=x_title if b == 0 else "",
            log=log_x,
            domain=list(dom),
            anchor=ya,
            nticks=4,
            **({"matches": "x"} if b else {}),
        )
        lay[f"yaxis{n}"] = value_axis(
            stat_title if b == 0 else "", y_range, log=log_y, anchor=xa, showticklabels=b == 0, **({"matches": "y"} if b else {})
        )
        lay["annotations"].append(
            dict(
                text=f"depth {bin_label(b, n_bins)}",
                xref=f"{xa} domain",
                yref=f"{ya} domain",
                x=0.5,
                y=1.0,
                xanchor="center",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=12),
            )
        )
        for s, (mean, sd, count), c in zip(series, summaries, colours, strict=False):
            if count[b] == 0:
                continue
            x = s.plot_x(log=log_x)
            ok = np.isfinite(mean[:, b]) & np.isfinite(sd[:, b])
            layers = bin_layers(s.n_layers, n_bins, b)
            where = f"L{layers[0]}" + (f"-{layers[-1]}" if len(layers) > 1 else "")
            traces.append(
                dict(
                    type="scatter",
                    x=np.concatenate([x[ok], x[ok][::-1]]),
                    y=np.concatenate([(mean[:, b] + sd[:, b])[ok], (mean[:, b] - sd[:, b])[ok][::-1]]),
                    xaxis=xa,
                    yaxis=ya,
                    mode="lines",
                    fill="toself",
                    fillcolor=style.run_colour(c, 0.15),
                    line=dict(width=0, color=style.run_colour(c)),
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=s.run,
                    name=f"{s.run} ±1 sd",
                    meta=dict(run=s.run, kind="band", bin=b),
                )
            )
            traces.append(
                dict(
                    type="scatter",
                    x=x,
                    y=mean[:, b],
                    xaxis=xa,
                    yaxis=ya,
                    mode="lines+markers",
                    name=s.run,
                    legendgroup=s.run,
                    showlegend=b == 0,
                    line=dict(color=style.run_colour(c), width=2),
                    marker=dict(size=5),
                    customdata=np.stack([s.steps, sd[:, b]], axis=1),
                    meta=dict(run=s.run, kind="mean", bin=b, layers=layers),
                    hovertemplate=f"{s.run} ({where}, {int(count[b])} heads)<br>step %{{customdata[0]:,}}<br>"
                    "mean = %{y:.4g}, sd = %{customdata[1]:.3g}<extra></extra>",
                )
            )
    return figure(traces, lay)


def bin_heads(
    series: list[RunSeries],
    *,
    b: int,
    n_bins: int,
    stat_title: str,
    x_title: str,
    log_x: bool = False,
    log_y: bool = False,
    colours: list[int] | None = None,
    unit: str = "H",
) -> go.Figure:
    """One relative-depth bin's heads over training, one panel per run, every panel on the same axes.

    Each head is a thin line with a marker at each of its run's checkpoints; the bin's mean over its
    heads is dashed black. ``unit`` names a unit in hover text (``H`` for heads; per-layer statistics pass "").
    """
    colours = colours or list(range(len(series)))
    domains = _panels(max(len(series), 1), gap=0.03)
    parts = [s.values[:, bin_layers(s.n_layers, n_bins, b), :] for s in series]
    y_range = _finite_range(parts, log=log_y)
    lay = layout(height=style.HEIGHT, annotations=[], showlegend=False, margin=dict(style.MARGIN, t=60))
    traces: list[dict[str, Any]] = []
    for i, (s, part, c, dom) in enumerate(zip(series, parts, colours, domains, strict=False)):
        xa, ya, n = _axis_names(i)
        lay[f"xaxis{n}"] = time_axis(
            series,
            title=x_title if i == 0 else "",
            log=log_x,
            domain=list(dom),
            anchor=ya,
            nticks=4,
            **({"matches": "x"} if i else {}),
        )
        lay[f"yaxis{n}"] = value_axis(
            stat_title if i == 0 else "", y_range, log=log_y, anchor=xa, showticklabels=i == 0, **({"matches": "y"} if i else {})
        )
        layers = bin_layers(s.n_layers, n_bins, b)
        title = f"{s.run}: layers {', '.join(map(str, layers))} of {s.n_layers}" if layers else f"{s.run}: no layer in this bin"
        lay["annotations"].append(
            dict(
                text=title,
                xref=f"{xa} domain",
                yref=f"{ya} domain",
                x=0.5,
                y=1.0,
                xanchor="center",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=12),
            )
        )
        x = s.plot_x(log=log_x)
        n_steps, n_units = len(x), s.values.shape[2]
        for j, layer in enumerate(layers):
            gx, gy = with_gaps(x, part[:, j, :].T)
            units = np.repeat(np.arange(n_units), n_steps + 1)
            steps = np.tile(np.append(s.steps, -1), n_units)
            traces.append(
                dict(
                    type="scatter",
                    x=gx,
                    y=gy,
                    xaxis=xa,
                    yaxis=ya,
                    mode="lines+markers",
                    name=f"{s.run} L{layer}",
                    line=dict(color=style.run_colour(c, 0.45), width=style.THIN_WIDTH),
                    marker=dict(size=3),
                    customdata=np.stack([units, steps], axis=1),
                    meta=dict(run=s.run, kind="heads", layer=layer),
                    hovertemplate=f"{s.run} L{layer}"
                    + (f" {unit}%{{customdata[0]}}" if unit else "")
                    + "<br>step %{customdata[1]:,}<br>"
                    "%{y:.4g}<extra></extra>",
                )
            )
        if layers:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a step where every value is NaN
                mean = np.nanmean(part[:, : len(layers)].reshape(n_steps, -1), axis=1)
            traces.append(
                dict(
                    type="scatter",
                    x=x,
                    y=mean,
                    xaxis=xa,
                    yaxis=ya,
                    mode="lines",
                    name=f"{s.run} bin mean",
                    line=dict(color="#111", dash="dash", width=2),
                    customdata=s.steps,
                    meta=dict(run=s.run, kind="bin mean"),
                    hovertemplate=f"{s.run} bin mean<br>step %{{customdata:,}}<br>%{{y:.4g}}<extra></extra>",
                )
            )
    return figure(traces, lay)


def distributions(
    series: list[RunSeries],
    indices: list[int | None],
    *,
    stat_title: str,
    x_label: str,
    colours: list[int] | None = None,
    log_x: bool = False,
    unit: str = "head",
) -> go.Figure:
    """The empirical cumulative distribution of the statistic over all heads (``unit``s) of each run at one checkpoint.

    Args:
        indices: each run's checkpoint (an index into its ``steps``), or None to leave the run out.
        x_label: how to name a checkpoint's aligned time in the legend (``fraction``, ``tokens``, ...).
    """
    colours = colours or list(range(len(series)))
    traces: list[dict[str, Any]] = []
    all_values = []
    for s, i, c in zip(series, indices, colours, strict=False):
        if i is None:
            continue
        v = np.sort(s.values[i].ravel())
        v = v[np.isfinite(v)]
        all_values.append(v)
        n = len(v)
        at = "" if x_label == "step" else f", {x_label} {s.x[i]:.4g}"
        traces.append(
            dict(
                type="scatter",
                x=v,
                y=np.arange(1, n + 1) / max(n, 1),
                mode="lines+markers",
                line_shape="hv",
                name=f"{s.run} · step {int(s.steps[i]):,}{at}",
                line=dict(color=style.run_colour(c), width=2),
                marker=dict(size=4),
                meta=dict(run=s.run, kind="ecdf", step=int(s.steps[i]), index=int(i)),
                hovertemplate=f"{s.run}, step {int(s.steps[i]):,}<br>%{{x:.4g}}: %{{y:.3f}} of {n} {unit}s at or below"
                "<extra></extra>",
            )
        )
    return figure(
        traces,
        layout(
            height=style.HEIGHT,
            margin=dict(style.MARGIN, l=72),
            xaxis=value_axis(stat_title, _finite_range(all_values, log=log_x), log=log_x),
            yaxis=value_axis(f"fraction of {unit}s at or below", (0.0, 1.02)),
        ),
    )


def losses(
    curves: list[tuple[RunSeries, np.ndarray, str]], *, x_title: str, log_x: bool = False, colours: list[int] | None = None
) -> go.Figure:
    """Each run's recorded loss at its own checkpoints on the common time axis (``curves``: run, loss, label)."""
    colours = colours or list(range(len(curves)))
    traces = [
        dict(
            type="scatter",
            x=s.plot_x(log=log_x),
            y=np.asarray(loss, dtype=np.float64),
            mode="lines+markers",
            name=f"{s.run} ({label})",
            line=dict(color=style.run_colour(c), width=2),
            marker=dict(size=5),
            customdata=s.steps,
            meta=dict(run=s.run, kind="loss"),
            hovertemplate=f"{s.run}<br>step %{{customdata:,}}<br>{label} = %{{y:.4f}}<extra></extra>",
        )
        for (s, loss, label), c in zip(curves, colours, strict=False)
    ]
    return figure(
        traces,
        layout(
            height=style.SMALL_HEIGHT + 60,
            xaxis=time_axis([s for s, _, _ in curves], title=x_title, log=log_x),
            yaxis=value_axis("loss (nats/token)", _finite_range([loss for _, loss, _ in curves], log=False)),
        ),
    )


# One dash per head type on the counts chart (the run keeps its colour), in `analysis.store.format.HEAD_TYPES` order.
TYPE_DASHES = {"previous_token": "solid", "induction": "dash", "sink": "dot"}


def type_counts(
    series: list[RunSeries], *, types: tuple[str, ...], x_title: str, log_x: bool = False, colours: list[int] | None = None
) -> go.Figure:
    """How many heads hold each type at each checkpoint: one line per run (colour) and type (dash).

    Args:
        series: per run, ``values`` ``(S, 1, len(types))`` the counts (`analysis.findings.held_types.HeadTypes.counts`).
        types: the types, in the order of the last axis.
    """
    colours = colours or list(range(len(series)))
    traces = []
    for s, c in zip(series, colours, strict=False):
        for i, name in enumerate(types):
            traces.append(
                dict(
                    type="scatter",
                    x=s.plot_x(log=log_x),
                    y=np.asarray(s.values[:, 0, i], dtype=np.float64),
                    mode="lines+markers",
                    name=f"{s.run}: {name}",
                    line=dict(color=style.run_colour(c), width=2, dash=TYPE_DASHES.get(name, "solid")),
                    marker=dict(size=5),
                    customdata=s.steps,
                    meta=dict(run=s.run, kind="type_count", type=name),
                    hovertemplate=f"{s.run}<br>step %{{customdata:,}}<br>%{{y:d}} {name} heads<extra></extra>",
                )
            )
    top = max([float(np.nanmax(s.values)) for s in series if s.values.size] + [1.0])
    return figure(
        traces,
        layout(
            height=style.SMALL_HEIGHT + 60,
            xaxis=time_axis(series, title=x_title, log=log_x),
            yaxis=value_axis("heads holding the type", (0.0, top * 1.08 + 0.5)),
        ),
    )


def scaling_points(points: list[tuple[str, np.ndarray, np.ndarray, list[str]]], *, y_title: str) -> go.Figure:
    """Timescales against model size on log-log axes: one marker series per quantity (a head type's first emergence,
    a statistic's consolidation in the first or last layer), one point per run, hover naming the run.

    Args:
        points: ``(name, parameters (R,), times (R,), runs)`` per quantity; non-finite or non-positive times are
            left out.
        y_title: what the y axis holds (its unit, e.g. "training step (log)").
    """
    traces: list[dict[str, Any]] = []
    xs, ys = [], []
    for i, (name, params, times, runs) in enumerate(points):
        p, t = np.asarray(params, dtype=np.float64), np.asarray(times, dtype=np.float64)
        ok = np.isfinite(p) & np.isfinite(t) & (p > 0) & (t > 0)
        if not ok.any():
            continue
        xs.append(p[ok])
        ys.append(t[ok])
        traces.append(
            dict(
                type="scatter",
                x=p[ok],
                y=t[ok],
                mode="markers",
                name=name,
                text=[r for r, keep in zip(runs, ok, strict=True) if keep],
                marker=dict(size=10, color=style.run_colour(i), symbol=style.RUN_SYMBOLS[i % len(style.RUN_SYMBOLS)]),
                hovertemplate=f"{name}<br>%{{text}}: %{{x:,}} parameters, %{{y:,}}<extra></extra>",
            )
        )
    x = np.concatenate(xs) if xs else np.array([1.0, 10.0])
    y = np.concatenate(ys) if ys else np.array([1.0, 10.0])
    pad = 0.15
    x_rng = (float(np.log10(x.min())) - pad, float(np.log10(x.max())) + pad)
    y_rng = (float(np.log10(y.min())) - pad, float(np.log10(y.max())) + pad)
    return figure(
        traces,
        layout(
            showlegend=True,
            xaxis=value_axis("non-embedding parameters (log)", x_rng, log=True),
            yaxis=value_axis(y_title, y_rng, log=True),
        ),
    )
