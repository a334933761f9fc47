"""The Compare runs page in a real browser (Chromium via Playwright, the server as the Dockerfile starts it):
a comparison opened by a link shows the linked runs in every plot, keeps the view in the address bar and raises
nothing; the run picker lists the runs in the order the address bar does. Skipped only where /usr/bin/chromium is
missing outside CI."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from benchmarks.synthetic_store import write_synthetic_store
from tests.app import test_browser
from tests.app.conftest import ROOT
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


def test_the_joint_maps_legend_clears_its_title_and_its_clusters_have_colours_of_their_own(browser, two_run_server):
    """The joint trajectory map of both runs filled by joint cluster, at 1400 x 900: its legend once grew upward from
    the top of the plot over the figure's title, and the clusters took the runs' colours. Read from the drawn figure:
    the legend's box and the title's do not meet; the clusters' swatches and the heads' fills are colours that no run
    has (the run colours of `dashboard.style`, written out here)."""
    from tests.app.test_browser import LOAD_TIMEOUT_MS, _wait_laid_out

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(two_run_server + "/trajectories?run=tiny-run&joint=deep-run&colour=cluster&stat=kl_gauss")
        page.wait_for_selector(
            '.st-key-trajectory_map .main-svg, button:has-text("Compute the joint map")', timeout=LOAD_TIMEOUT_MS
        )
        compute = page.locator('button:has-text("Compute the joint map")')
        if compute.count():  # the map is computed on request (cached per server process)
            compute.click()
        page.wait_for_selector(".st-key-trajectory_map .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
        _wait_laid_out(page, ["trajectory_map"])
        drawn = page.evaluate(
            """() => {
            const gd = document.querySelector('.st-key-trajectory_map .js-plotly-plot');
            const box = el => { const b = el.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
            return {
                title: box(gd.querySelector('.gtitle')),
                legend: box(gd.querySelector('.infolayer .legend')),
                swatches: gd._fullData.filter(t => t.meta && t.meta.kind === 'group').map(t => t.marker.color),
                fills: gd._fullData.filter(t => t.meta && t.meta.kind === 'heads').flatMap(t => [...t.marker.color]),
            };
        }"""
        )
        page.screenshot(path=str(ARTIFACTS / "joint_map.png"))
        (tl, tt, tr, tb), (ll, lt, lr, lb) = drawn["title"], drawn["legend"]
        assert tr <= ll or lr <= tl or tb <= lt or lb <= tt, drawn  # the boxes do not intersect
        runs = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}
        swatches = [c.lower() for c in drawn["swatches"]]
        assert len(swatches) >= 2 and len(set(swatches)) == len(swatches), swatches
        assert not runs & set(swatches), swatches
        assert {c.lower() for c in drawn["fills"]} <= set(swatches)
        assert _errors(page) == []
    finally:
        page.close()


@pytest.fixture(scope="module")
def shipped_runs_server(tmp_path_factory):
    """The app on every shipped run (data/), induction-d128 chosen."""
    yield from _serve(ROOT / "data" / "induction-d128", tmp_path_factory, data_dir=ROOT / "data")


CHART_KEYS = ["compare_bands", "compare_bin", "compare_dist", "compare_types", "compare_loss", "sizes_scaling"]


def test_no_legend_of_the_shipped_comparison_covers_its_charts_title(browser, shipped_runs_server):
    """induction-d128 against shakespeare-pythia-6x8 at 1400 x 900, the comparison of issue 63: the head-type counts'
    legend (six entries, two rows) grew up from the top of the plot over the chart's title, and the scaling chart's
    (ten timescales or more) over its own. Every chart's legend box and title box, as drawn, do not meet."""
    from tests.app.test_browser import LOAD_TIMEOUT_MS, _wait_laid_out

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(shipped_runs_server + "/compare?runs=induction-d128&runs=shakespeare-pythia-6x8&stat=std")
        page.wait_for_selector(".st-key-sizes_scaling .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
        _wait_laid_out(page, CHART_KEYS)
        drawn = page.evaluate(
            """keys => keys.map(key => {
            const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
            const box = el => { const b = el.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
            const legend = gd.querySelector('.infolayer .legend');
            return {key, title: box(gd.querySelector('.gtitle')), legend: legend ? box(legend) : null,
                    entries: gd.querySelectorAll('.infolayer .legend .traces').length,
                    shown: gd._fullData.filter(t => t.showlegend && t.visible !== false).length};
        })""",
            CHART_KEYS,
        )
        page.screenshot(path=str(ARTIFACTS / "compare_shipped_1400x900.png"), full_page=True)
        assert {d["key"] for d in drawn if d["legend"]} >= {"compare_dist", "compare_types", "compare_loss", "sizes_scaling"}
        # every timescale in the legend (ten on the GPU-built stores: more where the rebuilt d128 adds head types)
        scaling = next(d for d in drawn if d["key"] == "sizes_scaling")
        assert scaling["entries"] == scaling["shown"] >= 10, drawn
        for d in drawn:
            if d["legend"] is None:
                continue
            (tl, tt, tr, tb), (ll, lt, lr, lb) = d["title"], d["legend"]
            assert tr <= ll or lr <= tl or tb <= lt or lb <= tt, d  # the boxes do not intersect
        assert _errors(page) == []
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
