"""The Weight matrices page in a real browser (Chromium via Playwright, the server as the Dockerfile starts it):
opened by a link with its parameters, it shows its four plots (no second step slider), keeps the view in the
address bar and plays the singular-value histogram on from the linked step. Skipped only where
/usr/bin/chromium is missing outside CI."""

from __future__ import annotations

import shutil

import pytest

from benchmarks.synthetic_store import add_synthetic_layer_matrices
from headwatch.analysis.store import open_store
from tests.app import test_browser
from tests.app.test_browser import ARTIFACTS, _dialogs, _errors, _open, _serve, _text_of_one, _wait_published

browser = test_browser.browser  # the module-scoped Chromium fixture, shared with test_browser.py's helpers

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def layered_server(store_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("layered-browser") / "tiny-run"
    shutil.copytree(store_path, path)
    add_synthetic_layer_matrices(path)
    yield from _serve(path, tmp_path_factory)


def test_weight_matrices_page_opens_by_link_and_plays(browser, layered_server, store_path):
    steps = [int(s) for s in open_store(store_path).steps]
    start = steps[2]
    path = f"/weights?role=mlp_in&layer=1&step={start}"
    page = _open(browser, layered_server + path, 3)
    try:
        page.screenshot(path=str(ARTIFACTS / "weights.png"), full_page=True)
        assert _errors(page) == [] and _dialogs(page) == []
        _wait_published(page)
        for param in ("role=mlp_in", "layer=1", f"step={start}"):
            assert param in page.url
        link = page.locator('[data-testid="stSidebar"] .st-key-view_link a code').inner_text()
        assert link.strip().split("?")[1] == page.url.split("?")[1]
        for key in ("sv_animation", "sv_depth", "frob_lines", "alpha_lines"):
            assert page.locator(f".st-key-{key} .main-svg").count() >= 1, key
        # one step control, the page's: Plotly's own slider (which the link, caption and depth panel could not
        # follow) is gone; Play and Pause stay
        assert page.locator(".st-key-sv_animation .slider-container").count() == 0
        assert page.locator(".st-key-sv_animation .updatemenu-container").count() == 1
        # while Plotly redraws, a second (outgoing) title can stand beside the chart's for a moment: read the one
        title = ".st-key-sv_animation .gtitle"
        opening = f"layer 1 mlp_in (256 x 64), step {start:,}"
        first = _text_of_one(page, title)
        assert first.endswith(opening)  # after the export title (run, weight)
        page.get_by_text("▶ Play").click()
        # wait for a later step in the title, not for any change of it: the animation's first frame can be the
        # linked step again under another title, and a Pause there leaves the chart where it started
        page.wait_for_function(
            """([selector, start]) => {
                const found = document.querySelectorAll(selector);
                const step = found.length === 1 && found[0].textContent.match(/step ([0-9,]+)$/);
                return Boolean(step) && Number(step[1].replaceAll(",", "")) > start;
            }""",
            arg=[title, start],
            timeout=30_000,
        )
        page.get_by_text("❚❚ Pause").click()
        shown = int(_text_of_one(page, title).rsplit("step ", 1)[1].replace(",", ""))
        assert shown > start  # it played on from the linked step
        page.screenshot(path=str(ARTIFACTS / "weights-playing.png"))
    finally:
        page.close()
