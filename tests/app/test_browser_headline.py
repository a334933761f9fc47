"""Evidence one click away, in Chromium, on the shipped run induction-d128: the Overview's first screen names the run's
first induction heads with links that open the head explorer on the induction score, and a click on the Timeline's
induction marker opens that head at its emergence step on the score's tab (the weight panels not drawn).

The marker is located from the figure's own data (the lane's trace by name, its point by its label), the expected
head and step from head_emergence.parquet read with pandas.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

from tests.app.conftest import INDUCTION
from tests.app.test_browser import ARTIFACTS, LOAD_TIMEOUT_MS, _errors, _open, _wait_laid_out, _wait_view

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
    """At 1400 x 900 the score's chart is brought into view, the type's threshold drawn (`_check_evidence`)."""
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
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
        _check_evidence(page, heads[0][0], heads[0][1], step)
    finally:
        page.close()


# --- issue 63: one behaviour for every link to evidence, and the evidence in view with its threshold -------------------

IN_VIEW = """key => {
    const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);
    if (!el || !el.querySelector('.main-svg')) return false;
    const box = el.getBoundingClientRect();
    return box.top >= 0 && box.bottom <= window.innerHeight && !document.querySelector('[data-testid="stStatusWidget"]');
}"""

LINES = """() => {
    const gd = document.querySelector('.st-key-head_in_layer .js-plotly-plot');
    const y = gd._fullLayout.yaxis;
    return {
        shapes: (gd.layout.shapes || []).filter(s => s.xref === 'x domain' && s.y0 === s.y1)
            .map(s => ({y: s.y0, dash: (s.line || {}).dash, px: y.l2p(s.y0), name: s.name || ''})),
        labels: (gd.layout.annotations || []).map(a => a.text),
        height: y._length,
    };
}"""


def _rule(kind: str) -> dict:
    return json.loads((INDUCTION / "meta.json").read_text())["types"]["types"][kind]


def _check_evidence(page, layer: int, head: int, step: int) -> None:
    """The head explorer on the head's induction score at ``step``, its chart wholly inside the window, the run's
    induction threshold dashed and exit level dotted across it (meta.json's figures)."""
    _wait_view(page, "/head", "Head explorer", 1)
    query = parse_qs(urlsplit(page.url).query)
    assert (query["layer"], query["head"]) == ([str(layer)], [str(head)]), page.url
    assert query["step"] == [str(step)] and query["stat"] == ["induction"] and query["panel"] == ["statistic"], page.url
    page.wait_for_function(IN_VIEW, arg="head_in_layer", timeout=LOAD_TIMEOUT_MS)
    drawn = page.evaluate(LINES)
    rule = _rule("induction")
    for value, dash in ((rule["threshold"], "dash"), (rule["exit"], "dot")):
        line = [s for s in drawn["shapes"] if s["y"] == pytest.approx(value) and s["dash"] == dash]
        assert len(line) == 1, (value, dash, drawn)
        assert 0 <= line[0]["px"] <= drawn["height"], drawn  # drawn inside the plot
    assert f"induction threshold {rule['threshold']:.3g}" in drawn["labels"], drawn
    assert _errors(page) == []


def test_a_headline_link_opens_its_evidence_in_this_tab_in_view_with_the_threshold(chromium, induction_server) -> None:
    """At 1400 x 900, as a laptop shows it. The Overview's headline links opened a new browser tab (Streamlit's
    Markdown links) where the Timeline's events lane switches the page in this one; the head explorer they open
    showed its statistic tab below the fold, without the type's threshold. Now the link is one to this tab
    (``target="_self"``), a click switches the page within the app (the window is not loaded again: a mark set on it
    survives, and no second tab opens), and the chart is brought into view with the threshold drawn."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(induction_server + "/")
        step, heads = _first_induction()
        layer, head = heads[0]
        link = page.locator('[data-testid="stMain"] a', has_text=f"L{layer} H{head}").first  # the headline's
        link.wait_for(timeout=LOAD_TIMEOUT_MS)
        assert link.get_attribute("target") == "_self", link.evaluate("a => a.outerHTML")
        assert link.evaluate("a => a.closest('.st-key-headline') !== null")
        page.wait_for_selector(".st-key-headline[data-hw-in-app]", timeout=LOAD_TIMEOUT_MS)  # its script listens
        page.wait_for_function("window.__headwatchHistory !== undefined", timeout=LOAD_TIMEOUT_MS)
        page.evaluate("window.__hwNotReloaded = true")
        link.click()
        _check_evidence(page, layer, head, step)
        assert context.pages == [page] and page.evaluate("window.__hwNotReloaded === true")
        page.screenshot(path=str(ARTIFACTS / "headline_evidence_1400x900.png"))
    finally:
        context.close()


def test_the_timelines_headline_link_opens_in_this_tab_as_its_events_lane_does(chromium, induction_server) -> None:
    """The Timeline opens with the same headline: its links behave as the events lane's markers, in this tab."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(induction_server + "/timeline")
        step, heads = _first_induction()
        layer, head = heads[0]
        link = page.locator('[data-testid="stMain"] a', has_text=f"L{layer} H{head}").first  # the headline's
        link.wait_for(timeout=LOAD_TIMEOUT_MS)
        assert link.get_attribute("target") == "_self", link.evaluate("a => a.outerHTML")
        assert link.evaluate("a => a.closest('.st-key-timeline_headline') !== null")
        page.wait_for_selector(".st-key-timeline_headline[data-hw-in-app]", timeout=LOAD_TIMEOUT_MS)
        page.wait_for_function("window.__headwatchHistory !== undefined", timeout=LOAD_TIMEOUT_MS)
        page.evaluate("window.__hwNotReloaded = true")
        link.click()
        _check_evidence(page, layer, head, step)
        assert context.pages == [page] and page.evaluate("window.__hwNotReloaded === true")
    finally:
        context.close()
