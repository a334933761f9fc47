"""Figures of the refined LLC: every head's estimate over training coloured by layer (or cluster), the
whole model's LLC with the loss, and the heads' clusters on the layer x head grid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import figure, layout, stacked, step_xaxis, value_axis
from headwatch.dashboard.figures.points import HOVER_HEAD, HOVER_STEP, head_points
from headwatch.dashboard.labels import Stat

CLUSTER_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")


# Marker of an estimate by its flag (analysis/llc/diagnostics.py); "" is an estimate without diagnostics.
FLAG_SYMBOLS = {
    "converged": "circle",
    "": "circle",
    "too few draws": "circle-open",
    "still rising": "triangle-up",
    "still falling": "triangle-down",
    "diverged": "x",
    "negative": "square",
}


def _marked(flags: np.ndarray, values: np.ndarray) -> list[str]:
    """Each estimate's flag as its marker shows it: a negative estimate of a store without diagnostics is
    ``negative`` too (its sign needs no chains)."""
    return ["negative" if not f and np.isfinite(v) and v < 0 else str(f) for f, v in zip(flags, values, strict=True)]


def _flag_text(flag: str) -> str:
    if flag == "negative":
        return "negative: below the loss at w*, no learning coefficient (the diagnostics below)"
    return flag or "no diagnostics"


def _loss_trace(axis: StepAxis, loss: np.ndarray, label: str) -> dict[str, Any]:
    """The loss at every checkpoint, dotted, on the right-hand axis ``y2``."""
    return dict(
        type="scatter",
        x=axis.x,
        y=loss,
        mode="lines+markers",
        name=label,
        yaxis="y2",
        line=dict(color=style.LOSS_COLOUR, width=1.5, dash="dot"),
        marker=dict(size=3),
        customdata=axis.steps,
        hovertemplate=f"step %{{customdata:,}}<br>{label} = %{{y:.4f}}<extra></extra>",
    )


# Legends above the plot: the right margin holds only the loss axis, the same on both stacked charts.
_LEGEND = dict(orientation="h", x=0, y=1.02, xanchor="left", yanchor="bottom")
STACK_RIGHT = 90  # px: the loss axis's ticks and title


def _loss_axis(loss: np.ndarray, label: str) -> dict[str, Any]:
    """The right-hand axis of the loss, over the chart's own value axis."""
    return dict(
        overlaying="y",
        side="right",
        title=dict(text=label),
        showgrid=False,
        zeroline=False,
        range=list(fixed_range(loss)),
    )


