"""Widgets whose values live in the URL, the frame every page reads, notices and the share link.

Every view-defining widget is made through this module, keyed by its URL
parameter name (``layer``, ``head``, ``k``, ``step``, ``stat``, ``run``, page
toggles). On each rerun:

1. the URL wins when it carries a value the app did not write itself (a shared
   link, ``st.switch_page(..., query_params=...)``, browser history); invalid
   values fall back to the default and leave a notice (`dashboard.urlstate`);
2. otherwise the widget keeps its session value, or the last value any page gave
   that parameter (so ``layer`` carries over when you switch pages), as long as
   it is valid here, else its default;
3. after the page has run, `publish` writes the complete view state back to the
   query string and shows the notices at the top of the page. The browser records
   a page switch and the write that completes its view as one history entry
   (`dashboard.history`), so Back returns to the previous view in one press.

On a Hugging Face Space (``SPACE_ID`` set) the share link is the Space page's
URL with the page as ``page=`` and, after every rerun, the view's query string
is posted to the Space page so its address bar follows the app; ``page=`` on
the root URL opens that page (`requested_page`). See `dashboard.space`.

Streamlit's native ``bind="query-params"`` is not used: it drops an invalid
value silently (the issue asks for a visible notice) and stores a select box's
*formatted label* in the URL, where links need ``stat=std``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pathlib import Path
from urllib.parse import urlencode

import streamlit as st

from analysis.store import Store
from dashboard.data import Scale, StepAxis, Unit, step_axis
from dashboard.history import guard_script
from dashboard.settings import Settings
from dashboard.space import PAGE_PARAM, parent_query, parent_sync_script, space_url
from dashboard.stats import LAMBDA, STATS
from dashboard.urlstate import encode, parse_many, parse_one, query_string

_PARAMS = "_hw_params"  # this run's view state: name -> list of URL strings, in widget order
_WRITTEN = "_hw_written"  # the query string the app last wrote: name -> list of URL strings
_NOTICES = "_hw_notices"  # notices raised during this run
_FRAME = "_hw_frame"  # the Frame app.py chose for this run
_LAST = "_hw_last"  # last value of every parameter; plain session state, so it survives page switches
_NEXT = "_hw_next"  # values `switch_page` hands to the next page's widgets, used once
_SETTINGS = "_hw_settings"  # this run's Settings

Where = Any  # streamlit module or a container / column (DeltaGenerator)
_MISSING = object()


@dataclass(frozen=True)
class Frame:
    """What the shared sidebar chose for this run: the store and the training-time axis.

    Attributes:
        store: the opened store, or None when none is available.
        run: its ``run`` name (URL value).
        unit: ``step`` or ``tokens``; scale: ``linear`` or ``log``.
        runs: every run the sidebar offers, name -> store folder (`dashboard.loader.runs`).
    """

    store: Store | None
    run: str | None
    unit: Unit = "step"
    scale: Scale = "linear"
    runs: dict[str, Path] = field(default_factory=dict)

    def axis(self) -> StepAxis:
        assert self.store is not None
        return step_axis(self.store, unit=self.unit, scale=self.scale)


def begin_run(settings: Settings) -> None:
    """Start collecting this run's view state and notices (app.py calls this first)."""
    st.session_state[_SETTINGS] = settings
    st.session_state[_PARAMS] = {}
    st.session_state[_NOTICES] = []


def set_frame(frame: Frame) -> None:
    st.session_state[_FRAME] = frame


def frame() -> Frame:
    """The frame app.py set for this run (an empty one when a page runs on its own)."""
    return st.session_state.get(_FRAME) or Frame(store=None, run=None)


def run_frame() -> Frame | None:
    """The frame of a run with statistics, or None after telling the user why there is nothing to show.

    Every page's empty case: no store chosen (or none found), or a store with no checkpoints yet.
    """
    current = frame()
    if current.store is None:
        st.info("No run to show: pick or create a statistics store (see the sidebar).")
        return None
    if len(current.store.steps) == 0:
        st.info("This run has no checkpoints with statistics yet.")
        return None
    return current


