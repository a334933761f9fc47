"""The view of one app run and the widgets bound to its URL: the dashboard's one module of URL-bound widgets.

Besides app.py, pages/ and the cached loader, this is the only module that imports
streamlit. app.py runs every script run inside one view::

    with widgets.view_state(settings) as view:   # begin: collect this run's view state
        page = st.navigation(pages)
        view.open(page, pages)                   # the page shown; a Space link's ?page= switches
        ...                                      # sidebar widgets, view.notices_in / link_in / history_in
        view.set_frame(Frame(...))               # what the sidebar chose, for the pages
        page.run()                               # the page's widgets add to the view
                                                 # exit: publish the view

so the order begin -> page -> publish is the code's, not the caller's: the widgets
below, `frame` and `notice` raise RuntimeError outside an active view, and leaving
the block normally is what publishes. A run that ends by an exception (a page
switch, a rerun, an error) publishes nothing, as before.

Every view-defining widget is made here, keyed by its URL parameter name
(``layer``, ``head``, ``k``, ``step``, ``stat``, ``matrix``, ``run``, ``img``, page toggles). On each run:

1. the URL wins when it carries a value the app did not write itself (a shared
   link, ``st.switch_page(..., query_params=...)``, browser history); invalid
   values fall back to the default and leave a notice (`dashboard.urlstate`);
2. otherwise the widget keeps its session value, or the last value any page gave
   that parameter (so ``layer`` carries over when you switch pages), as long as
   it is valid here, else its default;
3. when the view is published, the complete view state is written back to the query
   string, the notices are shown at the top of the page, the share link is drawn,
   the browser-history guard is told what was written and, on a Space, the view is
   posted to the Space page (what to put there: `dashboard.sharing`).

Streamlit's native ``bind="query-params"`` is not used: it drops an invalid
value silently (the issue asks for a visible notice) and stores a select box's
*formatted label* in the URL, where links need ``stat=std``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import streamlit as st

from dashboard import sharing
from dashboard.frame import Frame, RunFrame
from dashboard.settings import Settings
from dashboard.stats import LAMBDA, MATRIX_LABELS, STATS
from dashboard.urlstate import encode, parse_many, parse_one

_VIEW = "_hw_view"  # the active View, present only while app.py's `with view_state(...)` block runs
_WRITTEN = "_hw_written"  # the query string the app last wrote: name -> list of URL strings
_LAST = "_hw_last"  # last value of every parameter; plain session state, so it survives page switches
_NEXT = "_hw_next"  # values `switch_page` hands to the next page's widgets, used once
_PAGE_LAST = "_hw_page_last"  # (page url_path, name) -> last value, for the parameters in PAGE_SCOPED
_PREV_PAGE = "_hw_prev_page"  # url_path of the page the last published view showed
# each page keeps its own: never carried to another page (a link or a click hands them); xscale: pages open on
# the time axis that reads their early training (`dashboard.navigation.PageSpec.time_scale`)
PAGE_SCOPED = ("stat", "k", "xscale")
IMAGE_FORMAT = "img"  # URL parameter: the format the charts' camera icon saves (png or svg), carried across pages

Where = Any  # streamlit module or a container / column (DeltaGenerator)
_MISSING = object()


class View:
    """One run's view: its settings, page, frame, URL parameters and notices, and where to publish them.

    Made by `view_state`; app.py tells it the page (`open`), the frame (`set_frame`) and
    the slots for notices, the share link and the history guard.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.params: dict[str, list[str]] = {}  # URL parameter -> values, in widget order
        self.notices: list[str] = []
        self.page: Any = None  # the st.Page shown
        self.frame: Frame | None = None
        self._notice_slot: Where | None = None
        self._link_slot: Where | None = None
        self._history_slot: Where | None = None

    def open(self, page: Any, pages: Sequence[Any]) -> None:
        """Record ``page`` (from ``st.navigation(pages)``) as the page shown; follow ``?page=`` on the root URL.

        A Space link names its page as ``?page=<url_path>`` on the app's root URL; this switches to
        that page (``st.switch_page`` ends the run) or, for an unknown one, leaves a notice; so does a
        path that names no page (Streamlit shows the default page for it).
        """
        self.page = page
        if not page.url_path:  # the default page: asked for at the root, or for a path that names no page
            missing = sharing.unknown_page(
                st.context.url, base_path=str(st.get_option("server.baseUrlPath") or ""), url_paths=[p.url_path for p in pages]
            )
            if missing:
                self.notices.append(missing)
        query = {k: st.query_params.get_all(k) for k in st.query_params}
        target, rest, why = sharing.page_request(
            query, current=page.url_path, title=page.title, url_paths=[p.url_path for p in pages]
        )
        if why:
            self.notices.append(why)
        if target is not None:
            st.switch_page(next(p for p in pages if p.url_path == target), query_params=rest)

    def set_frame(self, frame: Frame) -> None:
        """What the sidebar chose, for the pages to read (`frame`, `run_frame`)."""
        self.frame = frame

    def notices_in(self, slot: Where) -> Where:
        """Show the notices in ``slot`` (a container at the top of the page) when the view is published."""
        self._notice_slot = slot
        return slot

    def link_in(self, slot: Where) -> Where:
        """Draw "Link to this view" in ``slot`` when the view is published."""
        self._link_slot = slot
        return slot

    def history_in(self, slot: Where) -> Where:
        """Put the browser-history guard in ``slot`` (an ``st.empty()``) now; tell it what was written on publish.

        The guard installs itself once per browser tab (`dashboard.history`); from then on the
        publish that completes a page switch replaces the switch's history entry instead of adding
        one. (The first run of a tab usually finishes before the guard has loaded, so a link opened
        without every parameter still leaves one extra entry.)
        """
        self._history_slot = slot
        slot.html(sharing.history_guard(), unsafe_allow_javascript=True)
        return slot

    def _publish(self) -> None:
        """Write the view state into the URL and show what goes with it (`view_state` calls this on exit)."""
        if self.page is None:
            raise RuntimeError("the view was never told its page: call view.open(page, pages) after st.navigation")
        url_path = self.page.url_path
        params = dict(self.params)
        out = sharing.publication(params, url_path=url_path, space_id=self.settings.space_id, base_url=st.context.url)
        if self._link_slot is not None:
            with self._link_slot:
                st.markdown("**Link to this view**")
                st.code(out.link, language=None, wrap_lines=True)
        if {k: st.query_params.get_all(k) for k in st.query_params} != params:
            st.query_params.from_dict(params)
        st.session_state[_WRITTEN] = params
        st.session_state[_PREV_PAGE] = url_path
        st.session_state.pop(_NEXT, None)  # handed values not used by this page expire
        if self._history_slot is not None:
            self._history_slot.html(out.history_script, unsafe_allow_javascript=True)
        for text in self.notices:
            (self._notice_slot or st).warning(text, icon=":material/link_off:")
        if out.parent_script is not None:
            st.iframe(out.parent_script, height="content")