def head_curves(
    axis: StepAxis,
    idx: np.ndarray,
    values: np.ndarray,
    *,
    stat: Stat,
    groups: np.ndarray,
    group_names: Sequence[str],
    colours: Sequence[str],
    stds: np.ndarray | None = None,
    flags: np.ndarray | None = None,
    loss: np.ndarray | None = None,
    loss_label: str = "",
) -> go.Figure:
    """Every head's estimates over training: markers at the estimated checkpoints, a thin line joining a
    head's consecutive estimates, one colour per group (its layer, or its cluster); a flagged estimate's
    marker is `FLAG_SYMBOLS`'s, and the hover gives the chains' spread and the flag.

    Args:
        axis: the run's time axis.
        idx: ``(E,)`` positions in ``axis.x`` of the estimated checkpoints, ascending.
        values: ``(E, n_layers, n_heads)`` the estimates there.
        groups: ``(n_layers * n_heads,)`` each head's group (layer-major), indices into ``group_names``.
        stds: ``(E, n_layers, n_heads)`` the spread over chains (None: not shown).
        flags: ``(E, n_layers, n_heads)`` each estimate's flag (`analysis.llc.diagnostics.FLAGS`, "" without
            diagnostics; None: the store has none).
        loss: the loss at every checkpoint of ``axis``, drawn on a right-hand axis (None: not drawn).

    The margins are fixed (`dashboard.figures.common.stacked`), as `model_llc`'s below it, so the two time axes line
    up to the pixel; the right one holds the loss axis and a legend.
    """
    e, n_layers, n_heads = values.shape
    x, steps = axis.x[idx], axis.steps[idx]
    traces: list[dict[str, Any]] = []
    shown: set[int] = set()
    for layer in range(n_layers):
        for head in range(n_heads):
            g = int(groups[layer * n_heads + head])
            y = values[:, layer, head]
            head_flags = _marked(flags[:, layer, head] if flags is not None else np.full(e, "", dtype=object), y)
            spread = stds[:, layer, head] if stds is not None else np.full(e, np.nan)
            notes = [_flag_text(f) for f in head_flags]
            traces.append(
                dict(
                    type="scatter",
                    x=x,
                    y=y,
                    mode="lines+markers",
                    name=group_names[g],
                    legendgroup=f"g{g}",
                    showlegend=g not in shown,
                    line=dict(color=colours[g], width=1),
                    marker=dict(
                        color=colours[g],
                        size=[6 if f in ("", "converged") else 10 for f in head_flags],
                        symbol=[FLAG_SYMBOLS.get(f, "circle") for f in head_flags],
                    ),
                    opacity=0.8,
                    customdata=head_points(layer, head, steps, spread),
                    text=notes,
                    hovertemplate=f"{HOVER_HEAD} ({group_names[g]})<br>{HOVER_STEP}"
                    f"<br>{stat.symbol} = %{{y:.4g}} ± %{{customdata[3]:.2g}} (chains' spread)"
                    "<br>%{text}<extra></extra>",
                )
            )
            shown.add(g)
    lay = layout(
        xaxis=step_xaxis(axis),
        yaxis=value_axis(stat.title(), fixed_range(values)),
        legend=_LEGEND,
    )
    if loss is not None:
        traces.append(_loss_trace(axis, loss, loss_label))
        lay["yaxis2"] = _loss_axis(loss, loss_label)
    return stacked(figure(traces, lay), right=STACK_RIGHT)  # as model_llc's below it: the time axes line up


def model_llc(
    axis: StepAxis,
    idx: np.ndarray,
    llc: np.ndarray,
    std: np.ndarray,
    *,
    loss: np.ndarray | None,
    loss_label: str = "",
    flags: np.ndarray | None = None,
) -> go.Figure:
    """The whole model's LLC at the estimated checkpoints (markers with the chains' spread as error bars,
    a flagged estimate's marker `FLAG_SYMBOLS`'s), the loss curve on a right-hand axis over every checkpoint."""
    marked = _marked(flags if flags is not None else np.full(len(idx), "", dtype=object), llc)
    notes = [_flag_text(f) for f in marked]
    traces: list[dict[str, Any]] = [
        dict(
            type="scatter",
            x=axis.x[idx],
            y=llc,
            mode="lines+markers",
            name="whole-model LLC",
            line=dict(color=style.LAYER_MEAN_COLOUR, width=1.5),
            marker=dict(
                size=[8 if f in ("", "converged") else 12 for f in marked],
                color=style.LAYER_MEAN_COLOUR,
                symbol=[FLAG_SYMBOLS.get(f, "circle") for f in marked],
            ),
            error_y=dict(type="data", array=std, visible=True, thickness=1),
            customdata=axis.steps[idx],
            text=notes,
            hovertemplate="step %{customdata:,}<br>LLC = %{y:.4g} (error bar: the chains' spread)<br>%{text}<extra></extra>",
        )
    ]
    lay = layout(
        xaxis=step_xaxis(axis),
        yaxis=value_axis("whole-model LLC (dimensionless)", fixed_range(np.r_[llc - std, llc + std])),
        height=style.SMALL_HEIGHT + 80,
        legend=_LEGEND,
    )
    if loss is not None:
        traces.append(_loss_trace(axis, loss, loss_label))
        lay["yaxis2"] = _loss_axis(loss, loss_label)
    return stacked(figure(traces, lay), right=STACK_RIGHT)  # as head_curves' above it