def notice(text: str) -> None:
    """Queue a notice shown at the top of the page."""
    st.session_state.setdefault(_NOTICES, []).append(text)


def _register(name: str, value: Any) -> None:
    values = value if isinstance(value, (list, tuple)) else [value]
    st.session_state.setdefault(_PARAMS, {})[name] = [encode(v) for v in values]
    st.session_state.setdefault(_LAST, {})[name] = value


def _from_url(name: str) -> list[str] | None:
    """The URL's values for ``name`` when they come from outside the app (a link, a page switch), else None."""
    raw = st.query_params.get_all(name)
    if not raw:
        return None
    if st.session_state.get(_WRITTEN, {}).get(name) == raw:
        return None
    return raw


def _seed(name: str, options: Sequence[Any], default: Any, *, multi: bool) -> None:
    """Put the value the widget should show into session state before it is created."""
    handed = st.session_state.get(_NEXT, {}).pop(name, _MISSING)
    if _valid(handed, options, multi=multi):
        st.session_state[name] = handed
        return
    raw = _from_url(name)
    if raw is not None:
        parsed = parse_many(name, raw, options, default) if multi else parse_one(name, raw, options, default)
        if parsed.notice:
            notice(parsed.notice)
        st.session_state[name] = parsed.value
        return
    for candidate in (st.session_state.get(name, _MISSING), st.session_state.get(_LAST, {}).get(name, _MISSING)):
        if _valid(candidate, options, multi=multi):
            st.session_state[name] = candidate
            return
    st.session_state[name] = list(default) if multi else default


def _valid(value: Any, options: Sequence[Any], *, multi: bool) -> bool:
    if value is _MISSING:
        return False
    if multi:
        return isinstance(value, list) and all(_member(v, options) for v in value)
    return not isinstance(value, list) and _member(value, options)


def _member(value: Any, options: Sequence[Any]) -> bool:
    """``value`` is one of ``options`` with the same type (so True never passes for 1)."""
    return any(type(value) is type(o) and value == o for o in options)


