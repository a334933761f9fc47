"""Figures of several runs side by side: the time axis they share, the distribution over heads at a point of
training, the runs' losses, the head-type counts and the timescales against model size (Compare runs page; the
figures by relative depth are `views.compare.figures.depth`').

Every run is drawn at its own checkpoints (markers on the lines), one colour per run
(`dashboard.style.run_colour`); the alignment is `analysis.findings.comparison`'s. Each data trace carries ``meta``
(``run``, ``kind`` and its step or type) so tests and readers can find it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.analysis.findings.comparison import RunSeries
from headwatch.dashboard import style
from headwatch.dashboard.data import fixed_range
from headwatch.dashboard.figures.common import figure, layout, value_axis

TOP_LEGEND = dict(style.LEGEND_TOP, font=dict(size=11))  # the runs' legend under the title, however many rows
TOP_MARGIN = style.MARGIN["t"] + 8  # room for the title and one row of `TOP_LEGEND` (`dashboard.export.titled`)


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
    with their times (`views.compare.data.index_labels`), range around every index; each trace's ``x`` must already
    be its index (`analysis.findings.comparison.on_index`)."""
    vals, text = ticks
    hi = max(vals, default=0.0)
    for key in [k for k in fig.layout.to_plotly_json() if k.startswith("xaxis")]:
        fig.layout[key].update(type="linear", range=[-0.5, hi + 0.5], tickmode="array", tickvals=vals, ticktext=text)
    return fig


def finite_range(arrays: list[np.ndarray], *, log: bool) -> tuple[float, float]:
    """A value axis's range over every finite value of ``arrays`` (`dashboard.data.fixed_range`)."""
    values = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.zeros(0)
    return fixed_range(values, log=log)


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
            margin=dict(style.MARGIN, l=72, t=TOP_MARGIN),
            legend=TOP_LEGEND,
            xaxis=value_axis(stat_title, finite_range(all_values, log=log_x), log=log_x),
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
            margin=dict(style.MARGIN, t=TOP_MARGIN),
            legend=TOP_LEGEND,
            xaxis=time_axis([s for s, _, _ in curves], title=x_title, log=log_x),
            yaxis=value_axis("loss (nats/token)", finite_range([loss for _, loss, _ in curves], log=False)),
        ),
    )


# One dash per head type on the counts chart (the run keeps its colour), in `analysis.store.format.HEAD_TYPES` order.
TYPE_DASHES = {
    "previous_token": "solid",
    "induction": "dash",
    "sink": "dot",
    "current_token": "dashdot",
    "multigram": "longdash",
    "other": "longdashdot",
}


KEY_GREY = "#555555"  # the type counts' legend: a type's dash, in no run's colour


def _key(name: str, colour: str, dash: str, *, group: str, **meta: str) -> dict[str, Any]:
    """A legend entry that draws nothing: a line of ``colour`` and ``dash`` named ``name``, in legend group ``group``."""
    return dict(
        type="scatter",
        x=[None],
        y=[None],
        mode="lines",
        name=name,
        legendgroup=group,
        line=dict(color=colour, width=2, dash=dash),
        hoverinfo="skip",
        meta=dict(kind="key", **meta),
    )


def type_counts(
    series: list[RunSeries], *, types: tuple[str, ...], x_title: str, log_x: bool = False, colours: list[int] | None = None
) -> go.Figure:
    """How many heads hold each type at each checkpoint: one line per run (colour) and type (dash).

    The legend is a key, one entry per run (its colour) and one per type (its dash, in grey), not one per line: runs x
    types entries, each "run: type", wrapped to several rows above the plot (two runs deciding six types took two rows
    at 1,500 px). Clicking a type's entry hides that type's lines in every run (the lines are grouped by type).

    Args:
        series: per run, ``values`` ``(S, 1, len(types))`` the counts (`analysis.findings.held_types.HeadTypes.counts`).
        types: the types, in the order of the last axis.
    """
    colours = colours or list(range(len(series)))
    traces: list[dict[str, Any]] = []
    keyed: set[str] = set()  # the types some run decides: one legend entry each
    for s, c in zip(series, colours, strict=False):
        traces.append(_key(s.run, style.run_colour(c), "solid", group=f"run:{s.run}", run=s.run))
        for i, name in enumerate(types):
            if not np.isfinite(s.values[:, 0, i]).any():  # a type the run does not decide: no line
                continue
            keyed.add(name)
            traces.append(
                dict(
                    type="scatter",
                    x=s.plot_x(log=log_x),
                    y=np.asarray(s.values[:, 0, i], dtype=np.float64),
                    mode="lines+markers",
                    name=f"{s.run}: {name}",
                    showlegend=False,
                    legendgroup=f"type:{name}",
                    line=dict(color=style.run_colour(c), width=2, dash=TYPE_DASHES.get(name, "solid")),
                    marker=dict(size=5),
                    customdata=s.steps,
                    meta=dict(run=s.run, kind="type_count", type=name),
                    hovertemplate=f"{s.run}<br>step %{{customdata:,}}<br>%{{y:d}} {name} heads<extra></extra>",
                )
            )
    traces += [
        _key(name, KEY_GREY, TYPE_DASHES.get(name, "solid"), group=f"type:{name}", type=name) for name in types if name in keyed
    ]
    top = max([float(np.nanmax(s.values)) for s in series if s.values.size] + [1.0])
    return figure(
        traces,
        layout(
            height=style.SMALL_HEIGHT + 60,
            margin=dict(style.MARGIN, t=TOP_MARGIN),
            legend=TOP_LEGEND,
            xaxis=time_axis(series, title=x_title, log=log_x),
            yaxis=value_axis("heads holding the type", (0.0, top * 1.08 + 0.5)),
        ),
    )


def scaling_points(points: list[tuple[str, np.ndarray, np.ndarray, list[str]]], *, y_title: str) -> go.Figure:
    """Timescales against model size on log-log axes: one marker series per quantity (a head type's first emergence,
    a statistic's consolidation in the first or last layer), each in its own colour and marker symbol
    (`dashboard.style.series_style`), one point per run, hover naming the run.

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
        colour, symbol = style.series_style(i)  # its own colour and marker: the runs' eight cycled at the ninth
        traces.append(
            dict(
                type="scatter",
                x=p[ok],
                y=t[ok],
                mode="markers",
                name=name,
                text=[r for r, keep in zip(runs, ok, strict=True) if keep],
                marker=dict(size=10, color=colour, symbol=symbol),
                meta=dict(kind="timescale", what=name),
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
            height=style.HEIGHT + 40,
            showlegend=True,
            # right of the plot, from its top: a dozen long names above the plot grew up over the title
            legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top", font=dict(size=11)),
            xaxis=value_axis("non-embedding parameters (log)", x_rng, log=True),
            yaxis=value_axis(y_title, y_rng, log=True),
        ),
    )