def cluster_grid(labels: np.ndarray, *, n_layers: int, n_heads: int, names: Sequence[str]) -> go.Figure:
    """Each head's cluster on a layer (rows) x head (columns) grid, one colour per cluster."""
    k = len(names)
    z = np.asarray(labels, dtype=np.float64).reshape(n_layers, n_heads)
    scale = []
    for i in range(k):
        scale += [[i / k, CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)]], [(i + 1) / k, CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)]]]
    text = np.array([[names[int(c)] for c in row] for row in z])
    heat = dict(
        type="heatmap",
        z=z,
        x=list(range(n_heads)),
        y=list(range(n_layers)),
        zmin=-0.5,
        zmax=k - 0.5,
        colorscale=scale,
        showscale=False,
        text=text,
        texttemplate="%{text}",
        xgap=2,
        ygap=2,
        hovertemplate="layer %{y}, head %{x}<br>%{text}<extra></extra>",
    )
    return figure(
        [heat],
        layout(
            xaxis=dict(title=dict(text="head"), dtick=1),
            yaxis=dict(title=dict(text="layer"), dtick=1, autorange="reversed"),
            margin=dict(style.MARGIN, l=70, b=76),
            height=max(style.SMALL_HEIGHT, 40 * n_layers + 90),
        ),
    )


def chain_traces(trace: np.ndarray, init_loss: float, *, burnin: int, n_beta: float, label: str) -> go.Figure:
    """Each chain's sampled loss over its SGLD steps, with the loss at w* and the burn-in marked: a trace
    that rose and flattened gives an estimate that means something; one still climbing, or running away,
    does not (`analysis.llc.diagnostics`).

    Args:
        trace: ``(chains, steps)`` sampled loss, nats per token (burn-in included).
        init_loss: the loss at the checkpoint's weights on the same batches.
        burnin: steps at the start left out of the estimate.
        n_beta: the sampler's n beta (for the hover's per-chain estimate).
        label: what was sampled (``L2 H3``, ``whole model``) and at which step.
    """
    chains, n = trace.shape
    steps = np.arange(n)
    traces: list[dict[str, Any]] = []
    for c in range(chains):
        estimate = n_beta * (float(np.mean(trace[c, burnin:])) - init_loss)
        traces.append(
            dict(
                type="scatter",
                x=steps,
                y=trace[c],
                mode="lines+markers",
                name=f"chain {c} (estimate {estimate:.3g})",
                line=dict(color=CLUSTER_COLOURS[c % len(CLUSTER_COLOURS)], width=1.5),
                marker=dict(size=5),
                hovertemplate=f"chain {c}<br>SGLD step %{{x}}<br>sampled loss %{{y:.5f}} nats/token<extra></extra>",
            )
        )
    traces.append(
        dict(
            type="scatter",
            x=[0, max(n - 1, 1)],
            y=[init_loss, init_loss],
            mode="lines",
            name=f"loss at w* ({init_loss:.5f})",
            line=dict(color="#555", dash="dash", width=1),
            hoverinfo="skip",
        )
    )
    shapes = (
        [
            dict(
                type="rect",
                xref="x",
                yref="paper",
                x0=-0.5,
                x1=burnin - 0.5,
                y0=0,
                y1=1,
                fillcolor="rgba(128,128,128,0.15)",
                line=dict(width=0),
                layer="below",
            )
        ]
        if burnin
        else []
    )
    values = np.r_[trace.ravel(), init_loss]
    return figure(
        traces,
        layout(
            xaxis=dict(title=dict(text=f"SGLD step ({label}; shaded: burn-in)"), zeroline=False),
            yaxis=value_axis("sampled loss (nats per token)", fixed_range(values[np.isfinite(values)])),
            shapes=shapes,
            height=style.SMALL_HEIGHT + 60,
        ),
    )


# One colour per distribution of the refined LLC's loss, by name (a user's file takes the next free one).
DISTRIBUTION_COLOURS = {"train": "#1f77b4", "text": "#7f7f7f", "repeats": "#d62728", "code": "#2ca02c"}


