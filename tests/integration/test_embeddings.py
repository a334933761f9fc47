"""precompute.lenses.embeddings end to end: real UMAP into a synthetic store, and UMAP on planted trajectory types.

The first UMAP call in a process compiles numba code (~20-30 s); both tests share it.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from benchmarks.synthetic_store import write_synthetic_store
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS
from headwatch.analysis.trajectories.maps import EmbeddingSettings, embed
from headwatch.precompute.lenses.embeddings import DEFAULT_STATISTICS, main

pytestmark = pytest.mark.slow


def test_planted_trajectory_types_separate_on_the_map():
    """Two kinds of heads (an early and a late transition, random levels and noise) land in two groups."""
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, 60)
    n = 40
    early = 1 / (1 + np.exp(-(t - 0.2) * 30))
    late = 1 / (1 + np.exp(-(t - 0.8) * 30))
    curves = np.concatenate([early + 0.05 * rng.normal(size=(n, 60)), late + 0.05 * rng.normal(size=(n, 60))])
    curves = curves * rng.uniform(0.5, 5, (2 * n, 1)) + rng.uniform(-3, 3, (2 * n, 1))  # levels differ per head
    values = curves.T.reshape(60, 8, 10)  # (S, layers, heads): heads are rows of the layer-major order
    xy, neighbors = embed(values, normalisation="zscore", settings=EmbeddingSettings(n_neighbors=10, knn_k=5))
    group = np.repeat([0, 1], n)
    d = ((xy[:, None, :] - xy[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    assert (group[d.argmin(axis=1)] == group).mean() >= 0.95  # nearest point on the map is of the same kind
    assert (group[neighbors] == group[:, None]).mean() >= 0.95  # and so are the trajectory-space neighbours


def test_add_embeddings_writes_table_and_settings_and_keeps_the_rest(tmp_path):
    path = write_synthetic_store(tmp_path / "run", n_layers=3, n_heads=4, d_head=8, d_model=32, n_checkpoints=10)
    before = open_store(path)
    assert main([str(path), "--knn-k", "3"]) == 0
    after = open_store(path)
    assert after.arrow.equals(before.arrow)  # heads.parquet untouched
    table = pd.read_parquet(path / EMBEDDINGS.file)
    assert len(table) == len(DEFAULT_STATISTICS) * 12 * 2  # one map per statistic for each of qk and ov
    assert set(table["statistic"]) == set(DEFAULT_STATISTICS) and set(table["normalisation"]) == {"zscore"}
    assert set(table["matrix"]) == {"qk", "ov"}
    info = json.loads((path / "meta.json").read_text())["embeddings"]
    assert info["settings"]["knn_k"] == 3 and info["method"] == "umap" and info["steps"] == before.steps.tolist()
    assert info["statistics"] == list(DEFAULT_STATISTICS) and info["software"]["umap-learn"]
    # neighbours: exact kNN of the per-head z-scored trajectories of each matrix, computed here by brute force
    for matrix in ("qk", "ov"):
        std = before.array("std", matrix=matrix)
        traj = std.reshape(len(before.steps), -1).T
        z = (traj - traj.mean(1, keepdims=True)) / traj.std(1, keepdims=True)
        rows = table[(table["statistic"] == "std") & (table["matrix"] == matrix)].sort_values(["layer", "head"])
        for i, nb in enumerate(rows["neighbors"]):
            d = ((z - z[i]) ** 2).sum(1)
            d[i] = np.inf
            assert list(nb) == list(np.argsort(d, kind="stable")[:3])
        assert np.isfinite(rows[["x", "y"]].to_numpy()).all()
    # same settings, same map (UMAP with a seed is deterministic)
    again = tmp_path / "again"
    write_synthetic_store(again, n_layers=3, n_heads=4, d_head=8, d_model=32, n_checkpoints=10)
    main([str(again), "--knn-k", "3"])
    assert np.allclose(pd.read_parquet(again / EMBEDDINGS.file)[["x", "y"]], table[["x", "y"]])


def test_the_maps_record_survives_the_lenses_that_commit_after_them(tmp_path):
    """A run whose later lenses commit the store again (the essential dynamics do, after the maps, as in the passes
    that built the shipped stores) keeps meta.json's record of the maps it made, so a second pass finds them
    current and leaves them as they are, and the Trajectory map draws them from the store."""
    from headwatch.analysis.store import read_meta
    from tests.integration.conftest import run_cli
    from tests.integration.test_forward_lens import byte_run

    run = byte_run(tmp_path, [0, 1, 2, 4, 8])
    out = tmp_path / "store"
    args = ("--source", str(run), "--out", str(out), "--lenses", "essential", "--eval-sequences", "4", "--eval-length", "32")
    done = run_cli(*args, embeddings=True)
    assert done.returncode == 0, done.stderr
    assert len(pd.read_parquet(out / EMBEDDINGS.file)) == len(DEFAULT_STATISTICS) * 2 * 4 * 2  # 2 matrices, 2 x 4 heads
    meta = read_meta(out)
    assert meta.essential is not None and meta.stages is not None  # the lenses committed after the maps ran
    record = meta.embeddings
    assert record is not None, "meta.json lost the maps' record"
    assert record["steps"] == [0, 1, 2, 4, 8] and record["statistics"] == list(DEFAULT_STATISTICS)
    assert record["settings"] == EmbeddingSettings().as_dict() and record["matrices"] == ["qk", "ov"]
    written = (out / EMBEDDINGS.file).stat().st_mtime_ns
    again = run_cli(*args, embeddings=True)  # nothing new: the maps are current and stay as they are
    assert again.returncode == 0, again.stderr
    assert (out / EMBEDDINGS.file).stat().st_mtime_ns == written
    assert read_meta(out).embeddings == record
