"""A real browser: Streamlit serving the app on a free port, Debian's Chromium driven by Playwright.

Opens every page by URL with parameters, waits for its plots, checks that no error
element is shown and that the address bar keeps the view, clicks a head on the
trajectory map and the animation's Play button, and saves screenshots under
test-artifacts/. Skipped only where /usr/bin/chromium is missing outside CI.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.app.conftest import ROOT

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
LOAD_TIMEOUT_MS = 90_000

# (screenshot name, URL path and query, plots the page must show, a text the page must show)
VIEWS = [
    ("overview", "/", 1, "Views"),
    ("head", "/head?layer=2&head=1&step=0&step=4&step=1000&step=143000&xscale=log", 7, "Weight distribution"),
    ("layers", "/layers?stat=kl_gauss&layer=3", 3, "Layer 3: every head"),
    ("architecture", "/architecture?stat=lambda&k=3&logc=1", 3, "λ_3 of all 16 heads"),
    ("animation", "/animation?stat=std&step=21000", 2, "Opening step"),
    ("trajectories", "/trajectories?stat=kl_gauss&layer=1&head=2", 2, "One point per head"),
    ("lab", "/lab?dmodel=1024&nheads=8&sq=0.02&sk=0.02", 3, "Spectrum against the null laws"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(store_path, tmp_path_factory):
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("/usr/bin/chromium is missing in CI: scripts/test.sh installs it with apt-get install chromium")
        pytest.skip("/usr/bin/chromium is not installed (apt-get install chromium); CI fails instead of skipping")
    port = _free_port()
    empty = tmp_path_factory.mktemp("no-data")
    env = dict(os.environ, HEADWATCH_STORE=str(store_path), HEADWATCH_DATA=str(empty))
    log = (tmp_path_factory.mktemp("server") / "streamlit.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{base}/_stcore/health", timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited early; see {log.name}")
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("streamlit did not become healthy within 60 s")
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        # Streamlit's first session in a fresh server resolves pages the legacy pages/ way
        # and pops a spurious "Page not found" for a deep link (the right page still runs);
        # open the front page once so every test sees the server as users mostly do.
        _open(b, server + "/", 1).close()
        yield b
        b.close()


def _open(browser, url: str, plots: int):
    page = browser.new_page(viewport={"width": 1500, "height": 1900})
    page.goto(url)
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .main-svg').length >= n", arg=plots,
        timeout=LOAD_TIMEOUT_MS,
    )
    # the script has finished when Streamlit's running indicator is gone
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=LOAD_TIMEOUT_MS)
    page.wait_for_timeout(800)  # let plotly finish drawing before the screenshot
    return page


def _errors(page) -> list[str]:
    return page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').all_inner_texts()


def _click_head(page, layer: int, head: int) -> None:
    """Click the point of head (layer, head) on the trajectory map."""
    xy = page.evaluate("""([layer, head]) => {
        const gd = document.querySelector('.st-key-trajectory_map .js-plotly-plot');
        const t = gd._fullData.find(t => t.name === 'heads');
        const i = t.customdata.findIndex(c => c[0] === layer && c[1] === head);
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
        return [box.left + xa._offset + xa.l2p(t.x[i]), box.top + ya._offset + ya.l2p(t.y[i])];
    }""", [layer, head])
    page.mouse.move(*xy)
    page.mouse.click(*xy)


@pytest.mark.parametrize("name,path,plots,text", VIEWS, ids=[v[0] for v in VIEWS])
def test_page_opens_by_url(browser, server, name, path, plots, text):
    page = _open(browser, server + path, plots)
    try:
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        assert _errors(page) == []
        assert page.get_by_text(text).first.is_visible()
        # the address bar keeps every parameter of the link (and gains the rest of the view state)
        for param in re.findall(r"[?&]([^&]+)", path):
            assert param in page.url
        link = page.locator('[data-testid="stSidebar"] [data-testid="stCode"]').inner_text()
        assert link.strip().split("?")[1] == page.url.split("?")[1]

        if name == "trajectories":  # picking a head opens it in the head explorer
            _click_head(page, 2, 3)
            page.wait_for_function("() => location.pathname.endsWith('/head')", timeout=LOAD_TIMEOUT_MS)
            page.wait_for_function(
                "() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .main-svg').length >= 7",
                timeout=LOAD_TIMEOUT_MS,
            )
            assert "layer=2" in page.url and "head=3" in page.url
            assert _errors(page) == []
        if name == "animation":  # plays in the browser from the linked step
            title = page.locator(".st-key-animation .gtitle")
            assert title.text_content() == "step 21,000"
            page.get_by_text("▶ Play").click()
            page.wait_for_function(
                "() => document.querySelector('.st-key-animation .gtitle').textContent !== 'step 21,000'", timeout=30_000
            )
            page.get_by_text("❚❚ Pause").click()
            shown = int(title.text_content().removeprefix("step ").replace(",", ""))
            assert shown > 21_000  # it played on from the linked step, not from step 0
            page.screenshot(path=str(ARTIFACTS / "animation-playing.png"))
    finally:
        page.close()


def test_bad_parameters_show_a_notice_not_a_traceback(browser, server):
    page = _open(browser, server + "/architecture?stat=bogus&logc=maybe&xscale=sideways", 3)
    try:
        page.screenshot(path=str(ARTIFACTS / "bad-params.png"))
        warnings = " ".join(page.locator('[data-testid="stAlertContentWarning"]').all_inner_texts())
        assert "stat=bogus" in warnings and "logc=maybe" in warnings and "xscale=sideways" in warnings
        assert _errors(page) == []
        assert "stat=std" in page.url and "bogus" not in page.url
    finally:
        page.close()
