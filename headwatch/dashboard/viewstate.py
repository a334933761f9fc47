"""The view of one app run and its URL state machine: which value each URL-bound widget shows, and publishing.

Besides app.py, pages/, the cached loader, the widgets (`dashboard.widgets`), the charts
(`dashboard.charts`) and the server, this is the only module that imports streamlit. app.py
runs every script run inside one view::

    with viewstate.view_state(settings) as view:  # begin: collect this run's view state
        page = st.navigation(pages)
        view.open(page, pages)                    # the page shown; a Space link's ?page= switches
        ...                                       # sidebar widgets, view.notices_in / link_in / history_in
        view.set_frame(Frame(...))                # what the sidebar chose, for the pages
        page.run()                                # the page's widgets add to the view
                                                  # exit: publish the view

so the order begin -> page -> publish is the code's, not the caller's: the widgets,
`frame` and `notice` raise RuntimeError outside an active view, and leaving
the block normally is what publishes. A run that ends by an exception (a page
switch, a rerun, an error) publishes nothing.

Every view-defining widget (`dashboard.widgets`) is keyed by its URL parameter name
(``layer``, ``head``, ``k``, ``step``, ``stat``, ``matrix``, ``run``, ``img``, page toggles)
and asks `seed` for its value before it is made, then hands the value back with `register`.
On each run:

1. the URL wins when it carries a value the app did not write itself (a shared
   link, ``st.switch_page(..., query_params=...)``, browser history); invalid
   values fall back to the default and leave a notice (`dashboard.urlstate`);
2. otherwise the widget keeps its session value, or the last value any page gave
   that parameter (so ``layer`` carries over when you switch pages), as long as
   it is valid here, else its default;
3. when the view is published, the complete view state is written back to the query
   string (on a page with tabs, with the values of the hidden tabs' widgets a link gave or the page
   had: `View.unshown`), the notices are shown at the top of the page, the share link is drawn,
   the browser-history guard is told what was written and, on a Space, the view is
   posted to the Space page (what to put there: `dashboard.sharing`).

Streamlit's native ``bind="query-params"`` is not used: it drops an invalid
value silently (the issue asks for a visible notice) and stores a select box's
*formatted label* in the URL, where links need ``stat=std``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import streamlit as st

from headwatch.dashboard import sharing
from headwatch.dashboard.frame import Frame, RunFrame
from headwatch.dashboard.settings import AppSettings
from headwatch.dashboard.urlstate import encode, parse_many, parse_one, quote_value

LINK_KEY = "view_link"  # the sidebar's "Link to this view" (its container's CSS class: .st-key-view_link)
_VIEW = "_hw_view"  # the active View, present only while app.py's `with view_state(...)` block runs
_WRITTEN = "_hw_written"  # the query string the app last wrote: name -> list of URL strings
_LAST = "_hw_last"  # last value of every parameter; plain session state, so it survives page switches
_NEXT = "_hw_next"  # (url_path of the page they are for, values) `switch_page` hands to its widgets, used once there
_PAGE_LAST = "_hw_page_last"  # (page url_path, name) -> last value, for the parameters in PAGE_SCOPED
_PREV_PAGE = "_hw_prev_page"  # url_path of the page the last published view showed
_KEPT = "_hw_kept"  # (page url_path, name) -> URL values a link gave a widget of a tab not drawn yet (`View.unshown`)
# each page keeps its own: never carried to another page (a link or a click hands them); xscale: pages open on
# the time axis that reads their early training (`dashboard.navigation.PageSpec.time_scale`)
PAGE_SCOPED = ("stat", "k", "xscale", "panel")  # panel: each page its own tabs (head explorer, Forward lenses, LLC)

Where = Any  # streamlit module or a container / column (DeltaGenerator)
_MISSING = object()


@dataclass(frozen=True)
class _FromLink:
    """Values a link gives one parameter, as the URL spells them (`open_link`): the next page reads them as it reads
    its own URL (`dashboard.urlstate`), so a repeatable parameter and a single one, a bad value's notice, alike."""

    raw: tuple[str, ...]


