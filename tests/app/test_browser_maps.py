"""Every shipped run's Trajectory map, in Chromium on the app served as the Dockerfile serves it (every store of
``data/``): the page opens on the map its store holds, with no button to compute one and no UMAP run in the server.
The points drawn are the ones ``embeddings.parquet`` holds for the page's default map, read here with pyarrow."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.app.conftest import SHIPPED
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _serve
from tests.conftest import SHIPPED_DATA

pytestmark = pytest.mark.browser

RUNS = sorted(p.name for p in SHIPPED_DATA.iterdir() if (p / "meta.json").is_file())
# The map drawn and the page's run over ('map'), or the page asking for a map to be computed ('button').
MAP_OR_BUTTON = """() => {
  const gd = document.querySelector('.st-key-trajectory_map .js-plotly-plot');
  const running = document.querySelector('[data-testid="stStatusWidget"]');
  if (gd && gd._fullLayout && gd.querySelector('.main-svg') && !running) return 'map';
  if ([...document.querySelectorAll('button')].some(b => b.innerText.trim() === 'Compute this map')) return 'button';
  return false;
}"""


@pytest.fixture(scope="module")
def every_run(tmp_path_factory):
    """The app on every shipped store: the reference run as $HEADWATCH_STORE, the others in the data folder."""
    data = tmp_path_factory.mktemp("every-run")
    for run in RUNS:
        if run != SHIPPED.name:
            (data / run).symlink_to(SHIPPED_DATA / run)
    yield from _serve(SHIPPED, tmp_path_factory, data_dir=data)


@pytest.mark.parametrize("run", RUNS)
def test_the_trajectory_map_opens_on_the_stores_map(chromium, every_run, run) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{every_run}/trajectories?run={run}")
        state = page.wait_for_function(MAP_OR_BUTTON, timeout=LOAD_TIMEOUT_MS, polling=100).json_value()
        assert state == "map", f"{run}: the page asks for the map to be computed"
        assert _errors(page) == []
        assert page.get_by_text("precomputed with the store").count() >= 1
        drawn = page.evaluate(
            """() => {
            const gd = document.querySelector('.st-key-trajectory_map .js-plotly-plot');
            const t = gd._fullData.find(t => t.name === 'heads');
            return [Array.from(t.x), Array.from(t.y)];
        }"""
        )
    finally:
        page.close()
    table = pq.read_table(SHIPPED_DATA / run / "embeddings.parquet")
    keep = pc.and_(
        pc.and_(pc.equal(table["matrix"], "qk"), pc.equal(table["statistic"], "kl_gauss")),
        pc.equal(table["normalisation"], "zscore"),
    )
    stored = table.filter(keep).sort_by([("layer", "ascending"), ("head", "ascending")])
    np.testing.assert_allclose(drawn[0], stored["x"].to_numpy(), rtol=1e-6)  # the figure sends float32
    np.testing.assert_allclose(drawn[1], stored["y"].to_numpy(), rtol=1e-6)
