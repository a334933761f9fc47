"""Helpers every figure uses: the step axis, duplicate-checkpoint marks, log colour bars, layout, Play/Pause buttons."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range, log10_or_nan

# Arrays up to this many values go to plotly as lists: plotly's base64 path pays a fixed cost per array (a
# dataframe-library probe), more than JSON takes for a couple of hundred numbers.
SMALL_ARRAY = 256
# Trace fields sent exactly as given: hover-only values (steps shown with ``%{customdata:,}``, every digit) and ids.
EXACT_FIELDS = frozenset({"customdata", "ids", "selectedpoints"})
FLOAT32 = np.finfo(np.float32)


def single(values: np.ndarray) -> np.ndarray:
    """``values`` (float64) as float32 where that changes no value a chart shows, else unchanged.

    float32 keeps 7 significant digits (relative error below 6e-8), more than any hover or tick
    format of the figures shows (at most 5); it halves what a chart sends (plotly's base64
    arrays) and the browser decodes. Integer values (steps, tokens seen, head indices) are
    shown with every digit, so an array holding any integer that float32 would round (above
    2^24) stays float64; so does one with a value outside float32's normal range (a Gaussian's
    tail, 1e-50 on a log axis, would become 0 and vanish from the chart).
    """
    if values.dtype != np.float64:
        return values
    finite = np.isfinite(values)
    size = np.abs(values[finite & (values != 0)])
    if size.size and (size.min() < FLOAT32.tiny or size.max() > FLOAT32.max):
        return values
    out = values.astype(np.float32)
    whole = finite & (values == np.round(values))
    if whole.any() and not np.array_equal(out[whole].astype(np.float64), values[whole]):
        return values
    return out


def _short(values: np.ndarray) -> list[Any]:
    """A small array as a list for JSON: a float32 array's values written with the fewest digits that read back
    as the same float32 (``0.1``, not ``0.10000000149011612``)."""
    if values.dtype != np.float32:
        return values.tolist()
    return [float(str(v)) for v in values.ravel()] if values.ndim == 1 else [_short(row) for row in values]


def _light(obj: Any, key: str = "") -> Any:
    """``obj`` with float64 arrays as float32 (`single`, not in `EXACT_FIELDS`) and small numeric arrays as lists,
    recursively through dicts and lists."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "fiub":
            return obj
        obj = obj if key in EXACT_FIELDS else single(obj)
        return _short(obj) if obj.size <= SMALL_ARRAY else obj
    if isinstance(obj, dict):
        return {k: _light(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        if key and key not in EXACT_FIELDS and len(obj) >= 8:  # a caller's list of numbers: the same as an array
            try:
                values = np.asarray(obj)
            except ValueError:  # ragged
                values = None
            if values is not None and values.dtype.kind == "f" and values.ndim <= 2:
                return _light(values, key)
        return [_light(v, key) for v in obj]
    return obj


def figure(data: list[dict[str, Any]], layout: dict[str, Any], frames: list[dict[str, Any]] | None = None) -> go.Figure:
    """A figure from plain trace, layout (and animation frame) dicts, without plotly's per-property validation.

    Validation triples the cost of building a figure, which is most of a rerun, and costs
    half a second for an animation's frames at 12B size; the figure tests
    (tests/app/test_figures.py) re-validate every builder's output instead. Plotly has no
    public switch for frames, so they are set on the private ``_frame_objs``.
    """
    fig = go.Figure(data=_light([markers_where_sparse(t) for t in data]), layout=layout, _validate=False)
    if frames:
        fig._frame_objs = tuple(go.Frame(_light(f), _validate=False) for f in frames)
    return fig


def isolated_points(y: Any) -> bool:
    """Whether a series has a finite value whose neighbours are both missing (NaN or the ends): a line
    cannot draw it."""
    try:
        v = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if v.ndim != 1 or v.size == 0:
        return False
    ok = np.isfinite(v)
    before = np.concatenate([[False], ok[:-1]])
    after = np.concatenate([ok[1:], [False]])
    return bool(np.any(ok & ~before & ~after))


def markers_where_sparse(trace: dict[str, Any]) -> dict[str, Any]:
    """A line trace whose values exist only at some checkpoints (the refined LLC, estimated at a subset) as
    markers: plotly does not draw a line's isolated points, and joining them would draw a line through the
    checkpoints without a value. A line made clickable by invisible markers (`dashboard.figures.points.clickable`)
    gets visible ones. Other traces are returned as they are."""
    if not isinstance(trace, dict) or trace.get("type", "scatter") not in ("scatter", "scattergl"):
        return trace
    own = trace.get("marker") or {}
    hidden = trace.get("mode") == "lines+markers" and own.get("opacity") == 0
    if (trace.get("mode") != "lines" and not hidden) or not isolated_points(trace.get("y")):
        return trace
    line = trace.get("line") or {}
    if line.get("width") == 0 or trace.get("fill"):  # an invisible edge of a band: nothing to mark
        return trace
    marker = dict(size=6 if (line.get("width") or 2) >= 1.5 else 4, color=line.get("color"), **({} if hidden else own))
    out = {**trace, "mode": "markers", "marker": {k: v for k, v in marker.items() if v is not None}}
    return {k: v for k, v in out.items() if k not in ("selected", "unselected")} if hidden else out


def layout(**overrides: Any) -> dict[str, Any]:
    """Base layout: margins, font, hover mode, white plot; ``overrides`` win."""
    base: dict[str, Any] = dict(
        height=style.HEIGHT,
        margin=style.MARGIN,
        font=dict(size=style.FONT_SIZE),
        hovermode="closest",
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="left", x=0, font=dict(size=11)),
    )
    base.update(overrides)
    return base


def stacked(fig: go.Figure, *, left: int = style.STACK_MARGIN["l"], right: int = style.STACK_MARGIN["r"]) -> go.Figure:
    """``fig`` as one of a page's charts stacked over the same time axis: fixed ``left`` and ``right`` margins (px)
    and no y axis that widens them to fit its tick labels, so its plot area spans the same pixels as the others'
    in a container of the same width. ``right`` must hold the widest colour bar, right-hand legend or loss axis of
    the stack (a wider one would still push the margin out). Apply it last (after `overlay_loss`).
    """
    fig.update_layout(margin=dict(l=left, r=right))
    for key in fig.layout.to_plotly_json():
        if key.startswith("yaxis"):
            fig.layout[key].automargin = False
        elif key.startswith("xaxis"):
            fig.layout[key].automargin = "height"  # its tick labels and title may deepen the bottom margin only
    return fig


def step_xaxis(axis: StepAxis, **extra: Any) -> dict[str, Any]:
    """An x-axis dict for training time: linear, log or checkpoint index (ticks labelled with their steps), fixed
    range, titled with its unit."""
    out: dict[str, Any] = dict(type="log" if axis.log else "linear", range=list(axis.range), title=dict(text=axis.title))
    if axis.log:
        out["dtick"] = 1 if axis.range[1] - axis.range[0] < 9 else 2  # labels at decades only
    if axis.tickvals:  # a checkpoint-index axis: its labelled checkpoints, at most ``nticks`` in a narrow panel
        keep = np.arange(len(axis.tickvals))
        most = int(extra.get("nticks") or len(keep))
        if len(keep) > most:
            keep = np.unique(np.linspace(0, len(keep) - 1, max(most, 2)).round().astype(int))
        out.update(tickmode="array", tickvals=[axis.tickvals[i] for i in keep], ticktext=[axis.ticktext[i] for i in keep])
    out.update(extra)
    return out


def value_axis(title: str, rng: tuple[float, float], *, log: bool = False, **extra: Any) -> dict[str, Any]:
    """A value axis with a fixed range (``rng`` in log10 units when ``log``; ticks at decades when it spans several)."""
    out: dict[str, Any] = dict(type="log" if log else "linear", range=list(rng), title=dict(text=title))
    if log:
        span = rng[1] - rng[0]
        if span >= 2:
            out.update(dtick=1 if span < 10 else 2, exponentformat="power")
        else:  # 1, 2, 5 per decade, each labelled in full (Plotly's "D2" labels 2 and 5 as bare digits: "2, 1, 5, 0.1")
            out.update(log_ticks(rng))
    out.update(extra)
    return out


# A value axis's tick labels as Streamlit's template draws them (Source Sans, 12 px) in Chromium, px per character
# (measured: "0.5" 15 px, "10" 12, "−50" 18, "0.011" 27); other characters are taken as wide as a digit.
TICK_CHAR_PX = {".": 3, ",": 3}
TICK_DIGIT_PX = 6
# What a left value axis takes beside its widest tick label: the labels' pad and the one-line title at the
# template's standoff (measured: the margin Plotly's automargin grows to is the widest label + 55 px).
Y_AXIS_PX = 55


def tick_label_px(label: str) -> int:
    """A tick label's width in px at the template's tick font (`TICK_CHAR_PX`)."""
    return sum(TICK_CHAR_PX.get(c, TICK_DIGIT_PX) for c in label)


def linear_ticks(rng: tuple[float, float], length_px: float) -> tuple[list[float], list[str]]:
    """The ticks Plotly's automatic rule puts on a linear axis of ``length_px`` pixels over ``rng``, as it labels them
    (no trailing zeros, U+2212 for minus): ``([0.0, 0.5, 1.0], ["0", "0.5", "1"])``.

    plotly.js (`axes.prepTicks`, `autoTicks`) aims at one tick per 40 px of a y axis, 5 to 10 of them, and rounds the
    step up to 2, 5 or 10 x 10^n. The chart keeps Plotly's own ticks (they follow a zoom); these are what it will draw
    at first, for the margin the figure declares (`value_axis_margin`)."""
    lo, hi = rng
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [], []
    rough = (hi - lo) / (min(max(length_px / 40, 4), 9) + 1)
    base = 10.0 ** math.floor(math.log10(rough))
    step = base * next(m for m in (2, 5, 10) if m >= rough / base * (1 - 1e-9))
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    values = [round(k * step, decimals) for k in range(first, last + 1)]
    text = []
    for v in values:
        label = f"{abs(v):,.{decimals}f}"
        label = label.rstrip("0").rstrip(".") if "." in label else label
        text.append(("−" if v < 0 and label != "0" else "") + label)
    return [v + 0.0 for v in values], text


def value_axis_margin(rng: tuple[float, float], height_px: float) -> int:
    """The left margin in px that holds a linear y axis's title and the widest tick label Plotly will draw on it
    (`linear_ticks`) in a figure ``height_px`` tall with the base layout's margins, so the figure can declare it:
    otherwise Plotly's automargin widens the margin and draws the chart a second time (longer labels on another run,
    or after a zoom, still widen it: nothing is cut off)."""
    length = height_px - style.MARGIN["t"] - style.MARGIN["b"]
    _, text = linear_ticks(rng, length)
    return max(style.MARGIN["l"], Y_AXIS_PX + max((tick_label_px(t) for t in text), default=3 * TICK_DIGIT_PX))


def log_ticks(rng: tuple[float, float]) -> dict[str, Any]:
    """Tick values 1, 2, 5 x 10^n inside a log10 range, labelled in full (``0.02``, ``5``, ``2e+04``)."""
    lo, hi = rng
    vals = [m * 10.0**n for n in range(math.floor(lo) - 1, math.ceil(hi) + 1) for m in (1, 2, 5)]
    vals = [v for v in vals if lo <= math.log10(v) <= hi]
    if len(vals) < 2:  # a narrow range: every integer multiple
        vals = [m * 10.0**n for n in range(math.floor(lo) - 1, math.ceil(hi) + 1) for m in range(1, 10)]
        vals = [v for v in vals if lo <= math.log10(v) <= hi]
    return dict(tickvals=vals, ticktext=[f"{v:.3g}" for v in vals])


def duplicate_shapes(axis: StepAxis, *, xref: str = "x", yref: str = "y", vertical: bool = True) -> list[dict]:
    """Grey dotted lines at duplicate checkpoints, spanning the panel (never a data point)."""
    shapes = []
    line = dict(color=style.DUPLICATE_COLOUR, width=1, dash="dot")
    for x in axis.dup_x:
        if vertical:
            shapes.append(dict(type="line", xref=xref, yref=f"{yref} domain", x0=x, x1=x, y0=0, y1=1, line=line, layer="above"))
        else:
            shapes.append(dict(type="line", yref=yref, xref=f"{xref} domain", y0=x, y1=x, x0=0, x1=1, line=line, layer="above"))
    return shapes


def step_marks(xs: list[float], colours: list[str], *, xref: str = "x", yref: str = "y", full: bool = True) -> list[dict]:
    """Vertical lines at the chosen steps in their colours (``full=False``: a short tick at the top)."""
    y0 = 0.0 if full else 0.93
    return [
        dict(
            type="line",
            xref=xref,
            yref=f"{yref} domain",
            x0=x,
            x1=x,
            y0=y0,
            y1=1,
            line=dict(color=c, width=1.2 if full else 3, dash="dash" if full else "solid"),
            opacity=0.85,
            layer="above",
        )
        for x, c in zip(xs, colours, strict=False)
    ]


def decade_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Colour-bar ticks for log10 values in [lo, hi]: 1, 2, 5 x 10^n, or only 10^n when that is many."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [], []
    n0, n1 = math.floor(lo), math.ceil(hi)
    fine = [(n + math.log10(m), m, n) for n in range(n0, n1 + 1) for m in (1, 2, 5)]
    fine = [t for t in fine if lo <= t[0] <= hi]
    if len(fine) > 9 or len(fine) < 2:
        step = max(1, (n1 - n0) // 6)
        coarse = [(float(n), 1, n) for n in range(n0, n1 + 1, step) if lo <= n <= hi]
        fine = coarse if len(coarse) >= 2 else fine
    return [t[0] for t in fine], [f"10<sup>{n}</sup>" if m == 1 else f"{m}·10<sup>{n}</sup>" for _, m, n in fine]


def colour_layer(
    values: np.ndarray, *, log: bool, title: str, signed: bool = False, rng: tuple[float, float] | None = None
) -> dict[str, Any]:
    """Heatmap colour settings: ``z`` (log10 when ``log``), fixed zmin/zmax and a labelled colour bar.

    Args:
        values: the raw values (any shape).
        log: colour by log10 (non-positive values become gaps).
        title: colour-bar title (statistic and unit).
        signed: a diverging scale centred on 0 (ignored for log colour).
        rng: a fixed range to use instead of this array's own (keeps colours fixed while sliding).
    """
    if log:
        z = log10_or_nan(values)
        lo, hi = rng if rng is not None else fixed_range(values, log=True, pad=0.0)
        tickvals, ticktext = decade_ticks(lo, hi)
        bar = dict(title=dict(text=f"{title}<br>(log colour)", side="right"), tickvals=tickvals, ticktext=ticktext)
        return dict(z=z, zmin=lo, zmax=hi, colorscale=style.HEATMAP_SCALE, colorbar=bar)
    z = np.asarray(values, dtype=np.float64)
    lo, hi = rng if rng is not None else fixed_range(values, pad=0.0)
    out: dict[str, Any] = dict(z=z, zmin=lo, zmax=hi, colorbar=dict(title=dict(text=title, side="right")))
    if signed and lo < 0 < hi:
        m = max(-lo, hi)
        out.update(zmin=-m, zmax=m, colorscale=style.SIGNED_SCALE)
    else:
        out.update(colorscale=style.HEATMAP_SCALE)
    return out


def with_gaps(x: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Several series on one x as a single trace: ``ys`` ``(n, S)`` -> x, y of length n (S + 1), NaN between."""
    n, _s = ys.shape
    xx = np.tile(np.append(np.asarray(x, dtype=np.float64), np.nan), n)
    yy = np.concatenate([ys, np.full((n, 1), np.nan)], axis=1).reshape(-1)
    return xx, yy


LOSS_AXIS_PX = 80  # the loss axis's ticks and title, right of a chart's plot area (`overlay_loss`)
FRAME_MS = 180  # an animation's playback: one checkpoint per FRAME_MS milliseconds (the Animation and Circuits views)


def overlay_loss(fig: go.Figure, axis: StepAxis, loss: np.ndarray, label: str, *, xaxis: str = "x") -> go.Figure:
    """``fig`` with the loss curve drawn over its time axis ``xaxis``, on a value axis of its own at the right."""
    fig.add_trace(
        go.Scatter(
            x=axis.x,
            y=np.asarray(loss, dtype=np.float64),
            mode="lines+markers",
            name=label,
            xaxis=xaxis,
            yaxis="y99",
            line=dict(color=style.LOSS_COLOUR, width=2, dash="dot"),
            marker=dict(size=4),
            customdata=axis.steps,
            hovertemplate=f"step %{{customdata}}<br>{label} = %{{y:.4f}}<extra></extra>",
            showlegend=True,
        )
    )
    right = LOSS_AXIS_PX
    for trace in fig.data:  # a colour bar moves right of the loss axis, by the axis's width in pixels
        bar = getattr(trace, "colorbar", None)
        if bar is not None and trace.type == "heatmap" and bar.orientation != "h":  # a bar above the plot stays
            trace.colorbar.x, trace.colorbar.xanchor, trace.colorbar.xpad = 1.0, "left", LOSS_AXIS_PX
            right = 150 + LOSS_AXIS_PX
    legend_x = fig.layout.legend.x
    if legend_x is not None and legend_x >= 1:  # a legend at the right moves past the loss axis's title
        fig.update_layout(legend=dict(x=legend_x + 0.09))
        right = max(right, int(fig.layout.margin.r or 0) + 70)
    fig.update_layout(
        yaxis99=dict(
            overlaying="y",
            side="right",
            title=dict(text=label),
            showgrid=False,
            zeroline=False,
            anchor=xaxis,
            range=list(fixed_range(loss)),
        ),
        margin=dict(r=max(int(fig.layout.margin.r or 0), right)),
    )
    return fig


def overlay_loss_grid(fig: go.Figure, axis: StepAxis, loss: np.ndarray, label: str) -> go.Figure:
    """``fig``, a grid of panels over training, with the loss curve drawn in every panel on a value axis of
    that panel's own (fixed over the panels; ticks only at the right of the last column)."""
    loss = np.asarray(loss, dtype=np.float64)
    rng = list(fixed_range(loss))
    xaxes = sorted((k for k in fig.layout.to_plotly_json() if k.startswith("xaxis")), key=lambda k: int(k[5:] or 1))
    right_edges = [round(fig.layout[k].domain[1], 6) if fig.layout[k].domain else 1.0 for k in xaxes]
    last = max(right_edges, default=1.0)
    for key in xaxes:
        n = int(key[5:] or 1)
        xname = "x" if n == 1 else f"x{n}"
        yref = fig.layout[key].anchor or ("y" if n == 1 else f"y{n}")
        over = f"y{100 + n}"
        fig.add_trace(
            go.Scatter(
                x=axis.x,
                y=loss,
                mode="lines",
                name=label,
                xaxis=xname,
                yaxis=over,
                showlegend=n == 1,
                line=dict(color=style.LOSS_COLOUR, width=1.5, dash="dot"),
                customdata=axis.steps,
                legendgroup="loss",
                hovertemplate=f"step %{{customdata}}<br>{label} = %{{y:.4f}}<extra></extra>",
            )
        )
        dom = fig.layout[key].domain
        at_right = (round(dom[1], 6) if dom else 1.0) == last
        fig.update_layout(
            {
                f"yaxis{100 + n}": dict(
                    overlaying=yref,
                    side="right",
                    anchor=xname,
                    range=rng,
                    showgrid=False,
                    zeroline=False,
                    showticklabels=at_right,
                )
            }
        )
    fig.update_layout(margin=dict(r=max(int(fig.layout.margin.r or 0), 60)))
    return fig


def play_menu(steps: Sequence[int], start: int, *, frame_ms: int, y: float, pad: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ▶ Play / ❚❚ Pause buttons of an animated chart whose frames are named by their step (``str(step)``).

    Play runs the frames from ``start`` (the index of the frame shown, which the page's step control sets)
    to the end, one per ``frame_ms`` milliseconds; plotly would otherwise start at frame 0 until something
    has played. The frames are named, never "all of them": a figure may hold frames that are not steps (data
    its step frames share, their ``baseframe``). Pause stops on the frame shown (`dashboard.charts.follow_play`
    hands it to the step control).

    Args:
        steps: the frames' steps, in order.
        start: index of the opening frame.
        frame_ms: milliseconds per frame.
        y: the buttons' top, in paper units (below the plot: negative).
        pad: the menu's padding, when the chart needs one.

    Returns:
        One ``layout.updatemenus`` entry.
    """
    play = dict(frame=dict(duration=frame_ms, redraw=True), fromcurrent=True, transition=dict(duration=0), mode="immediate")
    pause = dict(frame=dict(duration=0, redraw=False), mode="immediate", transition=dict(duration=0))
    menu: dict[str, Any] = dict(type="buttons", direction="left", x=0.0, y=y, xanchor="left", yanchor="top")
    if pad is not None:
        menu["pad"] = pad
    menu["showactive"] = False
    menu["buttons"] = [
        dict(label="▶ Play", method="animate", args=[[str(x) for x in steps[start:]], play]),
        dict(label="❚❚ Pause", method="animate", args=[[None], pause]),
    ]
    return menu
