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

from tests.app.test_browser import LOAD_TIMEOUT_MS, _wait_published

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
