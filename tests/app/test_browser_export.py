"""The camera icon's format, in Chromium on the shipped run: chosen above the page's first chart, kept in the
link (so a reload keeps it), and the download is that format, drawn small enough that its fonts read on paper.

Before, the choice was a sidebar radio outside the view: a reload went back to PNG, and the figure was exported
at 1,600 x 1,000 px with 12 px ticks (1/133 of the width, 4 pt across a 6.5 in page).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _link, _wait_published

pytestmark = pytest.mark.browser

CHART = ".st-key-layer_lines"


def _ready(page) -> None:
    page.wait_for_selector(f"{CHART} .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
    _wait_published(page)


def test_svg_chosen_above_the_chart_survives_a_reload_and_the_camera_saves_svg(chromium, shipped_server, tmp_path) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1200}, accept_downloads=True)
    try:
        page.goto(shipped_server + "/layers?layer=2")
        _ready(page)
        choice = page.locator(".st-key-img")
        expect(choice).to_be_visible(timeout=LOAD_TIMEOUT_MS)
        # above the first chart, in the page (not the sidebar)
        assert choice.bounding_box()["y"] < page.locator(CHART).bounding_box()["y"]
        assert page.locator('[data-testid="stSidebar"] .st-key-img').count() == 0
        choice.get_by_text("SVG", exact=True).click()
        page.wait_for_function("() => /[?&]img=svg/.test(location.search)", timeout=LOAD_TIMEOUT_MS)
        page.wait_for_function(
            "() => (document.querySelector('[data-testid=\"stSidebar\"] .st-key-view_link a code') || {}).textContent"
            "?.includes('img=svg')",
            timeout=LOAD_TIMEOUT_MS,
        )
        assert "img=svg" in _link(page)

        page.reload()
        _ready(page)
        assert "img=svg" in page.url
        expect(page.locator(".st-key-img input[type=radio]").nth(1)).to_be_checked(timeout=LOAD_TIMEOUT_MS)  # SVG still

        page.locator(f"{CHART} .js-plotly-plot").hover()  # shows the mode bar; the click waits for its button
        with page.expect_download(timeout=LOAD_TIMEOUT_MS) as info:
            page.locator(f'{CHART} .modebar-btn[data-title^="Download plot"]').click()
        download = info.value
        assert download.suggested_filename.endswith(".svg"), download.suggested_filename
        saved = tmp_path / download.suggested_filename
        download.save_as(saved)
        text = saved.read_text()
        assert text.lstrip().startswith("<svg")
        svg = re.search(r'<svg[^>]*\swidth="([\d.]+)"', text)
        assert svg is not None, text[:300]
        width = float(svg.group(1))
        ticks = [float(m) for m in re.findall(r'class="xtick"><text[^>]*font-size: ([\d.]+)px', text)]
        assert ticks, "no x tick labels in the SVG"
        assert min(ticks) / width >= 1 / 62, (min(ticks), width)  # 12 px on 720: about 8 pt across a 6.5 in page
        assert _errors(page) == []
    finally:
        page.close()
