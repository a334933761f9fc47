"""The Compare runs page in a real browser (Chromium via Playwright, the server as the Dockerfile starts it):
a comparison opened by a link shows the linked runs in every plot, keeps the view in the address bar and raises
nothing; the run picker lists the runs in the order the address bar does. Skipped only where /usr/bin/chromium is
missing outside CI."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from benchmarks.synthetic_store import write_synthetic_store
from tests.app import test_browser
from tests.app.test_browser import ARTIFACTS, _dialogs, _errors, _open, _serve, _wait_published, _wait_url

browser = test_browser.browser  # the module-scoped Chromium fixture, shared with test_browser.py's helpers

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def two_run_server(store_path, tmp_path_factory):
    """The tiny test store ($HEADWATCH_STORE) and, under the data folder, a deeper run on another schedule."""
    data = tmp_path_factory.mktemp("compare-browser")
    write_synthetic_store(
        data / "deep-run",
        n_layers=6,
        n_heads=4,
        d_head=8,
        d_model=32,
        steps=[0, 10, 20, 40, 80, 160, 320, 640],
        tokens_per_step=1000,
        overlaps=False,
    )
    yield from _serve(store_path, tmp_path_factory, data_dir=data)


def test_a_comparison_opens_by_link(browser, two_run_server):
    path = "/compare?runs=tiny-run&runs=deep-run&stat=kl_gauss&align=fraction&nbins=4&bin=2"
    page = _open(browser, two_run_server + path, 4)
    try:
        page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)
        assert _errors(page) == [] and _dialogs(page) == []
        assert page.locator("h1").first.inner_text().strip() == "Compare runs"
        _wait_published(page)
        for param in ("runs=tiny-run", "runs=deep-run", "stat=kl_gauss", "align=fraction", "bin=2"):
            assert param in page.url, param
        link = page.locator('[data-testid="stSidebar"] .st-key-view_link a code').inner_text()
        assert link.strip().split("?")[1] == page.url.split("?")[1]
        for key in ("compare_bands", "compare_bin", "compare_dist"):
            assert page.locator(f".st-key-{key} .main-svg").count() >= 1, key
            runs = page.evaluate(
                """key => {
                const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
                return [...new Set(gd._fullData.filter(t => t.meta && t.meta.run).map(t => t.meta.run))];
            }""",
                key,
            )
            assert sorted(runs) == ["deep-run", "tiny-run"], (key, runs)
        # panel (c) names the checkpoint each run used: both runs end at fraction 1
        legend = page.locator(".st-key-compare_dist .legendtext").all_text_contents()
        assert any(t.startswith("tiny-run · step 143,000") for t in legend), legend
        assert any(t.startswith("deep-run · step 640") for t in legend), legend
    finally:
        page.close()


def test_the_run_picker_and_the_address_bar_list_the_runs_in_one_order(browser, two_run_server):
    """A run picked again takes its place in the run picker's list (tiny-run, the $HEADWATCH_STORE run, first), as the
    address bar lists it: before, the picker kept the order of the clicks (deep-run, tiny-run) while the link sorted."""
    page = _open(browser, two_run_server + "/compare?runs=tiny-run&runs=deep-run&stat=kl_gauss", 4)
    chips = page.locator(".st-key-runs .react-aria-ComboBox [data-tag]")
    try:
        _wait_published(page)
        expect(chips).to_have_text(["tiny-run", "deep-run"])
        page.get_by_role("button", name="Remove tiny-run").click()
        _wait_url(page, "runs=deep-run&stat=")  # deep-run alone
        _wait_published(page)
        expect(chips).to_have_text(["deep-run"])
        page.get_by_role("combobox", name="Runs").click()
        page.get_by_role("option", name="tiny-run", exact=True).click()
        _wait_url(page, "runs=tiny-run&runs=deep-run&")
        _wait_published(page)
        expect(chips).to_have_text(["tiny-run", "deep-run"], timeout=10_000)
        assert _errors(page) == []
    finally:
        page.close()