@contextmanager
def view_state(settings: Settings) -> Iterator[View]:
    """The view of this script run: widgets work inside the block, and leaving it normally publishes the view.

    An exception leaving the block (``st.switch_page``, a rerun, an error) publishes nothing.
    """
    view = View(settings)
    st.session_state[_VIEW] = view
    try:
        yield view
        view._publish()
    finally:
        st.session_state.pop(_VIEW, None)


def _active(what: str) -> View:
    view = st.session_state.get(_VIEW)
    if not isinstance(view, View):
        raise RuntimeError(
            f"dashboard.widgets.{what} needs an active view: pages run inside app.py's "
            "`with widgets.view_state(settings)` block (run the app, not a page file on its own)"
        )
    return view


def frame() -> Frame:
    """The frame app.py set for this run.

    Raises:
        RuntimeError: outside an active view, or before app.py has set the frame.
    """
    current = _active("frame").frame
    if current is None:
        raise RuntimeError("dashboard.widgets.frame: app.py sets the frame (view.set_frame) before the page runs")
    return current


def run_frame() -> RunFrame | None:
    """The frame of a run with statistics, or None after telling the user why there is nothing to show.

    Every page's empty case: no store chosen (or none found), or a store with no checkpoints yet.
    """
    current = frame()
    why = current.empty_reason()
    if why is not None:
        st.info(why)
        return None
    return current.opened()


