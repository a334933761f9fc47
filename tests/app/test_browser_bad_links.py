"""An unknown page path says that the page does not exist (issue 25), in Chromium on the shipped run.

Streamlit answers a path that names no page by running the default page (the Overview) and
rewriting the address bar to ``/``; its "Page not found" dialog is gone at the first click, so
the reader was left on the Overview with no word of what happened. The page now shows a notice
that names the path (cut when it is very long) and lists the pages there are.
"""

from __future__ import annotations

import pytest

from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _wait_published

pytestmark = pytest.mark.browser


NOTICES = '[data-testid="stMain"] [data-testid="stAlert"]'


def _notices(page) -> list[str]:
    """The page's notices once its run is over and its view published."""
    page.wait_for_selector("h1", timeout=LOAD_TIMEOUT_MS)
    page.wait_for_selector('[data-testid="stSidebar"] .st-key-view_link a code', timeout=LOAD_TIMEOUT_MS)
    _wait_published(page)
    return page.locator(NOTICES).all_inner_texts()


def _wait_notice(page) -> None:
    """Wait for the notice that a page does not exist (a timeout fails the test)."""
    page.locator(NOTICES).filter(has_text="does not exist").first.wait_for(timeout=LOAD_TIMEOUT_MS)


def test_an_unknown_page_path_says_the_page_does_not_exist(chromium, shipped_server) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(shipped_server + "/nosuchpage?layer=2")
        _wait_notice(page)
        text = " ".join(_notices(page))
        assert "/nosuchpage" in text and "does not exist" in text, text
        assert "/head" in text, text  # the pages there are
        page.keyboard.press("Escape")  # Streamlit's own dialog closes; the notice stays
        page.wait_for_selector('[data-testid="stDialog"]', state="detached", timeout=LOAD_TIMEOUT_MS)
        assert "does not exist" in " ".join(_notices(page))
        assert _errors(page) == []
    finally:
        page.close()


def test_a_very_long_unknown_path_is_cut_in_the_notice(chromium, shipped_server) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(shipped_server + "/" + "p" * 3000)
        _wait_notice(page)
        found = [t for t in _notices(page) if "does not exist" in t]
        assert found and all(len(t) < 1000 for t in found), [len(t) for t in found]
        assert "3,001 characters" in found[0]  # the path quoted with its slash
    finally:
        page.close()


def test_a_known_page_shows_no_such_notice(chromium, shipped_server) -> None:
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    try:
        for path in ("/", "/layers"):
            page.goto(shipped_server + path)
            assert not any("does not exist" in t for t in _notices(page)), path
    finally:
        page.close()
