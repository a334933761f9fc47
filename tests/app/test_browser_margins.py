"""Every chart of every page is laid out once: the margins a figure declares already hold its axes' labels.

Streamlit's Plotly template turns on ``automargin`` for every axis. When an axis's tick labels and title (at the
template's standoff), a colour bar or a legend need more room than the figure's declared margins give, Plotly grows
the margins and lays out and draws the whole chart a second time. On 2026-11-28 that happened to every chart of every
page (the sidebar's loss curve: left 44 -> 57, bottom 36 -> 63 px; most time axes: bottom 52 -> 67), and the second
pass doubled a draw: in Chromium the layer view's grid of 6 panels took about 240 ms a draw with the pushes and 125 ms
without them, the head explorer's stacked panels 140 and 80 ms (`docs/dashboard.md`). The figures now declare what
their labels take; what is drawn is the same (the margins end where the pushes took them, within a few pixels).

Each page (and each tab of the pages with tabs) is opened on the shipped runs in Chromium at the benchmark's window
size (`benchmarks.bench_browser.VIEWPORT`); once no run is going on and the charts have kept their layout for a
second, every chart's margins as drawn (``_fullLayout._size``) must equal those it declared
(``_fullLayout.margin``). A failure names the chart (its widget key) and the margin each side needs.

What this does not cover: another run's labels (longer tick labels, more heads, a wider legend) may still need more
room; Plotly then pushes the margins as before, so nothing is cut off, and that chart is drawn twice.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.bench_browser import PAGES as BENCHED
from benchmarks.bench_browser import VIEWPORT
from headwatch.dashboard.navigation import PAGES
from tests.app.test_browser import LOAD_TIMEOUT_MS

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]

# Sides a chart may grow, by widget key, and why: its room depends on the run's own words.
GROWS = {"essential": {"r": "the legend names each stage by what forms in it (up to 60 characters)"}}


def _panels(page: str) -> list[str]:
    """The tabs of a page with tabs (its ``PANELS`` keys; read, not imported: a page runs main() on import)."""
    tree = ast.parse((ROOT / page).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PANELS"]:
            return list(ast.literal_eval(node.value))
    return []


def _views() -> list[tuple[str, str]]:
    """(server fixture, path) of every page as a link opens it, and of each of its tabs, on the plain-text shipped
    run; the refined LLC's page on induction-d128 (the plain-text runs carry no rLLC)."""
    out = []
    for spec in PAGES:
        server = "induction_server" if spec.url_path == "llc" else "shipped_server"
        path = "/" if spec.default else f"/{spec.url_path}"
        out += [(server, path)] + [(server, f"{path}?panel={panel}") for panel in _panels(spec.file)[1:]]
    return out


VIEWS = [
    *_views(),
    ("shipped_server", "/head?both=0"),  # one matrix: the head explorer's panels a column wide
    ("induction_server", "/head?panel=statistic"),  # with the rLLC among the statistics
]
VIEWS += [  # the views the browser benchmark times (other statistics, layers, heads)
    view
    for view in (("induction_server" if name == "refined LLC" else "shipped_server", path) for name, path, _ in BENCHED)
    if view not in VIEWS
]