def no_values(values: Any, label: str, matrix: str) -> bool:
    """Whether ``values`` hold no finite number; if so, say why on the page (every page's second empty case:
    a statistic a store from before schema version 3 lacks, or the change after the last checkpoint)."""
    import numpy as np

    if np.isfinite(np.asarray(values, dtype=np.float64)).any():
        return False
    st.info(
        f"This store has no values of {label} for {matrix}: the circuit columns and the relative change "
        "came with schema version 3 (rerun `python -m precompute` on the store with its checkpoints to add "
        "them); the relative change also needs two checkpoints and overlaps (`--overlap-k` > 0)."
    )
    return True


def notice(text: str) -> None:
    """Queue a notice shown at the top of the page."""
    _active("notice").notices.append(text)


def _register(view: View, name: str, value: Any) -> None:
    values = value if isinstance(value, (list, tuple)) else [value]
    view.params[name] = [encode(v) for v in values]
    if name in PAGE_SCOPED:
        st.session_state.setdefault(_PAGE_LAST, {})[(_page_of(view), name)] = value
    else:
        st.session_state.setdefault(_LAST, {})[name] = value


def _page_of(view: View) -> str:
    return getattr(view.page, "url_path", "") or ""


def _from_url(view: View, name: str) -> list[str] | None:
    """The URL's values for ``name`` when they come from outside the app (a link, a page switch), else None.

    The time scale the app wrote for another page counts as from outside when this page is new: it is in the
    URL this page was opened with (a link that opens on another page first, a click-through). A statistic
    (``stat``, ``k``) another page wrote never does: each page keeps its own.
    """
    raw = st.query_params.get_all(name)
    if not raw:
        return None
    if st.session_state.get(_WRITTEN, {}).get(name) == raw:
        switched = name == "xscale" and st.session_state.get(_PREV_PAGE) != _page_of(view)
        if not switched:
            return None
    return raw


def _seed(
    view: View, name: str, options: Sequence[Any], default: Any, *, multi: bool, hint: str | None = None, most: int | None = None
) -> None:
    """Put the value the widget should show into session state before it is created (a list of at most
    ``most`` values for a several-choice widget: Streamlit raises on more than its ``max_selections``)."""
    handed = st.session_state.get(_NEXT, {}).pop(name, _MISSING)
    if _valid(handed, options, multi=multi, most=most):
        st.session_state[name] = handed
        return
    raw = _from_url(view, name)
    if raw is not None:
        parsed = (
            parse_many(name, raw, options, default, hint=hint, most=most) if multi else parse_one(name, raw, options, default)
        )
        if parsed.notice:
            view.notices.append(parsed.notice)
        st.session_state[name] = parsed.value
        return
    if name in PAGE_SCOPED:  # this page's own last value; the widget's session value only if this page set it
        page = _page_of(view)
        own = st.session_state.get(name, _MISSING) if st.session_state.get(_PREV_PAGE) == page else _MISSING
        candidates = (own, st.session_state.get(_PAGE_LAST, {}).get((page, name), _MISSING))
    else:
        candidates = (st.session_state.get(name, _MISSING), st.session_state.get(_LAST, {}).get(name, _MISSING))
    for candidate in candidates:
        if _valid(candidate, options, multi=multi, most=most):
            st.session_state[name] = candidate
            return
    st.session_state[name] = list(default) if multi else default


def _valid(value: Any, options: Sequence[Any], *, multi: bool, most: int | None = None) -> bool:
    if value is _MISSING:
        return False
    if multi:
        return isinstance(value, list) and all(_member(v, options) for v in value) and (most is None or len(value) <= most)
    return not isinstance(value, list) and _member(value, options)


