"""A store that grows while a page is open (issue 42), in Chromium: the page shows the new checkpoint after its
commit without a reload, the sidebar says the run is live and at which step, and then that it finished and at which
step, and a link to a step the run has not reached says so plainly.

The store is made by the job (``python -m headwatch.precompute``) from tiny GPT-NeoX checkpoints, then grown by a real
follower (``python -m headwatch.precompute --follow``) as the run folder gains a checkpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from playwright.sync_api import expect

from headwatch.training.markers import FINISHED_FILE
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _serve
from tests.integration.conftest import REPO, neox_model, perturb, run_cli

pytestmark = pytest.mark.browser

FOLLOW = [sys.executable, "-m", "headwatch.precompute", "--follow", "--no-progress", "--poll", "0.5"]


@pytest.fixture(scope="module")
def growing(tmp_path_factory):
    """A run folder with steps 0, 1 and 2, its store, a follower on it, and the app serving the store."""
    root = tmp_path_factory.mktemp("live")
    src, store = root / "run", root / "store"
    model = neox_model()
    for step in (0, 1, 2):
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")
    done = run_cli("--source", str(src), "--out", str(store))
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0"}
    with open(root / "follow.log", "wb") as log:
        follower = subprocess.Popen(
            [*FOLLOW, "--source", str(src), "--out", str(store)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # the follower's first round (it checks the store against the run) has committed
        deadline = time.monotonic() + LOAD_TIMEOUT_MS / 1000
        while "the store has 3 checkpoints" not in (root / "follow.log").read_text():
            assert follower.poll() is None and time.monotonic() < deadline, (root / "follow.log").read_text()
            time.sleep(0.1)
        for base in _serve(store, tmp_path_factory):
            yield src, model, base, follower
    finally:
        if follower.poll() is None:
            follower.kill()
        follower.wait()


def test_an_open_page_shows_a_new_checkpoint_without_a_reload(chromium, growing) -> None:
    src, model, base, follower = growing
    page = chromium.new_page(viewport={"width": 1500, "height": 1200})
    page.goto(f"{base}/heads?step=4")  # a link to a step the run has not reached yet
    sidebar = page.locator('[data-testid="stSidebar"]')
    expect(sidebar).to_contain_text("the store is at step 2", timeout=LOAD_TIMEOUT_MS)
    expect(sidebar).to_contain_text("Live", timeout=LOAD_TIMEOUT_MS)
    expect(sidebar).to_contain_text("steps 0–2", timeout=LOAD_TIMEOUT_MS)
    expect(page.locator("body")).to_contain_text("is not in this run yet: its last checkpoint is step 2", timeout=LOAD_TIMEOUT_MS)
    since = page.get_by_role("slider", name="Change since step")
    expect(since).to_have_attribute("max", "2", timeout=LOAD_TIMEOUT_MS)  # options 0, 1, 2
    page.evaluate("window.__notReloaded = true")

    # the run saves step 4; the follower adds it to the store in one commit
    perturb(model, 4)
    model.save_pretrained(src / "step4")

    expect(sidebar).to_contain_text("the store is at step 4", timeout=LOAD_TIMEOUT_MS)
    expect(sidebar).to_contain_text("steps 0–4", timeout=LOAD_TIMEOUT_MS)
    expect(since).to_have_attribute("max", "3", timeout=LOAD_TIMEOUT_MS)  # options 0, 1, 2, 4
    assert page.evaluate("window.__notReloaded === true"), "the page was reloaded"
    assert not _errors(page)

    # training finishes: the follower completes the store and stops; the live badge gives way to one that says the
    # run finished and at which step, still without a reload
    (src / FINISHED_FILE).write_text("{}")
    assert follower.wait(timeout=LOAD_TIMEOUT_MS / 1000) == 0
    expect(sidebar).to_contain_text("training finished at step 4", timeout=LOAD_TIMEOUT_MS)
    expect(sidebar).to_contain_text("Finished", timeout=LOAD_TIMEOUT_MS)
    expect(sidebar).not_to_contain_text("Live", timeout=LOAD_TIMEOUT_MS)
    assert page.evaluate("window.__notReloaded === true"), "the page was reloaded"
    page.close()