# Every chart's key and the sides whose drawn margin differs from the declared one: [key, side, declared, drawn].
PUSHED = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(gd => {
  const key = ((gd.closest('[class*="st-key-"]') || {className: ''}).className.match(/st-key-(\\S+)/) || [0, '?'])[1];
  const drawn = gd._fullLayout._size, declared = gd._fullLayout.margin;
  return ['l', 'r', 't', 'b'].filter(side => Math.abs(drawn[side] - declared[side]) > 0.5)
    .map(side => [key, side, declared[side], Math.ceil(drawn[side])]);
})"""
# the run is over and every chart has kept its size and margins for ``quiet`` ms
SETTLED = """quiet => {
  const charts = [...document.querySelectorAll('.js-plotly-plot')];
  if (!charts.length || charts.some(gd => !gd._fullLayout) || document.querySelector('[data-testid="stStatusWidget"]')) {
    window.__hwLaid = null;
    return false;
  }
  const seen = JSON.stringify(charts.map(gd => [gd._fullLayout.width, gd._fullLayout.height, gd._fullLayout._size]));
  if (window.__hwLaid !== seen) { window.__hwLaid = seen; window.__hwLaidSince = Date.now(); }
  return Date.now() - window.__hwLaidSince >= quiet;
}"""


@pytest.mark.parametrize(("server", "path"), VIEWS, ids=[f"{s.split('_')[0]}{p}" for s, p in VIEWS])
def test_no_chart_grows_its_margins_and_is_drawn_again(chromium, request, server: str, path: str) -> None:
    base = request.getfixturevalue(server)
    page = chromium.new_page(viewport=VIEWPORT)
    try:
        page.goto(base + path)
        page.wait_for_function(SETTLED, arg=1500, timeout=LOAD_TIMEOUT_MS)
        pushed = page.evaluate(PUSHED)  # SETTLED waited for at least one drawn chart
        unexplained = [p for p in pushed if p[1] not in GROWS.get(p[0], {})]
        assert not unexplained, "margins Plotly grew (chart, side, declared px, drawn px): " + "; ".join(
            f"{key} {side} {declared} -> {drawn}" for key, side, declared, drawn in unexplained
        )
    finally:
        page.close()


# The composition map's y axis, laid out without automargin: each tick label's and the axis title's box (px, relative
# to the chart's left edge), the plot area's left edge, and whether automargin is off.
MATRIX_LEFT = """() => {
  const gd = document.querySelector('.st-key-composition .js-plotly-plot');
  const left = gd.getBoundingClientRect().left;
  const box = el => { const r = el.getBoundingClientRect(); return [r.left - left, r.right - left, r.top, r.bottom]; };
  return {labels: [...gd.querySelectorAll('.yaxislayer-above .ytick text')].map(box),
          title: box(gd.querySelector('.g-ytitle text')), plot: gd._fullLayout._size.l,
          automargin: gd._fullLayout.yaxis.automargin, text: [...gd.querySelectorAll('.ytick text')].map(t => t.textContent)};
}"""


def test_the_composition_maps_head_labels_fit_the_margin_it_declares(chromium, shipped_server) -> None:
    """Circuits' composition map lays out its y axis without automargin (Plotly would measure each of its 48 head
    labels on every draw, half the map's draw): its declared left margin (`views.circuits.figures.matrix_left_margin`) must
    hold the axis title and every head label, side by side, inside the chart and left of the plot area."""
    page = chromium.new_page(viewport=VIEWPORT)
    try:
        page.goto(shipped_server + "/circuits")
        page.wait_for_function(SETTLED, arg=1500, timeout=LOAD_TIMEOUT_MS)
        got = page.evaluate(MATRIX_LEFT)
    finally:
        page.close()
    assert got["automargin"] is False
    assert len(got["labels"]) == 48 and got["text"][:2] == ["L0 H0", "L0 H1"], got["text"][:3]
    title_left, title_right = got["title"][:2]
    assert title_left >= 0, got["title"]
    for label_left, label_right, *_ in got["labels"]:
        assert title_right <= label_left + 0.5, (got["title"], label_left)  # the title clear of the labels
        assert label_right <= got["plot"], (label_right, got["plot"])  # the labels clear of the plot area


# Each value axis whose margin the figure declared from the ticks it predicts (`figures.common.value_axis_margin`):
# its range, length in px and the tick labels Plotly drew.
DRAWN_TICKS = """key => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  const y = gd._fullLayout.yaxis;
  return {range: y.range, length: y._length, ticks: [...gd.querySelectorAll('.ytick text')].map(t => t.textContent)};
}"""


@pytest.mark.parametrize(
    ("server", "path", "key"),
    [
        ("shipped_server", "/timeline", "timeline_icl"),
        ("shipped_server", "/trajectories", "trajectory_map"),
        ("induction_server", "/timeline", "timeline_icl"),
    ],
)
def test_the_predicted_ticks_are_the_ones_plotly_draws(chromium, request, server: str, path: str, key: str) -> None:
    """The margin a figure declares holds the tick labels it predicts with plotly.js's rule (one tick per 40 px, 5
    to 10, at 2, 5 or 10 x 10^n): on the shipped runs' charts, they are the labels Plotly draws."""
    from headwatch.dashboard.figures.common import linear_ticks

    page = chromium.new_page(viewport=VIEWPORT)
    try:
        page.goto(request.getfixturevalue(server) + path)
        page.wait_for_function(SETTLED, arg=1500, timeout=LOAD_TIMEOUT_MS)
        drawn = page.evaluate(DRAWN_TICKS, key)
        assert drawn["ticks"] == linear_ticks(tuple(drawn["range"]), drawn["length"])[1], drawn
    finally:
        page.close()
