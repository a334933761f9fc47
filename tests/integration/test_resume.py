"""A precompute run killed at arbitrary moments resumes and ends with the uninterrupted store."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from headwatch.analysis.store import open_store
from headwatch.analysis.store.format import LIST_COLUMNS, SCALAR_COLUMNS
from tests.integration.conftest import REPO, neox_model, perturb, run_cli

pytestmark = pytest.mark.slow


def n_listed(store: Path) -> int:
    try:
        return len(json.loads((store / "meta.json").read_text())["checkpoints"])
    except (OSError, ValueError):
        return 0


def test_killed_runs_resume_to_the_uninterrupted_store(tmp_path: Path) -> None:
    # 12 checkpoints of a model large enough that each takes a noticeable fraction of a second
    src = tmp_path / "src"
    model = neox_model(hidden=256, layers=4, heads=8)
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000, 3000, 4000, 5000]
    for step in steps:
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")
    (src / "step9000").mkdir()  # one permanently bad checkpoint: the failure list must resume too

    reference = tmp_path / "uninterrupted"
    assert run_cli("--source", str(src), "--out", str(reference)).returncode == 1

    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0"}
    rng = random.Random(0)
    kills = 0
    for _attempt in range(40):
        before = n_listed(out)
        if before >= len(steps) or kills >= 4:  # four random kills, then the final run below completes it
            break
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwatch.precompute", "--no-progress", "--source", str(src), "--out", str(out)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # wait until this run has committed something new, then kill it a random moment later
        # (within 50 ms, less than one checkpoint takes even on a fast machine): mid-computation,
        # mid-commit or between checkpoints
        deadline = time.monotonic() + 120
        while n_listed(out) <= before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.05))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        # after every kill the store opens and its two files agree
        store = open_store(out)
        assert len(store.steps) == n_listed(out)
    print(f"resume test: {kills} kills")
    assert kills >= 3, "the run finished before it could be interrupted; make checkpoints larger"

    final = run_cli("--source", str(src), "--out", str(out))
    assert final.returncode == 1 and "step9000" in final.stderr

    a, b = open_store(reference), open_store(out)
    assert a.steps.tolist() == b.steps.tolist() == steps
    assert a.meta.checkpoints == b.meta.checkpoints
    assert a.meta.failed == b.meta.failed
    for col in SCALAR_COLUMNS + LIST_COLUMNS:
        np.testing.assert_array_equal(a.array(col), b.array(col), err_msg=col)
    assert a.arrow.equals(b.arrow), "resumed heads.parquet differs from the uninterrupted one"
    # the overlaps of pairs split by a kill were recomputed by re-reading checkpoints, bit for bit
    assert a.meta.overlaps == b.meta.overlaps
    assert pq.read_table(reference / "overlaps.parquet").equals(pq.read_table(out / "overlaps.parquet"))
    assert not (tmp_path / ".killed.staging").exists() or n_listed(out) == len(steps)
