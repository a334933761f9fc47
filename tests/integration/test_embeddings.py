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
from headwatch.analysis.store.format import EMBEDDINGS
from headwatch.analysis.trajectories import EmbeddingSettings, embed
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