class View:
    """One run's view: its settings, page, frame, URL parameters and notices, and where to publish them.

    Made by `view_state`; app.py tells it the page (`open`), the frame (`set_frame`) and
    the slots for notices, the share link and the history guard.
    """

    def __init__(self, settings: AppSettings) -> None:
        self.settings = settings
        self.params: dict[str, list[str]] = {}  # URL parameter -> values, in widget order
        self.notices: list[str] = []
        self.unshown: frozenset[str] = frozenset()  # URL parameters of the tabs not drawn (`widgets.panel_tabs`)
        self.given: set[str] = set()  # URL parameters whose value a link or a click gave this run (`seed`)
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
        if self.unshown:
            params.update(_unshown(self, params))
        else:
            st.session_state.pop(_KEPT, None)
        out = sharing.publication(params, url_path=url_path, space_id=self.settings.space_id, base_url=st.context.url)
        if self._link_slot is not None:
            with self._link_slot, st.container(key=LINK_KEY):
                st.markdown("**Link to this view**")
                # A link in code type, not st.code: st.code makes the browser load Streamlit's syntax highlighter
                # on every page (docs/dashboard.md, the pages' load against a bare page); right-click copies it.
                st.markdown(f"[`{out.link}`]({out.link})")
        if {k: st.query_params.get_all(k) for k in st.query_params} != params:
            st.query_params.from_dict(params)
        st.session_state[_WRITTEN] = params
        st.session_state[_PREV_PAGE] = url_path
        if _handed_to(self) is not None:  # values handed to this page and not used by it expire; a run of another
            st.session_state.pop(_NEXT, None)  # page (a rerun queued before the switch) leaves them for theirs
        if self._history_slot is not None:
            self._history_slot.html(out.history_script, unsafe_allow_javascript=True)
        for text in self.notices:
            (self._notice_slot or st).warning(text, icon=":material/link_off:")
        if out.parent_script is not None:
            st.iframe(out.parent_script, height="content")


@contextmanager
def view_state(settings: AppSettings) -> Iterator[View]:
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


def active(what: str) -> View:
    """The active view; ``what`` (``widgets.select``) names the caller in the error.

    Raises:
        RuntimeError: outside app.py's ``with viewstate.view_state(settings)`` block.
    """
    view = st.session_state.get(_VIEW)
    if not isinstance(view, View):
        raise RuntimeError(
            f"dashboard.{what} needs an active view: pages run inside app.py's "
            "`with viewstate.view_state(settings)` block (run the app, not a page file on its own)"
        )
    return view


def frame() -> Frame:
    """The frame app.py set for this run.

    Raises:
        RuntimeError: outside an active view, or before app.py has set the frame.
    """
    current = active("viewstate.frame").frame
    if current is None:
        raise RuntimeError("dashboard.viewstate.frame: app.py sets the frame (view.set_frame) before the page runs")
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


def opened_with(name: str) -> bool:
    """Whether this run opens its page with the value of ``name`` given from outside it: a link (a fresh tab's URL, the
    browser's history) or a click on another page (`switch_page`, `open_link`). A rerun of the page itself (a widget
    changed, a tab chosen) opens nothing, and a page reached by the navigation shows its own last value.

    Raises:
        RuntimeError: outside an active view.
    """
    view = active("viewstate.opened_with")
    return st.session_state.get(_PREV_PAGE) != _page_of(view) and name in view.given


def notice(text: str) -> None:
    """Queue a notice shown at the top of the page."""
    active("viewstate.notice").notices.append(text)


