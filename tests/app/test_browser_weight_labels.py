"""Issue 41 in Chromium: the head explorer's weight panels (W_QK and W_OV side by side, its default) read in a
1,024, 1,280 and 1,600 px window on the shipped run. In each chart of P(w) with sigma and D_KL and of the spectrum
with stable rank and entropy, every axis title lies inside the chart and clear of every tick label, and the legend
clear of the figure's title (in a half-page column the small panels cut their time axis's title, the D_KL and S
titles ran over their tick labels, the legend over the title, and every two-line title lost the top of its first
line above the chart)."""

from __future__ import annotations

import pytest

from tests.app.test_browser import ARTIFACTS, LOAD_TIMEOUT_MS, _wait_laid_out

pytestmark = pytest.mark.browser

CHARTS = {"weights": ("density_slices", "density_slices_other"), "spectrum": ("spectrum_slices", "spectrum_slices_other")}

# Per chart: the SVG's box, each non-empty axis title's and tick label's box, the figure title's and the legend's.
BOXES_JS = """keys => keys.map(key => {
    const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
    if (!gd) return {key, missing: true};
    const box = e => { const b = e.getBoundingClientRect(); return {l: b.left, t: b.top, r: b.right, b: b.bottom}; };
    const shown = e => e.textContent.trim() !== '' && e.getBoundingClientRect().width > 0;
    const titles = [...gd.querySelectorAll('[class^="g-x"][class$="title"], [class^="g-y"][class$="title"]')];
    return {
        key,
        svg: box(gd.querySelector('.main-svg')),
        titles: [...new Set(titles)].filter(shown).map(e => ({name: e.getAttribute('class'), text: e.textContent, ...box(e)})),
        ticks: [...gd.querySelectorAll('.xtick, .ytick')].filter(shown).map(e => ({text: e.textContent, ...box(e)})),
        title: [...gd.querySelectorAll('.gtitle')].filter(shown).map(box),
        legend: [...gd.querySelectorAll('.legend .bg')].map(box),
    };
})"""


def _overlap(a: dict, b: dict, tol: float = 0.5) -> bool:
    return a["l"] < b["r"] - tol and b["l"] < a["r"] - tol and a["t"] < b["b"] - tol and b["t"] < a["b"] - tol


def _inside(a: dict, outer: dict, tol: float = 0.5) -> bool:
    return a["l"] >= outer["l"] - tol and a["r"] <= outer["r"] + tol and a["t"] >= outer["t"] - tol and a["b"] <= outer["b"] + tol


def label_problems(charts: list[dict], *, title_across: bool = True) -> list[str]:
    """What is cut or overlaps in the charts' boxes (`BOXES_JS`): an axis title outside its SVG or over a tick label,
    the figure's title above or below the SVG (``title_across``: or past its sides), the legend over the title."""
    out = []
    for c in charts:
        if c.get("missing"):
            out.append(f"{c['key']}: no chart")
            continue
        for t in c["titles"]:
            if not _inside(t, c["svg"]):
                out.append(f"{c['key']}: {t['name']} {t['text']!r} cut ({t} outside {c['svg']})")
            out += [f"{c['key']}: {t['name']} {t['text']!r} over tick {k['text']!r}" for k in c["ticks"] if _overlap(t, k)]
        for t in c["title"]:
            box = t if title_across else dict(t, l=c["svg"]["l"], r=c["svg"]["r"])
            if not _inside(box, c["svg"]):
                out.append(f"{c['key']}: the title cut ({t} outside {c['svg']})")
        out += [f"{c['key']}: legend over the title" for g in c["legend"] for t in c["title"] if _overlap(g, t)]
    return out


@pytest.mark.parametrize("width", [1024, 1280, 1600])
@pytest.mark.parametrize("panel", list(CHARTS))
def test_weight_panels_axis_titles_fit_beside_each_other(chromium, shipped_server, width, panel):
    keys = list(CHARTS[panel])
    page = chromium.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(shipped_server + f"/head?layer=2&head=1&panel={panel}")  # the panel's tab
        page.wait_for_function(
            "keys => keys.every(k => document.querySelector(`.st-key-${k} .js-plotly-plot .main-svg`))",
            arg=keys,
            timeout=LOAD_TIMEOUT_MS,
        )
        _wait_laid_out(page, keys)  # Plotly's second layout pass (automargin) done: the axes stopped moving
        charts = page.evaluate(BOXES_JS, keys)
        assert all(c.get("titles") for c in charts), charts  # titles were found (the selectors still match Plotly's)
        assert any("checkpoint" in t["text"] or "step" in t["text"] for t in charts[0]["titles"])
        # at 1,024 px the title's first line (run, head, matrix) is wider than the half-page column: only its height
        problems = label_problems(charts, title_across=width >= 1280)
        if problems:
            ARTIFACTS.mkdir(exist_ok=True)
            page.locator(f".st-key-{keys[0]}").screenshot(path=str(ARTIFACTS / f"weight-labels-{panel}-{width}.png"))
        assert problems == []
    finally:
        page.close()
