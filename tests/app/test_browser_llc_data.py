"""In Chromium: the Refined LLC page on a store holding estimates under three distributions draws one head's curves
under each of them and their ratio to the chosen one, from the figure the browser laid out (its traces' names and
y values against the table read with pandas), with no error in the page."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic_store import add_synthetic_llc
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _wait_laid_out

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def data_server(store_path: Path, tmp_path_factory):
    from tests.app.test_browser import _serve

    path = tmp_path_factory.mktemp("llc-data") / "tiny-run"
    shutil.copytree(store_path, path)
    add_synthetic_llc(path, data=("train", "text", "repeats"))
    for base in _serve(path, tmp_path_factory):
        yield base, path


def test_the_overlay_and_the_ratio_are_drawn(chromium, data_server) -> None:
    base, path = data_server
    df = pq.read_table(path / "llc.parquet").to_pandas()
    own = df[(df["layer"] == 1) & (df["head"] == 2)]
    page = chromium.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(base + "/llc?data_head=L1H2&data_ref=text")
        for key in ("llc_data", "llc_data_ratio"):
            page.wait_for_selector(f".st-key-{key} .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
        _wait_laid_out(page, ["llc_data", "llc_data_ratio"])
        drawn = page.evaluate(
            """() => ['llc_data', 'llc_data_ratio'].map(k => document.querySelector(`.st-key-${k} .js-plotly-plot`)
            ._fullData.map(t => [t.name, Array.from(t.y)]))"""
        )
        curves, ratios = drawn
        assert [name for name, _ in curves] == ["on train", "on text", "on repeats"]
        for name, y in curves:
            want = own[own["data"] == name.removeprefix("on ")].sort_values("step")["llc"]
            np.testing.assert_allclose(y, want)
        text = own[own["data"] == "text"].sort_values("step")["llc"].to_numpy()
        assert [name for name, _ in ratios] == ["on train / on text", "on repeats / on text"]
        for name, y in ratios:
            other = own[own["data"] == name.split(" / ")[0].removeprefix("on ")].sort_values("step")["llc"].to_numpy()
            np.testing.assert_allclose(y, other / text)
        assert _errors(page) == []
    finally:
        page.close()