def _member(value: Any, options: Sequence[Any]) -> bool:
    """``value`` is one of ``options`` with the same type (so True never passes for 1)."""
    return any(type(value) is type(o) and value == o for o in options)


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
    view = _active("select")
    options = list(options)
    _seed(view, name, options, default, multi=False)
    fmt = fmt or str
    if kind == "radio":
        value = where.radio(label, options, key=name, format_func=fmt, horizontal=True, help=help)
    elif kind == "select_slider":
        value = where.select_slider(label, options, key=name, format_func=fmt, help=help)
    else:
        value = where.selectbox(label, options, key=name, format_func=fmt, help=help)
    _register(view, name, value)
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
) -> list[Any]:
    """A several-choice widget bound to the repeatable URL parameter ``name`` (``step=0&step=64``).

    Values come back in option order whatever order they were picked in. ``hint`` is added to the
    notice about values a link asked for that are not options (what to do about them). A link with
    more than ``max_selections`` values keeps its first ``max_selections`` and says so in a notice.

    Raises:
        RuntimeError: outside an active view.
    """
    view = _active("multiselect")
    options = list(options)
    _seed(view, name, options, default, multi=True, hint=hint, most=max_selections)
    picked = where.multiselect(label, options, key=name, format_func=fmt or str, help=help, max_selections=max_selections)
    value = [o for o in options if o in picked]
    _register(view, name, value)
    return value


def toggle(name: str, label: str, default: bool = False, *, where: Where = st, help: str | None = None) -> bool:
    """An on/off switch bound to the URL parameter ``name`` (``1`` / ``0``).

    Raises:
        RuntimeError: outside an active view.
    """
    view = _active("toggle")
    _seed(view, name, [False, True], default, multi=False)
    value = bool(where.toggle(label, key=name, help=help))
    _register(view, name, value)
    return value


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
    from analysis.stats.crossings import GAP_THRESHOLD

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
    view = _active("int_slider")
    _seed(view, name, list(range(lo, hi + 1)), default, multi=False)
    if hi <= lo:  # a one-value range: nothing to slide
        where.caption(f"{label}: {lo} (the only value)")
        value = lo
    else:
        value = int(where.slider(label, min_value=lo, max_value=hi, step=1, key=name, help=help))
    _register(view, name, value)
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
        rerun = f"`python -m precompute --source SOURCE --out {store_path}`" if store_path else "`python -m precompute`"
        where.caption(
            f"This store has W_QK rows only. A rerun of {rerun} on it, with its checkpoints, adds W_OV "
            "for every checkpoint, the symmetric fraction and eigenvalue positivity of both, and the "
            "relative change between checkpoints."
        )
    return value


def switch_page(page: Any, **values: Any) -> None:
    """Open ``page`` with some of its widgets set to ``values`` (``layer=2, head=3``), as one browser-history entry.

    ``st.switch_page(page, query_params=...)`` would first write those parameters into
    the *current* page's URL, which the browser records as an extra entry (Back then
    shows this page with the next page's parameters). Here the values go through
    session state and the query string is passed on unchanged, which adds no entry;
    the next page writes its complete view state when its view is published.
    Values that are not valid options on the next page are ignored.

    Raises:
        RuntimeError: outside an active view.
    """
    _active("switch_page")
    st.session_state[_NEXT] = dict(values)
    st.switch_page(page, query_params={k: st.query_params.get_all(k) for k in st.query_params})


def image_format(*, where: Where = st) -> str:
    """The format the charts' camera icon saves (URL ``img=png|svg``), a small choice drawn above the page's
    first chart, where the user exports; carried across pages like ``layer``. `chart` calls it.

    Raises:
        RuntimeError: outside an active view.
    """
    from dashboard.export import EXPORT_SCALE, EXPORT_WIDTH, IMAGE_FORMATS

    view = _active("image_format")
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


