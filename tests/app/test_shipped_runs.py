"""Every page opens on every run shipped in ``data/`` with no exception (the app served on ``data/`` as a user gets it).

One AppTest session per run walks the whole navigation with ``run=<name>`` in the link, as a
collaborator's shared link would open each page. The browser tests cover the reference run page by
page; this covers the others (the induction ladder, the second seed), which the page tests do not open.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from headwatch.dashboard.navigation import PAGES
from tests.app.conftest import APP, TIMEOUT
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
