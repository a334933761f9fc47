"""What goes with a chart on a page: its exports, a click on one of its heads, its animation's pause; and nothing to chart.

One of the modules that import streamlit (with app.py, pages/, the loader, `dashboard.viewstate`,
`dashboard.widgets` and the server). `chart` draws a Plotly figure with its camera button set
to paper size and its CSV button (what the files hold: `dashboard.export`); `open_head_on_click`
turns a click on a chart's point into the head explorer on that head; `open_in_new_tab` opens the view of
a clicked point in a new browser tab (the script: `dashboard.newtab`); `app_links` draws a text whose links
open their views in this tab, and `bring_into_view` scrolls a panel opened as evidence to the top of the window
(the scripts: `dashboard.inapp`); `follow_play` hands an
animated chart's paused frame back to the page's step control (the script: `dashboard.playback`);
`no_values` is a page's message when a statistic has no values to chart; `download` and `table_csv` are the
download buttons under charts and tables, `association_columns` the formats of a table of joint-cluster tests.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable
from typing import Any

import streamlit as st

from headwatch.dashboard.urlstate import encode
from headwatch.dashboard.viewstate import Where, active, open_link, switch_page
from headwatch.dashboard.widgets import image_format


def no_values(values: Any, label: str, matrix: str) -> bool:
    """Whether ``values`` hold no finite number; if so, say why on the page (every page's second empty case:
    a statistic a store from before schema version 3 lacks, or the change after the last checkpoint)."""
    import numpy as np

    if np.isfinite(np.asarray(values, dtype=np.float64)).any():
        return False
    st.info(
        f"This store has no values of {label} for {matrix}: the circuit columns and the relative change "
        "came with schema version 3 (rerun `python -m headwatch.precompute` on the store with its checkpoints to add "
        "them); the relative change also needs two checkpoints and overlaps (`--overlap-k` > 0)."
    )
    return True


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
    from headwatch.dashboard import export

    active("charts.chart")
    export.titled(fig, title)
    cfg = {**export.chart_config(filename, image_format(where=where), height=fig.layout.height), **(config or {})}
    if select:
        event = where.plotly_chart(fig, key=key, config=cfg, on_select="rerun", selection_mode="points")
    else:
        event = None
        where.plotly_chart(fig, key=key, config=cfg)
    if csv is not None:
        download(
            "Data (CSV)",
            lambda: export.to_csv(csv()),
            file_name=f"{filename}.csv",
            mime="text/csv",
            key=f"{key}_csv",
            help="Every point of this chart as a tidy table: run, layer, head, matrix, statistic, k, step, value",
            where=where,
        )
    return event


def download(
    label: str,
    data: Any,
    *,
    file_name: str,
    mime: str,
    key: str,
    icon: str = ":material/download:",
    help: str | None = None,
    where: Where = st,
) -> None:
    """A quiet download button under a chart or a table (tertiary, with ``icon``) whose click does not rerun the
    page; ``data`` may be a function, called only when the button is clicked."""
    where.download_button(
        label, data, file_name=file_name, mime=mime, key=key, on_click="ignore", icon=icon, type="tertiary", help=help
    )


def association_columns() -> dict[str, Any]:
    """The number formats of a table of joint-cluster tests (`analysis.findings.sizes.association_table`), as
    ``st.dataframe``'s ``column_config``."""
    fmt = st.column_config.NumberColumn
    return {
        "AMI or gain": fmt(format="%.3f"),
        "p": fmt(format="%.4f"),
        "Monte Carlo s.e.": fmt(format="%.4f"),
        "p, Holm": fmt(format="%.4f"),
    }


def table_csv(table: Any, filename: str, *, key: str) -> None:
    """The "Download this table (CSV)" button under a table: ``table`` (a DataFrame) as CSV without its index, saved
    as ``filename``.csv."""
    st.download_button(
        "Download this table (CSV)", table.to_csv(index=False), file_name=f"{filename}.csv", mime="text/csv", key=key
    )


@functools.cache
def _playback() -> Any:
    """The component that reports an animated chart's paused frame (`dashboard.playback`), registered once."""
    from headwatch.dashboard.playback import SCRIPT

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
    active("charts.follow_play")
    key = f"{chart_key}_playback"
    _playback()(
        key=key,
        data={"chart": chart_key, "step": encode(step)},
        on_paused_change=lambda: _take_paused(key, name),
        height=0,
        width="content",
    )


@functools.cache
def _new_tab() -> Any:
    """The component that opens a clicked point's view in a new tab (`dashboard.newtab`), registered once."""
    from headwatch.dashboard.newtab import SCRIPT

    return st.components.v2.component("headwatch_new_tab", js=SCRIPT)


