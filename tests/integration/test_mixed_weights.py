"""Partial duplicates: a checkpoint that carries another revision's weight file (EleutherAI/pythia issue 206).

Sharded checkpoints saved by transformers; step 1's first shard is replaced by step 8's
(same file name, same tensors), so the whole of step 1 differs from every other
checkpoint but one of its files does not. Read from a local folder and through the
fake Hub (digests from the LFS metadata), the run must record which file is shared
with which step, keep step 1's rows, and leave it out of the store's training states.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.store import open_store
from headwatch.precompute.store.publish import dataset_card
from tests.integration.conftest import make_suite, run_cli
from tests.integration.test_hub import base_env, run

STEPS = [0, 1, 4, 8]


@pytest.fixture(scope="module")
def mixed_suite(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("mixed") / "suite"
    make_suite(root, STEPS, max_shard_size="40KB")
    shards = sorted(p.name for p in (root / "step1").glob("model-*.safetensors"))
    assert len(shards) >= 2, shards  # the test needs a sharded checkpoint
    first = shards[0]
    shutil.copyfile(root / "step8" / first, root / "step1" / first)
    return root, first


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_store(out: Path, suite: Path, first: str, *, sha256_source: str) -> None:
    meta = json.loads((out / "meta.json").read_text())
    by_step = {c["step"]: c for c in meta["checkpoints"]}
    assert sorted(by_step) == STEPS and all(c["duplicate_of"] is None for c in by_step.values())
    digest = sha256(suite / "step8" / first)
    assert by_step[1]["shared_files"] == [{"file": first, "step": 8, "other_file": first, "sha256": digest}]
    assert all(not by_step[s]["shared_files"] for s in (0, 4, 8))
    assert {c["sha256_source"] for c in by_step.values()} == {sha256_source}
    store = open_store(out)
    assert store.steps.tolist() == [0, 4, 8]  # step 1 is not a training state ...
    shown = store.view(include_mixed=True)
    assert shown.steps.tolist() == STEPS  # ... unless asked for; its rows are there
    np.testing.assert_array_equal(shown.array("std")[[0, 2, 3]], store.array("std"))
    assert store.hidden_steps == [(1, f"step 1 carries step 8's {first}")]
    # singular-vector overlaps exist between consecutive steps in both views: 0->4 spans hidden step 1
    for view in (store, shown):
        found = view.overlaps(0, 0)
        assert found is not None
        o_u, o_v = found
        assert o_u.shape[0] == len(view.steps) - 1 and np.isfinite(o_u).all() and np.isfinite(o_v).all()
    card = dataset_card(out)
    assert f"{first} = step 8 {first}" in card and "mixed weights" in card


def test_a_shared_shard_is_recorded_from_local_folders(mixed_suite, tmp_path: Path) -> None:
    suite, first = mixed_suite
    out = tmp_path / "store"
    res = run_cli("--source", str(suite), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "step 1 (step1) mixes weights of two revisions" in res.stderr
    check_store(out, suite, first, sha256_source="file")
    # the mark follows from the files: a run that adds the owner later marks the earlier checkpoint then
    again = tmp_path / "again"
    assert run_cli("--source", str(suite), "--out", str(again), "--revisions", "step0,step1,step4").returncode == 0
    assert open_store(again).steps.tolist() == [0, 1, 4]
    assert run_cli("--source", str(suite), "--out", str(again)).returncode == 0
    check_store(again, suite, first, sha256_source="file")


def test_a_shared_shard_is_recorded_from_hub_lfs_metadata(mixed_suite, tmp_path: Path) -> None:
    suite, first = mixed_suite
    repo = Repo()
    for step in STEPS:
        repo.add(f"step{step}", folder_files(suite / f"step{step}"))
    with FakeHub() as hub:
        hub.repos["org/mixed"] = repo
        res = run(
            "--source", "org/mixed", "--out", str(tmp_path / "hub-store"), env=base_env(tmp_path / "home", HF_ENDPOINT=hub.url)
        )
    assert res.returncode == 0, res.stderr
    check_store(tmp_path / "hub-store", suite, first, sha256_source="hub")
