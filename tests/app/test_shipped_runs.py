"""Every page opens on every run shipped in ``data/`` with no exception (the app served on ``data/`` as a user gets it).

One AppTest session per run walks the whole navigation with ``run=<name>`` in the link, as a
collaborator's shared link would open each page. The browser tests cover the reference run page by
page; this covers the others (the induction ladder, the second seed), which the page tests do not open.
"""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from headwatch.dashboard.navigation import PAGES
from tests.app.conftest import APP, TIMEOUT, arr, chart
from tests.conftest import SHIPPED_DATA

RUNS = sorted(p.name for p in SHIPPED_DATA.iterdir() if (p / "meta.json").is_file())


@pytest.mark.parametrize("run", RUNS)
def test_every_page_opens_on_the_run(run, monkeypatch):
    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params = {"run": run}
    at.run()
    failures, chartless = {}, []
    for spec in PAGES:
        at.switch_page(spec.file)
        at.query_params = {"run": run}
        at.run()
        if at.exception:
            failures[spec.url_path] = [e.value for e in at.exception]
        if not at.get("plotly_chart"):  # every page draws at least one chart from the store
            chartless.append(spec.url_path)
        assert at.sidebar.selectbox(key="run").value == run, f"{spec.url_path} opened another run"
    assert not failures, failures
    assert not chartless, f"pages that drew nothing on {run}: {chartless}"


def test_the_default_run_is_the_induction_ladders_middle_size(monkeypatch):
    """The Overview opens on the run that shows what the studies are about (`docs/induction-recipe.md`)."""
    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception
    assert at.sidebar.selectbox(key="run").value == "induction-d128"


@pytest.mark.parametrize("run", RUNS)
def test_the_trajectory_map_draws_the_stores_map_on_opening(run, monkeypatch):
    """Every shipped run's Trajectory map opens on the map its store holds (the default: the QK circuit's D_KL,
    z-scored): no button to compute one, the points where embeddings.parquet puts them (read with pyarrow)."""
    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params = {"run": run}
    at.run()
    at.switch_page("pages/trajectory_map.py")
    at.query_params = {"run": run}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.button, [i.value for i in at.info]  # nothing to compute
    assert "precomputed with the store" in " ".join(c.value for c in at.caption)
    table = pq.read_table(SHIPPED_DATA / run / "embeddings.parquet")
    keep = pc.and_(
        pc.and_(pc.equal(table["matrix"], "qk"), pc.equal(table["statistic"], "kl_gauss")),
        pc.equal(table["normalisation"], "zscore"),
    )
    stored = table.filter(keep).sort_by([("layer", "ascending"), ("head", "ascending")])
    heads = next(t for t in chart(at, "trajectory_map")["data"] if t.get("name") == "heads")
    np.testing.assert_allclose(arr(heads["x"]), stored["x"].to_numpy(), rtol=1e-6)  # the figure sends float32
    np.testing.assert_allclose(arr(heads["y"]), stored["y"].to_numpy(), rtol=1e-6)
