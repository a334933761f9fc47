"""The Timeline page in Chromium (Playwright, the app served by dashboard.serve): it loads without errors, its
chart holds one shaded rectangle per stage and one trace per kind of event, and an event's link opens the view
it names (the head explorer at that head and step; the Weight matrices page at that weight, layer and step)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from tests.app.test_browser import ARTIFACTS, _errors, _open, _serve, _wait_view
from tests.app.test_timeline import shaded_stages, typed_store  # noqa: F401 (the fixture: a shipped store with head types)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(typed_store, tmp_path_factory):  # noqa: F811
    yield from _serve(typed_store, tmp_path_factory)


@pytest.fixture(scope="module")
def browser(chromium):
    """The test process's one Chromium (conftest's ``chromium``)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return chromium


def _chart(page) -> dict:
    return page.evaluate(
        """() => {
        const gd = document.querySelector('.st-key-timeline .js-plotly-plot');
        return {shapes: gd._fullLayout.shapes.map(s => ({type: s.type, name: s.name, yref: s.yref})),
                traces: gd._fullData.map(t => ({name: t.name, yaxis: t.yaxis, links: (t.customdata || []).map(c => c[1])}))};
    }"""
    )


def test_timeline_loads_and_an_event_link_opens_its_evidence(browser, server, typed_store) -> None:  # noqa: F811
    page = _open(browser, f"{server}/timeline", plots=1)
    try:
        assert not _errors(page), _errors(page)
        fig = _chart(page)
        shaded = shaded_stages(typed_store)  # the primary basis's stages
        rects = [
            s["name"]
            for s in fig["shapes"]
            if s["type"] == "rect" and s["yref"] == "y domain" and "boundary uncertainty" not in s["name"]
        ]
        assert rects == [f"stage {r.stage + 1}: {r.trend}" for r in shaded.itertuples(index=False)]
        lanes = {t["name"]: t["links"] for t in fig["traces"] if t["yaxis"] == "y2"}
        assert {"stage boundary", "head type", "MP departure", "level crossing"} <= set(lanes)
        page.screenshot(path=str(ARTIFACTS / "timeline.png"), full_page=True)

        link = lanes["head type"][0]  # the first previous-token head, L0H3 at step 64
        page.goto(f"{server}/{link}")
        _wait_view(page, "/head", "Head explorer", 1)
        assert not _errors(page), _errors(page)
        query = parse_qs(urlparse(page.url).query)
        assert query["layer"] == ["0"] and query["head"] == ["3"] and query["step"] == ["64"]

        link = lanes["MP departure"][0]
        want = parse_qs(urlparse(link).query)
        page.goto(f"{server}/{link}")
        _wait_view(page, "/weights", "Weight matrices", 1)
        assert not _errors(page), _errors(page)
        query = parse_qs(urlparse(page.url).query)
        assert {k: query[k] for k in ("role", "layer", "step")} == {k: want[k] for k in ("role", "layer", "step")}
    finally:
        page.close()
