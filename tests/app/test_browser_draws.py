"""A chart is drawn twice on a page load, never a third time because a font arrived while it was drawing.

Plotly.js draws a chart again when a font face that was not loaded at the start of its draw has started loading
by its end. The app's only use of Streamlit's code font (Source Code Pro, a web font fetched on first use), the
sidebar's "Link to this view", appears at the end of the run, often while the page's charts are still drawing:
with the machine's other core busy, 9 or 10 of the head explorer's 13 charts were drawn a third time in 2 of 5
loads. `.streamlit/config.toml` sets the theme's code font (light and dark) to the system's monospace fonts, so the
code font is never fetched. (Fetching it early only narrowed the race: in a suite run the first chart drew before it
had loaded. A ``<style>`` put by the app lost it too: on a first load the link could render before the style and
start the fetch, 2 of 4 first loads on 2026-11-28; the theme applies from the element's first render.)

Each load is watched from the page's first script: every chart's ``plotly_afterplot`` event. A load is read once
the view is published, every chart has drawn, no font is loading, no chart waits on a font (Plotly's
``_fontLoadToken``) and no chart has drawn for two seconds; then the code font's faces must all be unloaded and
no chart drawn more than twice.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.app.test_browser import LOAD_TIMEOUT_MS, _wait_laid_out, _wait_published

CODE_FONT = "Source Code Pro"  # Streamlit's theme.codeFont by default, a web font fetched on first use
CONFIG = Path(__file__).resolve().parents[2] / ".streamlit" / "config.toml"


def theme_code_fonts() -> dict[str, str]:
    """The code font the app's config sets for each theme."""
    theme = tomllib.loads(CONFIG.read_text())["theme"]
    return {mode: theme[mode]["codeFont"] for mode in ("light", "dark")}


def test_both_themes_set_code_in_system_fonts_without_pinning_a_theme() -> None:
    """The config alone: the same system fonts for the light and the dark theme, and no plain ``[theme]`` option (which
    would make a custom theme and pin viewers to light). That Streamlit renders code in them is the browser test's."""
    fonts = theme_code_fonts()
    assert fonts["light"] == fonts["dark"] and CODE_FONT not in fonts["light"], fonts
    assert fonts["light"].split(",")[-1].strip() == "monospace"  # the generic family: never a fetch
    assert set(tomllib.loads(CONFIG.read_text())["theme"]) == {"light", "dark"}  # a plain option pins light


WATCH = """
(() => {
  const W = window.__hwDraws = {draws: [], lastDraw: 0};
  const hooked = new WeakSet();
  new MutationObserver(() => {
    for (const gd of document.getElementsByClassName('js-plotly-plot')) {
      if (hooked.has(gd) || !gd.on) continue;
      hooked.add(gd);
      const i = W.draws.length;
      W.draws.push(0);
      gd.on('plotly_afterplot', () => { W.draws[i] += 1; W.lastDraw = performance.now(); });
    }
  }).observe(document, {subtree: true, childList: true});
})();
"""
# the code font's faces that have been fetched or are being fetched
CODE_FONT_USED = """family => [...document.fonts].filter(f => f.family.replace(/["']/g, '') === family
  && f.status !== 'unloaded').map(f => `${f.family} ${f.style} ${f.status}`)"""

SETTLED = """quiet => {
  const W = window.__hwDraws, charts = [...document.getElementsByClassName('js-plotly-plot')];
  return W.draws.length === charts.length && charts.length > 0 && W.draws.every(n => n > 0)
    && document.fonts.status === 'loaded' && charts.every(gd => gd._fontLoadToken === undefined)
    && performance.now() - W.lastDraw > quiet;
}"""

# the link's code element and the first family it is set in
LINK_FONT = """() => getComputedStyle(document.querySelector('[data-testid="stSidebar"] .st-key-view_link a code'))
  .fontFamily.split(',')[0].trim()"""


