"""After Play and Pause on an animated chart, the chart, the step control and the link show one step.

On the shipped run, in Chromium: each animated chart (the Animation heatmap, the Forward lenses'
layer divergence, the Weight matrices' singular values) is opened at the run's first step, played
for a few frames and paused. The frame the chart shows (its title, which every frame sets) must then
be the step in the address bar, in "Link to this view" and on the page's step slider. Before, the
paused frame stayed in the browser: the chart showed a later step than all three.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _link

pytestmark = pytest.mark.browser

SETTLE_MS = 20_000  # the paused frame must reach the URL within this (a rerun of the page)

# (page path, chart key): each chart's frames set its title to end in "step N"
CHARTS = [("/animation", "animation"), ("/lenses?panel=divergence", "divergence"), ("/weights", "sv_animation")]


def _shown_step(page, key: str) -> int:
    """The step of the frame the chart shows, read from its title (every frame sets it), once the page holds one
    such chart: during a rerun Streamlit remounts it, and for a moment there is none, or an outgoing one beside it."""
    text = page.wait_for_function(
        """([key]) => {
        const charts = document.querySelectorAll(`.st-key-${key} .js-plotly-plot`);
        const gd = charts.length === 1 ? charts[0] : null;
        const text = gd && gd.layout && gd.layout.title ? String(gd.layout.title.text) : '';
        return /step [\\d,]+/.test(text) && text;
    }""",
        arg=[key],
        timeout=LOAD_TIMEOUT_MS,
    ).json_value()
    return int(re.findall(r"step ([\d,]+)", text)[-1].replace(",", ""))


@pytest.mark.parametrize(("path", "key"), CHARTS)
def test_pause_leaves_the_chart_the_slider_and_the_link_at_one_step(chromium, shipped_server, path, key) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(shipped_server + path + ("&" if "?" in path else "?") + "step=0")  # open at the run's first step
        page.wait_for_selector(f".st-key-{key} .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=LOAD_TIMEOUT_MS)
        first = _shown_step(page, key)
        assert first == 0, first
        chart = page.locator(f".st-key-{key}")
        chart.scroll_into_view_if_needed()
        chart.locator(".updatemenu-button").nth(0).click()  # ▶ Play
        page.wait_for_function(
            """([key, first]) => {
            const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
            if (!gd || !gd.layout) return false;  // the chart is remounted during a rerun: look again
            const m = /step ([\\d,]+)(?!.*step)/.exec(String(gd.layout.title.text));
            return m && Number(m[1].replace(/,/g, '')) > first + 2;
        }""",
            arg=[key, first],
            timeout=LOAD_TIMEOUT_MS,
        )
        chart.locator(".updatemenu-button").nth(1).click()  # ❚❚ Pause
        page.wait_for_function(
            """([key]) => {
            const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
            if (!gd || !gd.layout) return false;  // the chart is remounted during a rerun: look again
            const m = /step ([\\d,]+)(?!.*step)/.exec(String(gd.layout.title.text));
            const url = new URLSearchParams(location.search).get('step');
            return m && url === m[1].replace(/,/g, '');
        }""",
            arg=[key],
            timeout=SETTLE_MS,
        )
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=LOAD_TIMEOUT_MS)
        shown = _shown_step(page, key)
        page.wait_for_function(  # "Link to this view" is written in the same run as the address bar
            """step => {
            const link = document.querySelector('[data-testid="stSidebar"] .st-key-view_link a code');
            const m = link && /[?&]step=(\\d+)/.exec(link.textContent);
            return m && m[1] === step;
        }""",
            arg=str(shown),
            timeout=LOAD_TIMEOUT_MS,
        )
        assert shown != first
        assert parse_qs(urlsplit(page.url).query)["step"] == [str(shown)]
        assert parse_qs(urlsplit(_link(page)).query)["step"] == [str(shown)]
        slider = page.locator('[data-testid="stSliderThumbValue"]').first
        expect(slider).to_have_text(re.compile("^" + ",?".join(str(shown)) + "$"), timeout=LOAD_TIMEOUT_MS)  # 1,536
        assert _errors(page) == []
    finally:
        page.close()