def select(
    name: str, label: str, options: Sequence[Any], default: Any, *, fmt: Callable[[Any], str] | None = None,
    kind: Literal["selectbox", "radio", "select_slider"] = "selectbox", where: Where = st, help: str | None = None,
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
    """
    options = list(options)
    _seed(name, options, default, multi=False)
    fmt = fmt or str
    if kind == "radio":
        value = where.radio(label, options, key=name, format_func=fmt, horizontal=True, help=help)
    elif kind == "select_slider":
        value = where.select_slider(label, options, key=name, format_func=fmt, help=help)
    else:
        value = where.selectbox(label, options, key=name, format_func=fmt, help=help)
    _register(name, value)
    return value


def multiselect(
    name: str, label: str, options: Sequence[Any], default: Sequence[Any], *, fmt: Callable[[Any], str] | None = None,
    where: Where = st, help: str | None = None, max_selections: int | None = None,
) -> list[Any]:
    """A several-choice widget bound to the repeatable URL parameter ``name`` (``step=0&step=64``).

    Values come back in option order whatever order they were picked in.
    """
    options = list(options)
    _seed(name, options, default, multi=True)
    picked = where.multiselect(label, options, key=name, format_func=fmt or str, help=help, max_selections=max_selections)
    value = [o for o in options if o in picked]
    _register(name, value)
    return value


def toggle(name: str, label: str, default: bool = False, *, where: Where = st, help: str | None = None) -> bool:
    """An on/off switch bound to the URL parameter ``name`` (``1`` / ``0``)."""
    _seed(name, [False, True], default, multi=False)
    value = bool(where.toggle(label, key=name, help=help))
    _register(name, value)
    return value


def int_slider(name: str, label: str, lo: int, hi: int, default: int, *, where: Where = st, help: str | None = None) -> int:
    """An integer slider over [lo, hi] bound to the URL parameter ``name``."""
    _seed(name, list(range(lo, hi + 1)), default, multi=False)
    if hi <= lo:  # a one-value range: nothing to slide
        where.caption(f"{label}: {lo} (the only value)")
        value = lo
    else:
        value = int(where.slider(label, min_value=lo, max_value=hi, step=1, key=name, help=help))
    _register(name, value)
    return value


def statistic(
    d_head: int, *, where_stat: Where, where_k: Where, where_log: Where, log: tuple[str, str],
    options: Sequence[str] | None = None, default: str = "std",
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


def switch_page(page: Any, **values: Any) -> None:
    """Open ``page`` with some of its widgets set to ``values`` (``layer=2, head=3``), as one browser-history entry.

    ``st.switch_page(page, query_params=...)`` would first write those parameters into
    the *current* page's URL, which the browser records as an extra entry (Back then
    shows this page with the next page's parameters). Here the values go through
    session state and the query string is passed on unchanged, which adds no entry;
    the next page writes its complete view state when it has run (`publish`).
    Values that are not valid options on the next page are ignored.
    """
    st.session_state[_NEXT] = dict(values)
    st.switch_page(page, query_params={k: st.query_params.get_all(k) for k in st.query_params})


def current_params() -> dict[str, list[str]]:
    """The view state collected so far in this run (URL parameter -> values)."""
    return dict(st.session_state.get(_PARAMS, {}))


def _space_id() -> str | None:
    return st.session_state[_SETTINGS].space_id


def requested_page(pages: Sequence[Any], current: Any) -> tuple[Any, dict[str, list[str]]] | None:
    """The page a ``page=<url_path>`` on the root URL asks for (how Space links name the page), else None.

    Only the default page honours it (a path wins over ``page=``). Returns the page and
    the remaining query parameters, for ``st.switch_page(page, query_params=...)``.
    """
    wanted = st.query_params.get(PAGE_PARAM)
    if not wanted or current.url_path:
        return None
    target = next((p for p in pages if p.url_path == wanted), None)
    if target is None:
        notice(f"`{PAGE_PARAM}={wanted}` is not a page here (allowed: "
               f"{', '.join(p.url_path for p in pages if p.url_path)}); showing {current.title}.")
        return None
    rest = {k: st.query_params.get_all(k) for k in st.query_params if k != PAGE_PARAM}
    return target, rest


def share_link(url_path: str = "") -> str:
    """The link that reproduces the current view: the app's URL (or the page path) plus the query string.

    On a Space it is the Space page's URL, with the page as ``page=`` (the Space forwards
    only its query string, to the app's root URL).
    """
    qs = query_string(current_params())
    space = _space_id()
    if space:
        return space_url(space, url_path, qs)
    base = st.context.url or f"/{url_path}"
    return f"{base}?{qs}" if qs else base


def guard_history(slot: Where) -> None:
    """Put the browser-history guard in ``slot`` (an ``st.empty()``) before the page runs (`dashboard.history`).

    The guard installs itself once per browser tab; from then on the `publish` that
    completes a page switch replaces the switch's history entry instead of adding one.
    (The first run of a tab usually finishes before the guard has loaded, so a link
    opened without every parameter still leaves one extra entry.)
    """
    slot.html(guard_script(), unsafe_allow_javascript=True)


def publish(notice_slot: Where, url_path: str = "", history_slot: Where | None = None) -> None:
    """Write this run's view state into the URL and show the notices (app.py calls this last).

    ``history_slot`` is the slot given to `guard_history`: the guard is told what was written.
    On a Space, also post the view (``?page=...&...``) to the Space page so its address bar carries it.
    """
    params = current_params()
    current = {k: st.query_params.get_all(k) for k in st.query_params}
    if current != params:
        st.query_params.from_dict(params)
    st.session_state[_WRITTEN] = params
    st.session_state.pop(_NEXT, None)  # handed values not used by this page expire
    if history_slot is not None:
        history_slot.html(guard_script(urlencode(params, doseq=True), url_path or None), unsafe_allow_javascript=True)
    for text in st.session_state.get(_NOTICES, []):
        notice_slot.warning(text, icon=":material/link_off:")
    if _space_id():
        st.iframe(parent_sync_script(parent_query(url_path, query_string(params))), height="content")