@pytest.mark.browser
def test_no_web_font_redraws_a_chart_of_the_head_explorer(chromium, shipped_server) -> None:
    path = "head"  # the page with the most charts (13, the sidebar's loss curve included)
    context = chromium.new_context(viewport={"width": 1500, "height": 1900})
    try:
        context.add_init_script(WATCH)
        for load in ("first", "warm"):  # the first load of this browser fetches the fonts; the second has them cached
            page = context.new_page()
            page.goto(f"{shipped_server}/{path}")
            _wait_published(page)
            page.wait_for_function(SETTLED, arg=2000, polling=200, timeout=LOAD_TIMEOUT_MS)
            draws = page.evaluate("window.__hwDraws.draws")
            first_family = theme_code_fonts()["light"].split(",")[0]
            assert page.evaluate(LINK_FONT) == first_family, f"{load} load: the link is not set in the system's monospace font"
            used = page.evaluate(CODE_FONT_USED, CODE_FONT)
            assert not used, f"{load} load of /{path}: the code font was fetched ({used}): the theme's codeFont is missing"
            assert max(draws) <= 2, f"{load} load of /{path}: draws per chart {draws}: a chart was drawn more than twice"
            page.close()
    finally:
        context.close()


# Per chart: its traces with invisible markers (opacity 0: the lines a click picks, the heatmaps' cell pickers), the
# points they hold and the marker paths Plotly drew for them.
PICKERS = """key => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  const traces = [...gd.querySelectorAll('.scatterlayer .trace')].filter(t => t.__data__ && t.__data__[0]
    && t.__data__[0].trace.marker && t.__data__[0].trace.marker.opacity === 0 && t.__data__[0].trace.mode.includes('markers'));
  return {traces: traces.length, points: traces.reduce((n, t) => n + t.__data__.length, 0),
          drawn: traces.reduce((n, t) => n + t.querySelectorAll('path.point').length, 0)};
}"""


@pytest.mark.browser
@pytest.mark.parametrize(
    ("path", "key"), [("layers?layer=2", "layer_grid"), ("layers?layer=2", "layer_lines"), ("architecture", "architecture")]
)
def test_invisible_click_targets_are_not_drawn_point_by_point(chromium, shipped_server, path: str, key: str) -> None:
    """Points that only answer a hover and a click (`dashboard.figures.points.invisible_markers`) are drawn for one
    point of their trace (``marker.maxdisplayed``), not as an SVG path per point (2,064 on the layer view's grid: they
    made its draw about 3 times slower); Plotly still finds the hovered point in the data, so the point farthest
    from the others answers a hover with its own head."""
    page = chromium.new_page(viewport={"width": 1500, "height": 1900})
    try:
        page.goto(f"{shipped_server}/{path}")
        _wait_published(page)
        page.wait_for_selector(f".st-key-{key} .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
        _wait_laid_out(page, [key])  # drawn and no longer moving: its traces are in the SVG, the hover lands where aimed
        got = page.evaluate(PICKERS, key)
        assert got["traces"] >= 1 and got["points"] > 40 * got["traces"], got
        assert got["drawn"] <= got["traces"], got
        # hover the picker point farthest from every other point of the chart: that point's own head answers
        target = page.evaluate(
            """key => {
            const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`), box = gd.getBoundingClientRect();
            const pts = [];
            for (const t of gd._fullData.filter(t => t.marker && t.marker.opacity === 0 && t.mode.includes('markers'))) {
                const xa = gd._fullLayout[t.xaxis.replace('x', 'xaxis')], ya = gd._fullLayout[t.yaxis.replace('y', 'yaxis')];
                Array.from(t.x).forEach((x, j) => {
                    const y = t.y[j];
                    if (y === null || Number.isNaN(y)) return;
                    pts.push({xy: [box.left + xa._offset + xa.d2p(x), box.top + ya._offset + ya.d2p(y)],
                              custom: Array.from(t.customdata[j])});
                });
            }
            let best = {gap: -1};
            for (const p of pts) {
                const gap = Math.min(...pts.filter(q => q !== p).map(q => Math.hypot(q.xy[0] - p.xy[0], q.xy[1] - p.xy[1])));
                if (gap > best.gap) best = {...p, gap};
            }
            return best;
        }""",
            key,
        )
        page.mouse.move(*target["xy"])
        page.wait_for_selector(f".st-key-{key} .hoverlayer .hovertext", timeout=LOAD_TIMEOUT_MS)
        hover = page.locator(f".st-key-{key} .hoverlayer .hovertext").first.text_content() or ""
        layer, head = int(target["custom"][0]), int(target["custom"][1])
        assert f"L{layer} H{head}" in hover or f"layer {layer}, head {head}" in hover, (hover, target)
    finally:
        page.close()
