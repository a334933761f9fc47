"""A click on a head opens that head, on the pages whose click-through lived only in the browser.

In Chromium: a click on a head's refined-LLC estimate at the last step of the shipped run induction-d128 (the head
whose estimate there lies farthest from every other head's, found from llc.parquet under the distribution the page
opens on; L0 H5, the previous-token head, at 30.8 on the GPU-built store) opens the head explorer at that head with
that step among its chosen steps (the curves once wrote
``[step, layer, head]`` while the click was read as ``[layer, head, ...]``: the click did nothing, or
opened another head at a step the run lacks); on the plain-text shipped run, a click on a cell of a
Forward lenses head-type heatmap opens that head at that step (the heatmaps only hovered). The points are
located from the figures' own coordinates (trace order, data positions), not from their customdata, so a wrong customdata
cannot hide itself.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _wait_laid_out

pytestmark = pytest.mark.browser

N_HEADS = 8


def _ready(page, key: str) -> None:
    page.wait_for_selector(f".st-key-{key} .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
    _wait_laid_out(page, [key])  # no run going on, and the points are clicked where the chart's axes put them


def _click(page, xy: list[float]) -> None:
    page.mouse.move(*xy)
    page.wait_for_timeout(300)
    page.mouse.click(*xy)


def _opened(page) -> dict[str, list[str]]:
    page.wait_for_function("() => location.pathname.endsWith('/head')", timeout=LOAD_TIMEOUT_MS)
    page.wait_for_function("() => /[?&]layer=/.test(location.search)", timeout=LOAD_TIMEOUT_MS)
    return parse_qs(urlsplit(page.url).query)


def _loneliest_last_estimate() -> tuple[int, int, int]:
    """(layer, head, step): the head whose estimate at the last step lies farthest from every other head's, under the
    training distribution where llc.parquet holds it (the page's default), else its text estimates."""
    import pandas as pd

    from tests.app.conftest import INDUCTION

    table = pd.read_parquet(INDUCTION / "llc.parquet")
    if "data" in table.columns:
        table = table[table["data"] == ("train" if (table["data"] == "train").any() else "text")]
    last = int(table["step"].max())
    heads = table[(table["step"] == last) & (table["layer"] >= 0)]
    keys = zip(heads["layer"].astype(int), heads["head"].astype(int), strict=True)
    values = dict(zip(keys, heads["llc"], strict=True))
    gap = {h: min(abs(v - w) for g, w in values.items() if g != h) for h, v in values.items()}
    layer, head = max(gap, key=lambda h: gap[h])
    return layer, head, last


def test_a_click_on_a_refined_llc_estimate_opens_that_head_at_that_step(chromium, induction_server) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(induction_server + "/llc")
        _ready(page, "llc_heads")
        layer, head, last = _loneliest_last_estimate()
        xy = page.evaluate(
            """([trace]) => {
            const gd = document.querySelector('.st-key-llc_heads .js-plotly-plot');
            const t = gd._fullData[trace], i = t.x.length - 1;  // the last estimate
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(t.x[i]), box.top + ya._offset + ya.l2p(t.y[i])];
        }""",
            [layer * N_HEADS + head],
        )
        _click(page, xy)
        query = _opened(page)
        assert query["layer"] == [str(layer)] and query["head"] == [str(head)], page.url
        assert str(last) in query.get("step", []), page.url
        assert _errors(page) == []
    finally:
        page.close()


def test_a_click_on_a_head_type_cell_opens_that_head_at_that_step(chromium, shipped_server) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(shipped_server + "/lenses?xscale=linear&panel=types")  # the cell's x is read as a linear coordinate
        _ready(page, "type_induction")
        page.locator(".st-key-type_induction").scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        layer, head = 2, 3
        xy = page.evaluate(
            """([row]) => {
            const gd = document.querySelector('.st-key-type_induction .js-plotly-plot');
            const t = gd._fullData.find(t => t.type === 'heatmap');
            const j = t.x.length - 2;  // the last column (step 1,536): between its two edges
            const x = (t.x[j] + t.x[j + 1]) / 2;
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(x), box.top + ya._offset + ya.l2p(row)];
        }""",
            [layer * N_HEADS + head],
        )
        _click(page, xy)
        query = _opened(page)
        assert query["layer"] == ["2"] and query["head"] == ["3"], page.url
        assert "1536" in query.get("step", []), page.url
    finally:
        page.close()


def test_a_click_on_the_checkpoint_index_axis_opens_the_real_step(chromium, shipped_server) -> None:
    """The Layer view opens on the checkpoint-index axis: checkpoint i sits at x = i (the 5th, step 8, at 4, where
    a step axis puts step 4). A click on a head's line at checkpoint i opens that head with that checkpoint's step
    (lines alone were not clickable at all: plotly selects only points with markers)."""
    import json

    from tests.app.conftest import SHIPPED

    meta = json.loads((SHIPPED / "meta.json").read_text())
    steps = [c["step"] for c in meta["checkpoints"] if c.get("duplicate_of") is None]
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(shipped_server + "/layers?layer=2")
        _ready(page, "layer_lines")
        found = page.evaluate(
            """([heads]) => {
            const gd = document.querySelector('.st-key-layer_lines .js-plotly-plot');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
            // the early checkpoint and head whose point lies farthest from every other line's there (the nearest
            // point answers a click, and points within a marker's radius tie)
            let best = {gap: -1};
            for (let i = 3; i < 12; i++) {
                const px = gd._fullData.map(t => ya.l2p(t.y[i]));
                for (let h = 0; h < heads; h++) {
                    const gap = Math.min(...px.filter((_, j) => j !== h).map(p => Math.abs(p - px[h])));
                    if (gap > best.gap) best = {gap, i, head: h, y: px[h]};
                }
            }
            const t = gd._fullData[best.head];
            return {...best, name: t.name, x: t.x[best.i], ticks: xa.ticktext, title: xa.title.text,
                    xy: [box.left + xa._offset + xa.l2p(t.x[best.i]), box.top + ya._offset + best.y]};
        }""",
            [N_HEADS],
        )
        head, i = found["head"], found["i"]
        assert found["name"] == f"H{head}" and found["x"] == i and steps[i] != i, found  # the index, not the step
        assert "index" in found["title"] and "1536" in found["ticks"] and found["gap"] > 6, found
        # the view's own state reaches the address bar at the end of the run
        page.wait_for_function("() => /[?&]xscale=index/.test(location.search)", timeout=LOAD_TIMEOUT_MS)
        assert "xscale=index" in page.url
        page.mouse.move(*found["xy"])
        page.wait_for_selector(".st-key-layer_lines .hoverlayer .hovertext", timeout=LOAD_TIMEOUT_MS)
        hover = page.locator(".st-key-layer_lines .hoverlayer .hovertext").first.text_content() or ""
        assert f"L2 H{head}" in hover and f"step {steps[i]}σ" in hover, hover  # the real step
        page.mouse.click(*found["xy"])
        _opened(page)
        page.wait_for_function("() => /[?&]head=/.test(location.search) && /[?&]step=/.test(location.search)")
        query = parse_qs(urlsplit(page.url).query)
        assert query["layer"] == ["2"] and query["head"] == [str(head)], page.url
        assert str(steps[i]) in query["step"], page.url
        assert _errors(page) == []
    finally:
        page.close()
