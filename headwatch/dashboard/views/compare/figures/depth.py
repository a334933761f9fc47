"""The Compare runs page's figures by relative depth: each depth bin's mean and spread over training, every run in its
colour, and one bin's heads run by run on shared axes (panels (a) and (b); the time axis and the other figures are
`views.compare.figures`').

Every run is drawn at its own checkpoints (markers on the lines), one colour per run
(`dashboard.style.run_colour`); the binning is `analysis.findings.comparison`'s. Each data trace carries ``meta``
(``run``, ``kind`` and its bin or layer) so tests and readers can find it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.analysis.findings.comparison import RunSeries, bin_label, bin_layers, bin_summary
from headwatch.dashboard import style
from headwatch.dashboard.figures.common import figure, layout, value_axis, with_gaps
from headwatch.dashboard.views.compare.figures import finite_range, time_axis


def _panels(n: int, gap: float = 0.02) -> list[tuple[float, float]]:
    width = (1 - gap * (n - 1)) / n
    return [(max(0.0, i * (width + gap)), min(1.0, i * (width + gap) + width)) for i in range(n)]


def _axis_names(i: int) -> tuple[str, str, str]:
    """Plotly's names of the i-th panel's axes: ('x', 'y', '') for the first, ('x2', 'y2', '2') after."""
    n = "" if i == 0 else str(i + 1)
    return f"x{n}", f"y{n}", n


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
        series: the runs (`analysis.findings.comparison.RunSeries`).
        n_bins: relative-depth bins (`analysis.findings.comparison.depth_bins`).
        stat_title: the value axis's title (symbol and unit).
        x_title: what the aligned time is.
        log_x, log_y: log axes.
        colours: each run's colour index (default: its position).
    """
    colours = colours or list(range(len(series)))
    domains = _panels(n_bins)
    summaries = [bin_summary(s.values, n_bins) for s in series]
    y_range = finite_range([m - sd for m, sd, _ in summaries] + [m + sd for m, sd, _ in summaries], log=log_y)
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
    y_range = finite_range(parts, log=log_y)
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