def _distribution_colour(name: str, names: Sequence[str]) -> str:
    if name in DISTRIBUTION_COLOURS:
        return DISTRIBUTION_COLOURS[name]
    extra = [n for n in names if n not in DISTRIBUTION_COLOURS]
    return CLUSTER_COLOURS[(4 + extra.index(name)) % len(CLUSTER_COLOURS)]


def _distribution_lines(
    axis: StepAxis, frame: Any, column: str, *, colours: Sequence[str], label: str, hover: str, spread: bool
) -> list[dict[str, Any]]:
    """One line per distribution of ``frame`` (its ``data`` column, in order of appearance) through ``column`` at
    the checkpoints it has, coloured by `_distribution_colour` among ``colours``; ``label`` and ``hover`` are
    formatted with the distribution as ``{name}`` (``hover`` a Plotly template: the step is ``customdata``);
    ``spread`` adds the chains' spread (``llc_std``) as error bars."""
    position = {int(s): i for i, s in enumerate(axis.steps)}
    traces: list[dict[str, Any]] = []
    for name in dict.fromkeys(frame["data"]):
        rows = frame[frame["data"] == name]
        idx = np.array([position[int(s)] for s in rows["step"]], dtype=np.int64)
        colour = _distribution_colour(name, colours)
        trace = dict(
            type="scatter",
            x=axis.x[idx],
            y=rows[column].to_numpy(),
            mode="lines+markers",
            name=label.replace("{name}", name),
            line=dict(color=colour, width=1.5),
            marker=dict(size=6, color=colour),
            customdata=rows["step"].to_numpy(),
            hovertemplate=hover.replace("{name}", name),
        )
        if spread:
            trace["error_y"] = dict(type="data", array=rows["llc_std"].to_numpy(), visible=True, thickness=1)
        traces.append(trace)
    return traces


def distribution_curves(axis: StepAxis, curves: Any, *, target: str) -> go.Figure:
    """One estimate's refined LLC under each distribution (`views.llc.data.distribution_curves`' rows), a line with
    the chains' spread as error bars per distribution, at the checkpoints each has."""
    traces = _distribution_lines(
        axis,
        curves,
        "llc",
        colours=list(dict.fromkeys(curves["data"])),
        label="on {name}",
        hover=f"step %{{customdata:,}}<br>{target} on {{name}}: LLC = %{{y:.4g}} (error bar: the chains' spread)<extra></extra>",
        spread=True,
    )
    values = np.r_[curves["llc"] - curves["llc_std"], curves["llc"] + curves["llc_std"]]
    fig = figure(
        traces,
        layout(
            xaxis=step_xaxis(axis),
            yaxis=value_axis(f"refined LLC of {target} (dimensionless)", fixed_range(values)),
            height=style.SMALL_HEIGHT + 80,
            legend=_LEGEND,
        ),
    )
    return stacked(fig, right=style.MARGIN["r"])  # as distribution_ratios' below it: the time axes line up


def distribution_ratios(axis: StepAxis, ratios: Any, *, target: str, reference: str) -> go.Figure:
    """Each other distribution's estimate over ``reference``'s (`views.llc.data.distribution_ratios`' rows), with the
    line 1 (equal) drawn."""
    traces = _distribution_lines(
        axis,
        ratios,
        "ratio",
        colours=[*dict.fromkeys(ratios["data"]), reference],
        label=f"on {{name}} / on {reference}",
        hover=f"step %{{customdata:,}}<br>{target}: LLC on {{name}} / LLC on {reference} = %{{y:.3g}}<extra></extra>",
        spread=False,
    )
    finite = ratios["ratio"].to_numpy()
    finite = finite[np.isfinite(finite)]
    lay = layout(
        xaxis=step_xaxis(axis),
        yaxis=value_axis(f"ratio to the estimate on {reference}", fixed_range(np.r_[finite, 1.0])),
        height=style.SMALL_HEIGHT,
        legend=_LEGEND,
        shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=1, y1=1, line=dict(color="#999", dash="dot", width=1))],
    )
    return stacked(figure(traces, lay), right=style.MARGIN["r"])  # as distribution_curves' above it
