"""Evidence one click away, in Chromium, on the shipped run induction-d128: the Overview's first screen names the run's
first induction heads with links that open the head explorer on the induction score, and a click on the Timeline's
induction marker opens that head at its emergence step on the score's tab (the weight panels not drawn).

The marker is located from the figure's own data (the lane's trace by name, its point by its label), the expected
head and step from head_emergence.parquet read with pandas.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

from tests.app.conftest import INDUCTION
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _open, _wait_laid_out, _wait_view

pytestmark = pytest.mark.browser


def _first_induction() -> tuple[int, list[tuple[int, int]]]:
    table = pd.read_parquet(INDUCTION / "head_emergence.parquet").query("type == 'induction'").dropna(subset=["emergence_step"])
    step = int(table["emergence_step"].min())
    at = table[table["emergence_step"] == step].sort_values(["layer", "head"])
    return step, list(zip(at["layer"].astype(int), at["head"].astype(int), strict=True))


def test_the_overviews_first_screen_links_each_first_induction_head_to_its_score(chromium, induction_server) -> None:
    page = _open(chromium, induction_server + "/", plots=1)
    try:
        step, heads = _first_induction()
        viewport = page.viewport_size
        assert viewport is not None
        for layer, head in heads:
            link = page.locator("a", has_text=f"L{layer} H{head}").first
            box = link.bounding_box()
            assert box is not None and box["y"] < viewport["height"], f"L{layer} H{head} is below the first screen"
            query = parse_qs(urlsplit(link.get_attribute("href") or "").query)
            assert query["layer"] == [str(layer)] and query["head"] == [str(head)]
            assert query["step"] == [str(step)] and query["stat"] == ["induction"] and query["panel"] == ["statistic"]
        assert _errors(page) == []
    finally:
        page.close()


def test_a_click_on_the_timelines_induction_marker_opens_the_heads_score_tab(chromium, induction_server) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(induction_server + "/timeline?kinds=head+type")
        page.wait_for_selector(".st-key-timeline .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
        _wait_laid_out(page, ["timeline"])
        page.locator(".st-key-timeline").scroll_into_view_if_needed()
        xy = page.evaluate(
            """() => {
            const gd = document.querySelector('.st-key-timeline .js-plotly-plot');
            const i = gd._fullData.findIndex(t => t.name === 'head type');
            const j = gd._fullData[i].text.findIndex(s => s.startsWith('first induction'));
            const point = gd.querySelectorAll('.scatterlayer .trace')[i].querySelectorAll('.point')[j];
            const box = point.getBoundingClientRect();
            return [box.left + box.width / 2, box.top + box.height / 2];
        }"""
        )
        page.mouse.move(*xy)
        page.wait_for_selector(".st-key-timeline .hoverlayer .hovertext", timeout=LOAD_TIMEOUT_MS)
        page.mouse.click(*xy)
        _wait_view(page, "/head", "Head explorer", 2)
        step, heads = _first_induction()
        query = parse_qs(urlsplit(page.url).query)
        assert (query["layer"], query["head"]) == ([str(heads[0][0])], [str(heads[0][1])]), page.url
        assert query["step"] == [str(step)] and query["stat"] == ["induction"] and query["panel"] == ["statistic"], page.url
        page.wait_for_selector(".st-key-head_in_layer .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
        selected = page.locator('[role="tab"][aria-selected="true"]').inner_text().strip()
        assert selected == "One statistic against its layer", selected  # the evidence's tab, drawn alone
        assert page.locator(".st-key-density_map").count() == 0
        assert _errors(page) == []
    finally:
        page.close()