def open_in_new_tab(chart_key: str, link: str) -> None:
    """Make a click on a point of the chart ``chart_key`` open ``link`` in a new browser tab, the page left as it is.

    Args:
        chart_key: the chart's key (`chart`'s ``key``); draw it without ``select``, or the click also reruns the page.
        link: a relative link (``head?run=r&layer=...``) with ``{i}`` where the point's ``customdata[i]`` goes
            (``layer={0}&head={1}&step={2}``; the values URL-encoded; a point lacking one opens nothing).

    Raises:
        RuntimeError: outside an active view.
    """
    active("charts.open_in_new_tab")
    _new_tab()(key=f"{chart_key}_new_tab", data={"chart": chart_key, "template": link}, height=0, width="content")


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
    ``values`` (``stat``, ``k``) go with it; None values are left out. With a statistic the head explorer opens on
    its statistic tab (``panel=statistic``), that statistic against the head's layer: the evidence the click was on.
    """
    from headwatch.analysis.findings.events import EVIDENCE_PANEL
    from headwatch.dashboard.data import default_steps
    from headwatch.dashboard.figures.points import picked_head, picked_step

    picked = picked_head(event, n_layers=store.n_layers, n_heads=store.n_heads)
    if picked is None:
        return
    handed = {k: v for k, v in values.items() if v is not None}
    if "stat" in handed:
        handed.setdefault("panel", EVIDENCE_PANEL)
    step = picked_step(event, [int(s) for s in store.steps])
    if step is not None and "step" not in handed:
        handed["step"] = sorted(set(default_steps(store.steps)) | {step})
    switch_page("pages/head_explorer.py", layer=int(picked[0]), head=int(picked[1]), **handed)


def open_link_on_click(event: Any) -> None:
    """When ``event`` (a chart's selection) picked a point whose ``customdata`` names a view link in its second entry
    (`analysis.findings.events.Event.link`: ``head?run=...&layer=1&head=0&step=1400``), open that view (the Timeline's
    event markers)."""
    for point in ((event or {}).get("selection") or {}).get("points") or []:
        custom = point.get("customdata")
        link = (
            custom.get("1") if isinstance(custom, dict) else custom[1] if isinstance(custom, list) and len(custom) > 1 else None
        )
        if isinstance(link, str):
            _open_view(link)


def _open_view(link: str) -> None:
    """Open the view a relative link names (``head?run=...&layer=1``) in this tab, as one browser-history entry
    (`viewstate.open_link`); a link to no page of the app opens nothing."""
    from urllib.parse import parse_qs

    from headwatch.dashboard.navigation import PAGES

    if "?" not in link:
        return
    path, _, query = link.partition("?")
    spec = next((p for p in PAGES if p.url_path == path), None)
    if spec is not None:
        open_link(spec.file, parse_qs(query, keep_blank_values=True))


@functools.cache
def _app_links() -> Any:
    """The component that hands a click on a link in the page's text to the page (`dashboard.inapp.LINKS`)."""
    from headwatch.dashboard.inapp import LINKS

    return st.components.v2.component("headwatch_app_links", js=LINKS)


_MARKDOWN_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def app_links(text: str, *, key: str, where: Where = st) -> None:
    """Markdown ``text`` whose links to views of the app (``[L1 H0](head?run=...)``) open them in this tab, within
    the app, as a click on a chart's point does (`open_link_on_click`); a link with a modifier key or the middle
    button opens a new tab as any link does.

    The links are written as HTML with ``target="_self"`` (Streamlit opens a Markdown link in a new tab), and a
    script (`dashboard.inapp.LINKS`) hands a plain click to the page, which opens the view without loading the app
    again (before the script listens, the link loads it in this tab).

    Args:
        text: Markdown; its links are relative links to views (`analysis.findings.events.Event.link`).
        key: the container's key (its CSS class ``st-key-<key>``), unique on the page.

    Raises:
        RuntimeError: outside an active view.
    """
    import html

    from headwatch.dashboard.navigation import PAGES

    active("charts.app_links")
    with where.container(key=key):
        st.markdown(
            _MARKDOWN_LINK.sub(
                lambda m: f'<a href="{html.escape(m.group(2), quote=True)}" target="_self">{m.group(1)}</a>', text
            ),
            unsafe_allow_html=True,
        )
    result = _app_links()(
        key=f"{key}_links",
        data={"container": key, "pages": [p.url_path for p in PAGES if not p.default]},
        on_link_change=lambda: None,
        height=0,
        width="content",
    )
    link = getattr(result, "link", None)
    if isinstance(link, str):
        _open_view(link)


@functools.cache
def _bring_into_view() -> Any:
    """The component that scrolls a panel opened as evidence into view (`dashboard.inapp.SCROLL`)."""
    from headwatch.dashboard.inapp import SCROLL

    return st.components.v2.component("headwatch_bring_into_view", js=SCROLL)


def bring_into_view(container: str, chart: str) -> None:
    """Scroll the container keyed ``container`` to the top of the window once the chart keyed ``chart`` in it is
    drawn, unless the reader scrolls first, so that a view opened as evidence shows its evidence first: mount it on
    the run that opens the page on that panel (`viewstate.opened_with`), once.

    Raises:
        RuntimeError: outside an active view.
    """
    import time

    active("charts.bring_into_view")
    _bring_into_view()(
        key=f"{container}_into_view",
        data={"container": container, "chart": chart, "token": f"{container}-{time.time_ns()}"},
        height=0,
        width="content",
    )