def chart(
    fig: Any,
    key: str,
    *,
    title: str,
    filename: str,
    csv: Callable[[], Any] | None = None,
    select: bool = False,
    where: Where = st,
    config: dict[str, Any] | None = None,
) -> Any:
    """A Plotly chart with its exports: the figure titled ``title`` (run, head, statistic), the camera button
    saving ``filename`` as PNG or SVG (`image_format`, chosen above the page's first chart) at paper size, and a
    CSV button under it.

    Args:
        fig: the figure (its title is set here).
        key: widget key (the CSV button's is ``{key}_csv``).
        title: what the figure is: run, layer, head, statistic.
        filename: file name without extension (`dashboard.export.safe_name`).
        csv: a function returning the chart's data as a tidy DataFrame, called only when the button is clicked.
        select: clicking a point reruns the page with the selection (``on_select="rerun"``, points only).
        config: more Plotly config (``displayModeBar``), merged over the export settings.

    Returns:
        The selection event when ``select``, else None.
    """
    from dashboard import export

    _active("chart")
    export.titled(fig, title)
    cfg = {**export.chart_config(filename, image_format(where=where), height=fig.layout.height), **(config or {})}
    if select:
        event = where.plotly_chart(fig, key=key, config=cfg, on_select="rerun", selection_mode="points")
    else:
        event = None
        where.plotly_chart(fig, key=key, config=cfg)
    if csv is not None:
        where.download_button(
            "Data (CSV)",
            lambda: export.to_csv(csv()),
            file_name=f"{filename}.csv",
            mime="text/csv",
            key=f"{key}_csv",
            on_click="ignore",
            icon=":material/download:",
            type="tertiary",
            help="Every point of this chart as a tidy table: run, layer, head, matrix, statistic, k, step, value",
        )
    return event


@functools.cache
def _playback() -> Any:
    """The component that reports an animated chart's paused frame (`dashboard.playback`), registered once."""
    from dashboard.playback import SCRIPT

    return st.components.v2.component("headwatch_playback", js=SCRIPT)


def follow_play(chart_key: str, step: int, *, name: str = "step") -> None:
    """Make Pause (or the end of Play) on the animated chart ``chart_key`` move the step control ``name`` there.

    The chart's frames must be named by their step (``str(step)``), and the page must show the frame of
    ``step`` (its step control's value). When the animation stops on another frame, the page reruns
    with ``name`` set to that frame's step, so the chart, the control and the link show one step.
    Mount it after the step control and the chart.

    Raises:
        RuntimeError: outside an active view.
    """
    _active("follow_play")
    key = f"{chart_key}_playback"
    _playback()(
        key=key,
        data={"chart": chart_key, "step": encode(step)},
        on_paused_change=lambda: _take_paused(key, name),
        height=0,
        width="content",
    )


def _take_paused(key: str, name: str) -> None:
    """Callback: put the paused frame's step into the step control ``name`` before the page reruns."""
    state = st.session_state.get(key) or {}
    paused = state.get("paused") if hasattr(state, "get") else None
    with contextlib.suppress(TypeError, ValueError):
        st.session_state[name] = int(str(paused))


def open_head_on_click(event: Any, store: Any, **values: Any) -> None:
    """When ``event`` (a chart's selection) picked a point of a head, open that head in the head explorer.

    The point's ``customdata`` is ``[layer, head, step, ...]`` (`dashboard.figures.points`, the one format); a
    third entry that is one of the run's steps (a heatmap cell) is added to the head explorer's chosen steps.
    ``values`` (``stat``, ``k``) go with it; None values are left out.
    """
    from dashboard.data import default_steps
    from dashboard.figures.points import picked_head, picked_step

    picked = picked_head(event, n_layers=store.n_layers, n_heads=store.n_heads)
    if picked is None:
        return
    handed = {k: v for k, v in values.items() if v is not None}
    step = picked_step(event, [int(s) for s in store.steps])
    if step is not None and "step" not in handed:
        handed["step"] = sorted(set(default_steps(store.steps)) | {step})
    switch_page("pages/head_explorer.py", layer=int(picked[0]), head=int(picked[1]), **handed)
