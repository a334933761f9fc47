"""Stacked charts over one time axis are pixel-aligned, in Chromium on the shipped runs.

A page that stacks charts over the same time axis (the head explorer's maps and curves, the Forward lenses'
bands, head-type heatmaps and probe losses, Compare runs' panels, the Timeline's loss and lanes) must put a
given step at the same horizontal pixel in each: the plot areas' left and right edges must match. Before,
each chart's margins followed its own legend, colour bar and tick labels (Plotly's automatic margins), so
the time axes of charts one above the other were offset by tens of pixels.

The edges are read from Plotly's own layout of each drawn chart: the chart's box plus its time axes'
offset and length (the ``.nsewdrag`` rectangle of each subplot).
"""

from __future__ import annotations

import pytest

from tests.app.conftest import ROOT, SHIPPED
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _serve, _wait_laid_out

pytestmark = pytest.mark.browser

SEED2 = ROOT / "data" / "shakespeare-pythia-6x8-seed2"
INDUCTION = ROOT / "data" / "induction-d128"  # the refined LLC: only the induction runs ship it
TOLERANCE_PX = 1.0

# page -> its groups of charts stacked over its time axis (widget keys), each group in columns of one width: within
# a group the plot areas' left and right edges match; every column starts at the page's left edge, so all the
# page's charts share their left edge. (The head explorer puts its maps in a left column, 5/11 of the width,
# the leading eigenvalues in another, 7/11, the head against its layer and both matrices across the page.) On a page
# whose panels are tabs, ``panel:key`` is a chart of that tab (``panel=...`` in the link): a step stays at its pixel
# from one tab to the next.
STACKS = {
    "/head?layer=2&head=1": [
        ["weights:density_map", "spectrum:spectrum_map"],
        ["leading:leading"],
        ["statistic:head_in_layer", "statistic:both_matrices"],
    ],
    "/lenses": [
        [
            "layers:bands_entropy",
            "layers:bands_span",
            "types:type_prev_token",
            "types:type_induction",
            "types:type_sink",
            "losses:probe_loss",
        ]
    ],
    "/compare?runs=shakespeare-pythia-6x8&runs=shakespeare-pythia-6x8-seed2": [
        ["compare_bands", "compare_bin", "compare_types", "compare_loss"]
    ],
    "/timeline": [["timeline"]],
    "/layers?layer=2": [["layer_lines", "layer_grid"]],
    "/weights": [["frob_lines", "alpha_lines"]],
    # induction-d128 holds the refined LLC under several distributions: their overlay and ratios stacked below
    "/llc?run=induction-d128": [["llc_heads", "llc_model"], ["llc_data", "llc_data_ratio"]],
    # with the loss on every chart over training (its axis at the right)
    "/head?layer=2&head=1&loss=1": [
        ["weights:density_map", "spectrum:spectrum_map"],
        ["leading:leading"],
        ["statistic:head_in_layer", "statistic:both_matrices"],
    ],
    "/llc?run=induction-d128&loss=1": [["llc_heads", "llc_model"]],
}


@pytest.fixture(scope="module")
def two_shipped(tmp_path_factory):
    """The shipped run ($HEADWATCH_STORE) and its second seed (the data folder): Compare runs has two runs; and
    induction-d128, whose refined LLCs the Refined LLC page draws."""
    for other in (SEED2, INDUCTION):
        if not (other / "meta.json").is_file():
            pytest.fail(f"the shipped run {other} is missing")
    data = tmp_path_factory.mktemp("two-shipped")
    for other in (SEED2, INDUCTION):
        (data / other.name).symlink_to(other)
    yield from _serve(SHIPPED, tmp_path_factory, data_dir=data)


def _edges(page, key: str) -> list[list[float]]:
    """[left, right] in page pixels of each x axis's plot area of the chart ``key``."""
    return page.evaluate(
        """(key) => {
        const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        const box = gd.getBoundingClientRect(), L = gd._fullLayout;
        return Object.keys(L).filter(k => /^xaxis\\d*$/.test(k) && L[k]._length)
            .map(k => [box.left + L[k]._offset, box.left + L[k]._offset + L[k]._length]);
    }""",
        key,
    )


def _by_link(path: str, keys: list[str]) -> dict[str, list[str]]:
    """The links to load and the charts (keys) to read on each: ``panel:key`` on the link with ``panel=panel``."""
    links: dict[str, list[str]] = {}
    for entry in keys:
        panel, _, key = entry.rpartition(":")
        link = path + (("&" if "?" in path else "?") + f"panel={panel}" if panel else "")
        links.setdefault(link, []).append(key)
    return links


@pytest.mark.parametrize("path", list(STACKS))
def test_stacked_time_charts_share_their_left_and_right_pixel_edges(chromium, two_shipped, path) -> None:
    groups = [[entry.rpartition(":")[2] for entry in group] for group in STACKS[path]]
    keys = [key for group in groups for key in group]
    spans = {}
    for link, shown in _by_link(path, [entry for group in STACKS[path] for entry in group]).items():
        page = chromium.new_page(viewport={"width": 1400, "height": 1200})
        try:
            page.goto(two_shipped + link)
            for key in shown:
                page.wait_for_selector(f".st-key-{key} .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
            page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=LOAD_TIMEOUT_MS)
            _wait_laid_out(page, shown)
            for key in shown:
                edges = _edges(page, key)
                assert edges, key
                spans[key] = (min(e[0] for e in edges), max(e[1] for e in edges))
            assert _errors(page) == []
        finally:
            page.close()
    left = spans[keys[0]][0]
    assert all(abs(span[0] - left) <= TOLERANCE_PX for span in spans.values()), spans
    for group in groups:
        right = spans[group[0]][1]
        assert all(abs(spans[key][1] - right) <= TOLERANCE_PX for key in group), spans
