"""Issue 17 in a real browser (Chromium through Playwright, the app served by dashboard.serve): a click on a
heatmap cell opens that head, the Heads table opens a head from a row, a chart's CSV button downloads exactly the
store's values, the animation's frame is the link's, Streamlit's developer items are hidden."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.store import open_store
from tests.app.test_browser import (
    ARTIFACTS,
    _errors,
    _open,
    _serve,
    _text_of_one,
    _wait_laid_out,
    _wait_url,
    _wait_view,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(store_path, tmp_path_factory):
    yield from _serve(store_path, tmp_path_factory)


@pytest.fixture(scope="module")
def browser(chromium):
    """The test process's one Chromium (conftest's ``chromium``)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return chromium


def _click_cell(page, key: str, layer: int, head: int, step: int | None = None) -> None:
    """Click the heatmap cell of (layer, head) (at ``step``) of the chart with widget key ``key``, once it is laid out."""
    _wait_laid_out(page, [key])
    xy = page.evaluate(
        """([key, layer, head, step]) => {
        const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        const i = gd._fullData.findIndex(t => t.name === 'cells');
        const t = gd._fullData[i];
        const n = t.customdata.length;
        let j = -1;
        for (let q = 0; q < n; q++) {
            const c = t.customdata[q];
            if (c[0] === layer && c[1] === head && (step === null || c[2] === step)) { j = q; break; }
        }
        const xa = gd._fullLayout[t.xaxis.replace('x', 'xaxis')], ya = gd._fullLayout[t.yaxis.replace('y', 'yaxis')];
        const box = gd.getBoundingClientRect();
        return [box.left + xa._offset + xa.d2p(t.x[j]), box.top + ya._offset + ya.d2p(t.y[j])];
    }""",
        [key, layer, head, step],
    )
    page.mouse.move(*xy)
    page.wait_for_timeout(200)
    page.mouse.click(*xy)


def test_a_heatmap_cell_click_opens_that_head(browser, server, store_path):
    steps = open_store(store_path).steps.tolist()
    page = _open(browser, server + "/architecture?stat=kurtosis", 3)
    try:
        assert page.locator('[data-testid="stAppDeployButton"]').count() == 0  # client.toolbarMode = "viewer"
        _click_cell(page, "architecture", 2, 3, steps[6])
        _wait_view(page, "/head", "Head explorer", 7)
        _wait_url(page, "layer=2", "head=3", "stat=kurtosis", "panel=statistic")  # the statistic clicked, against the layer
        assert f"step={steps[6]}" in page.url
        assert _errors(page) == []
        page.goto(server + "/animation?stat=std&step=" + str(steps[4]))
        _wait_view(page, "/animation", "Animation", 2)
        assert _text_of_one(page, ".st-key-animation .gtitle").endswith(f"step {steps[4]:,}")
        _click_cell(page, "animation", 1, 0)
        _wait_view(page, "/head", "Head explorer", 7)
        _wait_url(page, "layer=1", "head=0", f"step={steps[4]}")
    finally:
        page.close()


def test_heads_table_opens_a_head_from_a_row(browser, server, store_path):
    store = open_store(store_path)
    page = _open(browser, server + "/heads?stat=std&sort=value&desc=1", 1)
    try:
        page.screenshot(path=str(ARTIFACTS / "heads.png"), full_page=True)
        assert _errors(page) == []
        v = store.array("std")[-1]
        layer, head = np.unravel_index(int(np.argmax(v)), v.shape)  # the first row: the largest sigma
        grid = page.locator(".st-key-heads_table [data-testid='stDataFrameResizable']")
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 18, box["y"] + 35 + 17)  # the first row's selection checkbox
        _wait_view(page, "/head", "Head explorer", 7)
        _wait_url(page, f"layer={layer}", f"head={head}", "stat=std", "panel=statistic")
    finally:
        page.close()


def test_a_charts_csv_download_equals_the_stores_values(browser, server, store_path):
    page = _open(browser, server + "/layers?stat=kl_gauss&layer=2", 3)
    try:
        with page.expect_download(timeout=60_000) as info:
            page.locator(".st-key-layer_lines_csv button").first.click()
        got = pd.read_csv(io.BytesIO(info.value.path().read_bytes()))
    finally:
        page.close()
    heads = pd.read_parquet(store_path / "heads.parquet")
    store = open_store(store_path)
    want = heads[(heads["layer"] == 2) & heads["step"].isin(store.steps) & (heads["matrix"] == "qk")]  # the page's matrix
    merged = got.merge(want[["step", "layer", "head", "matrix", "kl_gauss"]], on=["step", "layer", "head", "matrix"])
    assert len(got) == len(want) == len(merged) == len(store.steps) * store.n_heads
    assert (merged["value"] == merged["kl_gauss"]).all()
    assert set(got["run"]) == {store_path.name} and set(got["statistic"]) == {"kl_gauss"} and set(got["matrix"]) == {"qk"}
