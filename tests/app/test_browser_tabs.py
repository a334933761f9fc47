"""The head explorer's and the Forward lenses' panels are tabs of which only the chosen one is drawn, and the tab is
the link's ``panel``.

In Chromium on the shipped plain-text run: the page opens on its default tab with that tab's charts alone on the page
(the others are neither sent nor drawn); a click on another tab draws that tab's charts, removes the first tab's and
writes ``panel`` into the URL (the rest of the view kept); that URL opened in a new tab opens on the same tab; the
browser's Back returns to the first tab. AppTest cannot click a tab: its state lives in the browser until the rerun.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from headwatch.dashboard.labels import STATS
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors

pytestmark = pytest.mark.browser

RUN = "shakespeare-pythia-6x8"


def _drawn(page, key: str) -> None:
    page.wait_for_selector(f".st-key-{key} .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)


def _charts(page) -> set[str]:
    """The keys of the elements on the page that hold a chart (the sidebar's loss curve among them)."""
    return set(
        page.evaluate(
            """() => [...document.querySelectorAll('[class*="st-key-"]')]
                .filter(el => el.querySelector('.js-plotly-plot'))
                .flatMap(el => [...el.classList].filter(c => c.startsWith('st-key-')).map(c => c.slice(7)))"""
        )
    )


def _selected(page) -> str:
    return page.locator('[role="tab"][aria-selected="true"]').inner_text().strip()


def _panel(page, value: str) -> dict[str, list[str]]:
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('panel') === '{value}'", timeout=LOAD_TIMEOUT_MS)
    return parse_qs(urlsplit(page.url).query)


@pytest.mark.parametrize(
    ("path", "first", "first_value", "first_keys", "tab", "value", "keys"),
    [
        (
            f"/head?run={RUN}&layer=1&head=2",  # layer=1&head=2 stay in the link through the tab click
            "Weight distribution P(w)",
            "weights",
            {"density_map", "density_map_other", "density_slices", "density_slices_other"},
            "Spectrum λ_k",
            "spectrum",
            {"spectrum_map", "spectrum_map_other", "spectrum_slices", "spectrum_slices_other"},
        ),
        (
            f"/lenses?run={RUN}",
            "Entropy and span per layer",
            "layers",
            {"bands_entropy", "bands_span"},
            "Head types",
            "types",
            {"type_prev_token", "type_induction", "type_sink"},
        ),
    ],
    ids=["head explorer", "forward lenses"],
)
def test_a_tab_draws_its_panel_alone_and_is_the_links_panel(
    chromium, shipped_server, path, first, first_value, first_keys, tab, value, keys
) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(shipped_server + path)
        for key in first_keys:
            _drawn(page, key)
        assert _selected(page) == first
        assert _charts(page) & (keys | first_keys) == first_keys  # the other tabs' charts are not on the page

        page.get_by_role("tab", name=tab).click()
        query = _panel(page, value)
        kept = parse_qs(urlsplit(path).query)
        assert all(query.get(k) == v for k, v in kept.items()), (kept, query)  # the rest of the view stays
        for key in keys:
            _drawn(page, key)
        page.wait_for_function(
            "keys => keys.every(k => !document.querySelector('.st-key-' + k))", arg=sorted(first_keys), timeout=LOAD_TIMEOUT_MS
        )
        assert _selected(page) == tab
        assert _charts(page) & (keys | first_keys) == keys
        link = page.url

        again = chromium.new_page(viewport={"width": 1400, "height": 1200})
        try:
            again.goto(link)  # the link opens on the tab it was made on
            for key in keys:
                _drawn(again, key)
            assert _selected(again) == tab
            assert _charts(again) & (keys | first_keys) == keys
            assert _errors(again) == []
        finally:
            again.close()

        page.go_back()  # Back undoes the tab click: the first tab, its charts, its panel in the link
        _panel(page, first_value)
        for key in first_keys:
            _drawn(page, key)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=LOAD_TIMEOUT_MS)
        assert _selected(page) == first
        assert _errors(page) == []
    finally:
        page.close()


def test_a_links_settings_for_a_tab_not_shown_reach_that_tab(chromium, shipped_server) -> None:
    """A link with a statistic (``stat=lambda&k=3&logy=1``) that opens on the weights' tab keeps them in the address,
    and a click on the statistic tab shows them: the statistic picked, k, the log axis."""
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(f"{shipped_server}/head?run={RUN}&layer=1&head=2&stat=lambda&k=3&logy=1")
        _drawn(page, "density_map")
        query = _panel(page, "weights")
        assert (query["stat"], query["k"], query["logy"]) == (["lambda"], ["3"], ["1"]), page.url  # kept, not drawn
        page.get_by_role("tab", name="One statistic against its layer").click()
        _drawn(page, "head_in_layer")
        query = _panel(page, "statistic")
        assert (query["stat"], query["k"], query["logy"]) == (["lambda"], ["3"], ["1"]), page.url
        shown = page.locator(".st-key-stat").evaluate(
            "el => el.textContent + ' ' + [...el.querySelectorAll('input')].map(i => i.value)"
        )
        assert STATS["lambda"].label in shown, shown
        layout = page.locator(".st-key-head_in_layer .js-plotly-plot").evaluate(
            "gd => ({title: gd._fullLayout.title.text, y: gd._fullLayout.yaxis.type})"
        )
        assert "λ_3" in layout["title"] and layout["y"] == "log", layout  # the link's k, its log axis
        assert _errors(page) == []
    finally:
        page.close()
