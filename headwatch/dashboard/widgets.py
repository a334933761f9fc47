"""The dashboard's widgets bound to the URL: each keyed by its URL parameter, valid values only, carried across pages.

One of the modules that import streamlit (with app.py, pages/, the loader, `dashboard.viewstate`,
`dashboard.charts` and the server). Every widget here asks the active view (`dashboard.viewstate`)
which value to show before it is made (`viewstate.seed`: a link's value, else its last one, else
its default) and records the value shown (`viewstate.register`), which the view writes into the
query string when it is published. Raises RuntimeError outside app.py's view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import streamlit as st

from headwatch.dashboard.labels import LAMBDA, MATRIX_LABELS, STATS
from headwatch.dashboard.viewstate import Where, active, register, seed

IMAGE_FORMAT = "img"  # URL parameter: the format the charts' camera icon saves (png or svg), carried across pages


def select(
    name: str,
    label: str,
    options: Sequence[Any],
    default: Any,
    *,
    fmt: Callable[[Any], str] | None = None,
    kind: Literal["selectbox", "radio", "select_slider"] = "selectbox",
    where: Where = st,
    help: str | None = None,
) -> Any:
    """A single-choice widget bound to the URL parameter ``name``.

    Args:
        name: URL parameter and widget key.
        label: widget label.
        options: allowed values (ints, strings or bools).
        default: value when the URL has none or an invalid one.
        fmt: how an option is shown (the URL always holds its plain value).
        kind: ``selectbox``, ``radio`` (horizontal) or ``select_slider``.
        where: ``st``, ``st.sidebar`` or a container.
        help: tooltip.

    Raises:
        RuntimeError: outside an active view.
    """
    view = active("widgets.select")
    options = list(options)
    seed(view, name, options, default, multi=False, fmt=fmt)
    fmt = fmt or str
    if kind == "radio":
        value = where.radio(label, options, key=name, format_func=fmt, horizontal=True, help=help)
    elif kind == "select_slider":
        value = where.select_slider(label, options, key=name, format_func=fmt, help=help)
    else:
        value = where.selectbox(label, options, key=name, format_func=fmt, help=help)
    register(view, name, value)
    return value


def multiselect(
    name: str,
    label: str,
    options: Sequence[Any],
    default: Sequence[Any],
    *,
    fmt: Callable[[Any], str] | None = None,
    where: Where = st,
    help: str | None = None,
    max_selections: int | None = None,
    hint: str | None = None,
    left_out: Mapping[Any, str] | None = None,
) -> list[Any]:
    """A several-choice widget bound to the repeatable URL parameter ``name`` (``step=0&step=64``).

    One order: the values come back, go into the link and show in the widget in option order, whatever order
    they were picked in (a value picked later takes its place among the others, not the end), and a link
    that lists them in another order opens as it opened before, in option order. ``hint`` is added to the
    notice about values a link asked for that are not options (what to do about them). A link with
    more than ``max_selections`` values keeps its first ``max_selections`` and says so in a notice; one that
    repeats a value shows it once and says so. ``left_out``: values that are not options here for a reason
    (value -> ``"is this page's own run ..."``): a link or an earlier choice naming one loses only that one,
    with a notice that gives the reason (`viewstate.seed`).

    Raises:
        RuntimeError: outside an active view.
    """
    view = active("widgets.multiselect")
    options = list(options)
    seed(view, name, options, default, multi=True, hint=hint, most=max_selections, left_out=left_out)
    chosen = st.session_state[name]
    st.session_state[name] = [o for o in options if o in chosen]  # shown in option order, as the link lists them
    picked = where.multiselect(label, options, key=name, format_func=fmt or str, help=help, max_selections=max_selections)
    value = [o for o in options if o in picked]
    register(view, name, value)
    return value


def toggle(name: str, label: str, default: bool = False, *, where: Where = st, help: str | None = None) -> bool:
    """An on/off switch bound to the URL parameter ``name`` (``1`` / ``0``).

    Raises:
        RuntimeError: outside an active view.
    """
    view = active("widgets.toggle")
    seed(view, name, [False, True], default, multi=False)
    value = bool(where.toggle(label, key=name, help=help))
    register(view, name, value)
    return value


def panel_tabs(
    name: str, panels: dict[str, str], default: str, *, owns: Mapping[str, Sequence[str]] | None = None
) -> tuple[str, Any]:
    """Tabs bound to the URL parameter ``name`` (``panels``: URL value -> tab label), of which only the chosen one
    is drawn: Streamlit's tabs with state (``on_change``), so that a page computes, sends and draws one panel rather
    than all of them (a switch reruns the page). Returns the chosen value and its tab, to draw the panel in.

    The tabs' own state holds a label; the value shown is seeded and registered under ``name`` like any widget's (a
    link's ``panel=leading``, else the last one, else ``default``), and a click on a tab hands its value back before
    the rerun.

    ``owns``: the URL parameters of the widgets each panel draws that not every panel does (``{"statistic": ("stat",
    "k", "logy")}``). The widgets of the tabs not drawn do not run; the link keeps their values all the same
    (`viewstate.View.unshown`), a link's as well as the ones chosen on that tab before, so that a link carries the
    settings of every tab, and a click on a tab shows what the link gave it.

    Raises:
        RuntimeError: outside an active view.
    """
    view = active("widgets.panel_tabs")
    values = list(panels)
    seed(view, name, values, default, multi=False, fmt=panels.__getitem__)
    value = st.session_state[name]
    drawn = set((owns or {}).get(value, ()))
    view.unshown = frozenset(p for panel, params in (owns or {}).items() if panel != value for p in params) - drawn
    key = f"{name}_tab"
    st.session_state[key] = panels[value]  # the tab the value names; set before the tabs are made, as a widget's

    def switched() -> None:  # a click on a tab: its value is the page's before the rerun seeds it
        st.session_state[name] = next(v for v, label in panels.items() if label == st.session_state[key])

    tabs = st.tabs(list(panels.values()), key=key, on_change=switched)
    register(view, name, value)
    return value, tabs[values.index(value)]


def loss_toggle(available: bool, *, where: Where = st) -> bool:
    """The switch that overlays the loss curve on a page's time axes (URL ``loss``); off and hidden
    when the store has no loss curve (`dashboard.data.loss_curve`)."""
    if not available:
        return False
    return toggle(
        "loss",
        "Overlay the loss curve",
        False,
        where=where,
        help="the forward lens's loss on its evaluation sequences, or a run's validation loss, on a right-hand axis",
    )


GAP_PERCENT = (2, 5, 10, 20)  # choices of the close-approach threshold: percent relative gap of adjacent singular values


def gap_percent(*, where: Where = st) -> int:
    """The close-approach threshold (URL ``gap``, percent) of the head explorer and the Heads table: one
    widget, one help text, so that the same parameter reads the same on both pages."""
    from headwatch.analysis.stats.crossings import GAP_THRESHOLD

    return select(
        "gap",
        "Close when the gap of s is below",
        list(GAP_PERCENT),
        round(100 * GAP_THRESHOLD),
        fmt=lambda g: f"{g}%",
        where=where,
        help="Relative gap (s_i − s_i+1)/(s_i + s_i+1) of adjacent singular values. An approach is a stretch of "
        "checkpoints below it, with the levels farther apart before and after, that dips 20% below it "
        '(README, "Crossing or repulsion?")',
    )


def int_slider(name: str, label: str, lo: int, hi: int, default: int, *, where: Where = st, help: str | None = None) -> int:
    """An integer slider over [lo, hi] bound to the URL parameter ``name``.

    Raises:
        RuntimeError: outside an active view.
    """
    view = active("widgets.int_slider")
    seed(view, name, list(range(lo, hi + 1)), default, multi=False)
    if hi <= lo:  # a one-value range: nothing to slide
        where.caption(f"{label}: {lo} (the only value)")
        value = lo
    else:
        value = int(where.slider(label, min_value=lo, max_value=hi, step=1, key=name, help=help))
    register(view, name, value)
    return value


def statistic(
    d_head: int,
    *,
    where_stat: Where,
    where_k: Where,
    where_log: Where,
    log: tuple[str, str],
    options: Sequence[str] | None = None,
    default: str = "std",
) -> tuple[str, int | None, bool]:
    """The statistic picker the views share: ``stat``; ``k`` while the statistic is lambda_k;
    a log toggle (URL name and label in ``log``) for statistics that are positive.

    Returns:
        ``(stat, k, log_on)``; ``k`` is None unless ``stat`` is lambda_k.
    """
    stat = select("stat", "Statistic", list(options or STATS), default, fmt=lambda s: STATS[s].label, where=where_stat)
    k = int_slider("k", "k (singular-value index)", 0, d_head - 1, 0, where=where_k) if stat == LAMBDA else None
    log_on = toggle(log[0], log[1], False, where=where_log) if STATS[stat].positive else False
    return stat, k, log_on


def matrix(matrices: Sequence[str], *, where: Where = st, store_path: str | None = None) -> str:
    """The per-head product a view shows (URL ``matrix=qk|ov``), among those the store has rows for
    (``meta.json`` ``matrices``); carried across pages like ``layer``. A store with W_QK alone
    (made before OV rows existed, or with ``--matrices qk``) shows which and says how to add W_OV.

    Raises:
        RuntimeError: outside an active view.
    """
    options = [m for m in matrices if m in MATRIX_LABELS] or ["qk"]
    value = select(
        "matrix",
        "Matrix",
        options,
        options[0],
        fmt=lambda m: MATRIX_LABELS[m],
        kind="radio",
        where=where,
        help="W_QK: which tokens a head attends to; W_OV: what it writes into the residual stream "
        "(W_O's d_head input columns of the head times its value rows)",
    )
    if "ov" not in options:
        rerun = (
            f"`python -m headwatch.precompute --source SOURCE --out {store_path}`"
            if store_path
            else "`python -m headwatch.precompute`"
        )
        where.caption(
            f"This store has W_QK rows only. A rerun of {rerun} on it, with its checkpoints, adds W_OV "
            "for every checkpoint, the symmetric fraction and eigenvalue positivity of both, and the "
            "relative change between checkpoints."
        )
    return value


def image_format(*, where: Where = st) -> str:
    """The format the charts' camera icon saves (URL ``img=png|svg``), a small choice drawn above the page's
    first chart, where the user exports; carried across pages like ``layer``. `chart` calls it.

    Raises:
        RuntimeError: outside an active view.
    """
    from headwatch.dashboard.export import EXPORT_SCALE, EXPORT_WIDTH, IMAGE_FORMATS

    view = active("widgets.image_format")
    if IMAGE_FORMAT in view.params:  # drawn once, above the first chart
        return view.params[IMAGE_FORMAT][0]
    return str(
        select(
            IMAGE_FORMAT,
            "Camera icon saves",
            list(IMAGE_FORMATS),
            IMAGE_FORMATS[0],
            fmt=str.upper,
            kind="radio",
            where=where,
            help=f"The camera icon at the top right of each chart saves it, named after the run, head and statistic, "
            f"{EXPORT_WIDTH} px wide at the chart's height: PNG at {EXPORT_SCALE}x, or SVG. Each chart's data: "
            "its CSV button.",
        )
    )
