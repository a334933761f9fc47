"""Offline, every page is whole: the app asks no host but its own server for anything.

A Space or a laptop without a network must show the same pages. Each page of the
navigation is opened on the shipped run in Chromium while every request the page makes
is recorded; any request to another host than the app's (a font CDN for an icon, say:
Streamlit draws a ``:material/...:`` page icon as a favicon fetched from fonts.gstatic.com)
fails the test, with the URLs it asked for.

With ``HEADWATCH_SCREENSHOTS=1`` each page is also saved as ``docs/images/<url path>.png``, the
pictures of the documentation's view pages (1280 x 900, the plain-text shipped run; the Refined LLC page on
induction-d128, the shipped runs with refined LLCs being the induction runs).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from headwatch.dashboard.navigation import PAGES
from tests.app.conftest import ROOT
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors

pytestmark = pytest.mark.browser

SCREENSHOTS = ROOT / "docs" / "images"


def _foreign(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in ("127.0.0.1", "localhost")


# Every element with text of its own that does not fit its box and is clipped (an ellipsis, hidden overflow or no
# wrapping), by its own box or by one of the few boxes around it (a toggle's label is cut by its wrapper, not by the
# <p> that holds the text): a label, a page link or a picker's value read as "Architecture hea..." or "log de...".
CUT_TEXT_JS = """() => {
    const out = [];
    const clips = (cs) => cs.textOverflow === 'ellipsis' || cs.overflow === 'hidden' || cs.overflowX === 'hidden'
        || cs.overflowX === 'clip' || cs.whiteSpace === 'nowrap';
    for (const el of document.querySelectorAll('[data-testid="stMain"] *, [data-testid="stSidebar"] *')) {
        const texts = Array.from(el.childNodes).filter(n => n.nodeType === 3 && n.textContent.trim());
        if (!texts.length || el.closest('.js-plotly-plot')) continue;
        const own = texts.map(n => n.textContent).join('').trim();
        if (clips(getComputedStyle(el)) && el.scrollWidth > el.clientWidth + 1) { out.push(own.slice(0, 80)); continue; }
        const range = document.createRange();
        range.setStartBefore(texts[0]);
        range.setEndAfter(texts[texts.length - 1]);
        const right = range.getBoundingClientRect().right;
        let box = el.parentElement;
        for (let up = 0; box && up < 5; up++, box = box.parentElement) {
            if (box.matches('[data-testid="stMain"], [data-testid="stSidebar"]')) break;
            if (clips(getComputedStyle(box)) && right > box.getBoundingClientRect().right + 1) {
                out.push(own.slice(0, 80));
                break;
            }
        }
    }
    return out;
}"""


def _cut_text(page) -> list[str]:
    return page.evaluate(CUT_TEXT_JS)


# pages drawn from a table the plain-text shipped run lacks: opened on induction-d128 instead
ON_INDUCTION = {"llc"}


@pytest.mark.parametrize("spec", PAGES, ids=[p.url_path for p in PAGES])
def test_every_page_asks_no_other_host(spec, chromium, request) -> None:
    server = request.getfixturevalue("induction_server" if spec.url_path in ON_INDUCTION else "shipped_server")
    asked: list[str] = []
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    page.on("request", lambda request: asked.append(request.url))
    try:
        page.goto(server + ("/" if spec.default else f"/{spec.url_path}"))
        page.wait_for_selector('[data-testid="stSidebarNav"]', timeout=LOAD_TIMEOUT_MS)
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=LOAD_TIMEOUT_MS)
        page.wait_for_timeout(1500)  # favicons and fonts are requested after the first render
        assert _errors(page) == []
        # the sidebar's icons are drawn with the font Streamlit ships: one glyph per page link
        icons = page.locator('[data-testid="stSidebarNav"] [data-testid="stIconMaterial"]')
        expect(icons).to_have_count(len(PAGES), timeout=LOAD_TIMEOUT_MS)
        assert _cut_text(page) == [], "text cut short at 1,280 px"
        page.set_viewport_size({"width": 1024, "height": 900})
        page.wait_for_timeout(800)  # re-layout, no rerun
        assert _cut_text(page) == [], "text cut short at 1,024 px"
        page.set_viewport_size({"width": 1280, "height": 900})
        page.wait_for_timeout(800)
        if os.environ.get("HEADWATCH_SCREENSHOTS") == "1":
            page.wait_for_timeout(1500)  # plotly's transitions
            page.screenshot(path=str(SCREENSHOTS / f"{spec.url_path}.png"))
    finally:
        page.close()
    foreign = [url for url in asked if _foreign(url)]
    assert foreign == [], f"{spec.title} asked other hosts: {foreign}"