def register(view: View, name: str, value: Any) -> None:
    """Record the value a widget shows as the URL parameter ``name`` and as its last value (per page when in `PAGE_SCOPED`)."""
    view.params[name] = _encoded(value)
    if name in PAGE_SCOPED:
        st.session_state.setdefault(_PAGE_LAST, {})[(_page_of(view), name)] = value
    else:
        st.session_state.setdefault(_LAST, {})[name] = value


def _encoded(value: Any) -> list[str]:
    """A widget's value as the URL spells it: one string per value of a several-choice widget."""
    return [encode(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def _unshown(view: View, params: dict[str, list[str]]) -> dict[str, list[str]]:
    """What the link keeps of a page with tabs beyond the widgets drawn (``params``): the values of the parameters of
    the other tabs' widgets (``view.unshown``).

    The widgets of a tab not drawn do not run, so they cannot register; without this, a link's ``stat=std`` opened on
    the weights tab would leave the address at the first publish, and a later click on the statistic tab would show
    this session's own value instead of the link's. Kept: the values a link gave (the URL's, from outside; those handed
    by `open_link` or `switch_page` and not used), remembered in `_KEPT` so that the widget reads them as a link's when
    its tab is drawn (a bad value's notice then), and this page's own earlier values in the URL (a setting chosen on a
    tab stays in the link while another tab is shown). Not kept: what another page wrote (a page switch's URL).
    """
    page = _page_of(view)
    written = st.session_state.get(_WRITTEN, {})
    same_page = st.session_state.get(_PREV_PAGE) == page
    kept = {key: raw for key, raw in st.session_state.get(_KEPT, {}).items() if key[0] == page}  # other pages' expire
    out: dict[str, list[str]] = {}
    for name in st.query_params:
        raw = st.query_params.get_all(name)
        if name in params or name not in view.unshown or not raw:
            continue
        if written.get(name) != raw:  # from outside: a link, the browser's history
            kept[(page, name)] = tuple(raw)
            out[name] = raw
        elif same_page:
            out[name] = raw
    handed = _handed_to(view) or {}
    for name, value in handed.items():  # handed to this page by a click or a link and not used by its tabs drawn
        if name in params or name not in view.unshown:
            continue
        raw = list(value.raw) if isinstance(value, _FromLink) else _encoded(value)
        kept[(page, name)] = tuple(raw)
        out[name] = raw
    st.session_state[_KEPT] = kept
    return out


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
    kept = st.session_state.get(_KEPT, {})
    if kept.get((_page_of(view), name)) == tuple(raw):  # a link's value kept while its tab was not drawn (`_unshown`)
        del kept[(_page_of(view), name)]
        return raw
    if st.session_state.get(_WRITTEN, {}).get(name) == raw:
        switched = name == "xscale" and st.session_state.get(_PREV_PAGE) != _page_of(view)
        if not switched:
            return None
    return raw


def seed(
    view: View,
    name: str,
    options: Sequence[Any],
    default: Any,
    *,
    multi: bool,
    hint: str | None = None,
    most: int | None = None,
    fmt: Callable[[Any], str] | None = None,
    left_out: Mapping[Any, str] | None = None,
) -> None:
    """Put the value the widget ``name`` should show into session state before it is created (a list of at most
    ``most`` values for a several-choice widget: Streamlit raises on more than its ``max_selections``); ``fmt``: how
    a single-choice widget shows its options, for the notice on a value the link gives that is not one of them.

    ``left_out`` (several-choice widgets): values that are not options here for a stated reason (the Trajectory map's
    own run among the runs joined with it: ``{run: "is this page's own run ..."}``). A link, or the widget's earlier
    value (a run joined with the map, then picked in the sidebar), that names one loses only that value, with a notice
    that gives the reason."""
    mine = _handed_to(view)
    handed = mine.pop(name, _MISSING) if mine is not None else _MISSING
    spelled = {encode(v): why for v, why in (left_out or {}).items()}
    if isinstance(handed, _FromLink):
        parsed = (
            parse_many(name, handed.raw, options, default, hint=hint, most=most, left_out=spelled)
            if multi
            else parse_one(name, handed.raw, options, default, fmt=fmt)
        )
        if parsed.notice:
            view.notices.append(parsed.notice)
        st.session_state[name] = parsed.value
        view.given.add(name)
        return
    if _valid(handed, options, multi=multi, most=most):
        st.session_state[name] = handed
        view.given.add(name)
        return
    raw = _from_url(view, name)
    if raw is not None:
        parsed = (
            parse_many(name, raw, options, default, hint=hint, most=most, left_out=spelled)
            if multi
            else parse_one(name, raw, options, default, fmt=fmt)
        )
        if parsed.notice:
            view.notices.append(parsed.notice)
        st.session_state[name] = parsed.value
        view.given.add(name)
        return
    if name in PAGE_SCOPED:  # this page's own last value; the widget's session value only if this page set it
        page = _page_of(view)
        own = st.session_state.get(name, _MISSING) if st.session_state.get(_PREV_PAGE) == page else _MISSING
        candidates = (own, st.session_state.get(_PAGE_LAST, {}).get((page, name), _MISSING))
    else:
        candidates = (st.session_state.get(name, _MISSING), st.session_state.get(_LAST, {}).get(name, _MISSING))
    for candidate in candidates:
        gone: list[Any] = []
        if multi and left_out and isinstance(candidate, list):
            # an earlier value that names one left out here (a run joined with the map, now the page's own) loses it alone
            gone = [v for v in candidate if _member(v, list(left_out))]
            candidate = [v for v in candidate if v not in gone]
        if _valid(candidate, options, multi=multi, most=most):
            view.notices.extend(f"{quote_value(name, encode(v))} {spelled[encode(v)]}." for v in gone)
            st.session_state[name] = candidate
            return
    st.session_state[name] = list(default) if multi else default


def _handed_to(view: View) -> dict[str, Any] | None:
    """The values `switch_page` or `open_link` handed to the page ``view`` shows, or None (none, or for another page)."""
    handed = st.session_state.get(_NEXT)
    if not handed or handed[0] != _page_of(view):
        return None
    return handed[1]


def _target(page: Any) -> str:
    """The url_path of ``page`` (an ``st.Page``, or a page file such as ``pages/head_explorer.py``)."""
    from headwatch.dashboard.navigation import PAGES

    if isinstance(page, str):  # the default page is served at "" whatever its url_path says
        return next(("" if p.default else p.url_path for p in PAGES if p.file == page), page)
    return str(getattr(page, "url_path", "") or "")


def _valid(value: Any, options: Sequence[Any], *, multi: bool, most: int | None = None) -> bool:
    if value is _MISSING:
        return False
    if multi:
        return isinstance(value, list) and all(_member(v, options) for v in value) and (most is None or len(value) <= most)
    return not isinstance(value, list) and _member(value, options)


def _member(value: Any, options: Sequence[Any]) -> bool:
    """``value`` is one of ``options`` with the same type (so True never passes for 1)."""
    return any(type(value) is type(o) and value == o for o in options)


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
    active("viewstate.switch_page")
    st.session_state[_NEXT] = (_target(page), dict(values))
    st.switch_page(page, query_params={k: st.query_params.get_all(k) for k in st.query_params})


def open_link(page: Any, query: dict[str, list[str]]) -> None:
    """Open ``page`` on the view a link's query string names (``{"layer": ["1"], "step": ["1400"]}``), as one
    browser-history entry (as `switch_page`): each value is read by the next page as if its URL carried it.

    Raises:
        RuntimeError: outside an active view.
    """
    active("viewstate.open_link")
    st.session_state[_NEXT] = (_target(page), {name: _FromLink(tuple(values)) for name, values in query.items()})
    st.switch_page(page, query_params={k: st.query_params.get_all(k) for k in st.query_params})
