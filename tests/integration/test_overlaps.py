"""Singular-vector overlaps between consecutive checkpoints (``overlaps.parquet``), end to end.

The reference is a dense numpy SVD of each head's W_QK, rebuilt from the saved state
dict (tests/integration/test_precompute.py's `reference_heads`), never the pipeline's
own QR-core vectors.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import load_file

from headwatch.analysis.store import Store, open_store
from tests.integration.conftest import make_suite, run_cli
from tests.integration.test_precompute import reference_heads, reference_ov_heads

STEPS = [0, 1, 2, 4, 8, 16]
N_LAYERS, N_HEADS, K = 2, 4, 8


@pytest.fixture
def six(tmp_path: Path) -> Path:
    return make_suite(tmp_path / "six", STEPS)


def dense_matrices(suite: Path, step: int, matrix: str = "qk") -> list[list[np.ndarray]]:
    state = load_file(suite / f"step{step}" / "model.safetensors")
    return (reference_heads if matrix == "qk" else reference_ov_heads)(state, N_LAYERS, N_HEADS)


def stored_overlaps(store: Store, layer: int, head: int, *, matrix: str = "qk") -> tuple[np.ndarray, np.ndarray]:
    """``store.overlaps`` of a head the test expects the store to have."""
    found = store.overlaps(layer, head, matrix=matrix)
    assert found is not None, f"{store.path} has no overlaps of L{layer} H{head} ({matrix})"
    return found


def dense_vectors(suite: Path, step: int, matrix: str = "qk") -> list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    out: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = []
    for row in dense_matrices(suite, step, matrix):
        out.append([])
        for w in row:
            u, s, vt = np.linalg.svd(w)
            out[-1].append((s, u[:, :K], vt[:K].T))
    return out


@pytest.mark.parametrize("matrix", ["qk", "ov"])
def test_overlaps_match_dense_svd_of_consecutive_checkpoints(six: Path, tmp_path: Path, matrix: str) -> None:
    out = tmp_path / "store"
    res = run_cli("--source", str(six), "--out", str(out))
    assert res.returncode == 0, res.stderr
    store = open_store(out)
    assert store.meta.overlap_k == K and store.meta.matrices == ["qk", "ov"]
    table = pq.read_table(out / "overlaps.parquet")
    assert table.num_rows == 2 * (len(STEPS) - 1) * N_LAYERS * N_HEADS
    assert pq.ParquetFile(out / "overlaps.parquet").metadata.num_row_groups == 2 * N_LAYERS  # one per matrix and layer
    dense = {step: dense_vectors(six, step, matrix) for step in STEPS}
    # the relative change to the next checkpoint against dense numpy
    change = store.array("rel_change", matrix=matrix)
    assert np.isnan(change[-1]).all()
    for t, (a, b) in enumerate(itertools.pairwise(STEPS)):
        w0, w1 = dense_matrices(six, a, matrix), dense_matrices(six, b, matrix)
        want = [[np.linalg.norm(w1[i][j] - w0[i][j]) / np.linalg.norm(w0[i][j]) for j in range(N_HEADS)] for i in range(N_LAYERS)]
        np.testing.assert_allclose(change[t], want, rtol=1e-5, atol=1e-7)
        assert np.min(want) > 1e-3  # the checkpoints differ: a zero change would not pass
    for layer in range(N_LAYERS):
        for head in range(N_HEADS):
            o_u, o_v = stored_overlaps(store, layer, head, matrix=matrix)
            assert o_u.shape == o_v.shape == (len(STEPS) - 1, K, K)
            for t, (a, b) in enumerate(itertools.pairwise(STEPS)):
                s0, u0, v0 = dense[a][layer][head]
                s1, u1, v1 = dense[b][layer][head]
                # vectors of nearly equal singular values are not defined one by one: compare only
                # rows/columns whose values are separated from their neighbours
                ok0 = _separated(s0)
                ok1 = _separated(s1)
                mask = np.outer(ok0, ok1)
                np.testing.assert_allclose(o_u[t][mask], np.abs(u0.T @ u1)[mask], atol=2e-5)
                np.testing.assert_allclose(o_v[t][mask], np.abs(v0.T @ v1)[mask], atol=2e-5)
                assert mask.sum() >= K * K // 2


def _separated(s: np.ndarray, rel: float = 1e-3) -> np.ndarray:
    """For each of the first K values, whether it is at least ``rel`` away from its neighbours."""
    gaps = np.abs(np.diff(s[: K + 1])) / s[0]
    left = np.concatenate([[np.inf], gaps[: K - 1]])
    return (gaps[:K] > rel) & (left > rel)


def test_filling_in_and_resuming_give_the_uninterrupted_overlaps(six: Path, tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    assert run_cli("--source", str(six), "--out", str(reference)).returncode == 0
    expected = pq.read_table(reference / "overlaps.parquet")

    # every other checkpoint first: pairs (0,2), (2,8), (8,16); then the rest, which splits each of them
    out = tmp_path / "sparse"
    assert run_cli("--source", str(six), "--out", str(out), "--revisions", "step0,step2,step8,step16").returncode == 0
    first = pq.read_table(out / "overlaps.parquet")
    assert sorted(set(zip(first["prev_step"].to_pylist(), first["step"].to_pylist(), strict=True))) == [(0, 2), (2, 8), (8, 16)]
    res = run_cli("--source", str(six), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert pq.read_table(out / "overlaps.parquet").equals(expected)

    # a resumed run re-reads only the last checkpoint of the previous run: the first new one's vectors are held
    resumed = tmp_path / "resumed"
    assert run_cli("--source", str(six), "--out", str(resumed), "--revisions", "step0,step1,step2").returncode == 0
    res = run_cli("--source", str(six), "--out", str(resumed))
    assert res.returncode == 0, res.stderr
    assert "1 checkpoint pairs lack singular-vector overlaps; re-reading 1 checkpoints" in res.stderr
    assert pq.read_table(resumed / "overlaps.parquet").equals(expected)

    # a store written without overlaps gets them on its next run, re-reading its checkpoints
    old = tmp_path / "old"
    assert run_cli("--source", str(six), "--out", str(old), "--overlap-k", "0").returncode == 0
    assert not (old / "overlaps.parquet").exists() and open_store(old).meta.overlaps is None
    assert open_store(old).overlaps(0, 0) is None
    res = run_cli("--source", str(six), "--out", str(old))
    assert res.returncode == 0, res.stderr
    assert "re-reading 6 checkpoints" in res.stderr
    assert pq.read_table(old / "overlaps.parquet").equals(expected)
    assert open_store(old).meta.overlaps == open_store(reference).meta.overlaps


def test_a_checkpoint_that_cannot_be_reread_leaves_its_pairs_out(six: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    assert run_cli("--source", str(six), "--out", str(out), "--overlap-k", "0").returncode == 0
    shutil.rmtree(six / "step4")  # gone from the source after its statistics were computed
    res = run_cli("--source", str(six), "--out", str(out))
    assert res.returncode == 0, res.stderr  # the statistics are complete; only two overlap pairs are missing
    assert "step4" in res.stderr and "2 checkpoint pairs have no singular-vector overlaps" in res.stderr
    store = open_store(out)
    assert store.steps.tolist() == STEPS  # nothing computed was lost
    o_u, _ = stored_overlaps(store, 1, 2)
    missing = [t for t in range(len(STEPS) - 1) if np.isnan(o_u[t]).all()]
    assert [(STEPS[t], STEPS[t + 1]) for t in missing] == [(2, 4), (4, 8)]


def test_changed_weights_are_not_mixed_into_overlaps(six: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    assert run_cli("--source", str(six), "--out", str(out), "--overlap-k", "0").returncode == 0
    shutil.rmtree(six / "step8")
    shutil.copytree(six / "step16", six / "step8")  # different weights under the same name
    res = run_cli("--source", str(six), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "weights changed since its statistics were computed" in res.stderr


def test_overlap_k_is_capped_at_d_head(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", [0, 1])  # d_head 16
    out = tmp_path / "store"
    assert run_cli("--source", str(suite), "--out", str(out), "--overlap-k", "40").returncode == 0
    store = open_store(out)
    assert store.meta.overlap_k == 16
    o_u, o_v = stored_overlaps(store, 0, 0)
    assert o_u.shape == (1, 16, 16)
    # each row of |U0^T U1| holds the components of u_a(t) in the column space at t+1: squared norm <= 1
    assert ((o_u[0] ** 2).sum(axis=1) <= 1 + 1e-5).all() and ((o_v[0] ** 2).sum(axis=1) <= 1 + 1e-5).all()


def test_a_later_run_keeps_the_stores_k_and_overlap_k_0_keeps_the_overlaps(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", [0, 1, 2, 4])
    out = tmp_path / "store"
    assert run_cli("--source", str(suite), "--out", str(out), "--overlap-k", "4", "--revisions", "step0,step1").returncode == 0
    # a plain rerun continues with the store's K = 4 and re-reads only what the new pairs need
    res = run_cli("--source", str(suite), "--out", str(out), "--revisions", "step0,step1,step2")
    assert res.returncode == 0, res.stderr
    assert open_store(out).meta.overlap_k == 4 and "recomputing every pair" not in res.stderr
    assert stored_overlaps(open_store(out), 0, 0)[0].shape == (2, 4, 4)
    # --overlap-k 0 computes nothing new and keeps what is there
    before = pq.read_table(out / "overlaps.parquet")
    assert run_cli("--source", str(suite), "--out", str(out), "--overlap-k", "0").returncode == 0
    assert pq.read_table(out / "overlaps.parquet").equals(before)
    o_u, _ = stored_overlaps(open_store(out), 0, 0)
    assert np.isfinite(o_u[:2]).all() and np.isnan(o_u[2]).all()  # pair (2, 4) left for a later run
    # an explicit other K recomputes every pair, and says so
    res = run_cli("--source", str(suite), "--out", str(out), "--overlap-k", "2")
    assert res.returncode == 0 and "recomputing every pair" in res.stderr
    o_u, _ = stored_overlaps(open_store(out), 0, 0)
    assert o_u.shape == (3, 2, 2) and np.isfinite(o_u).all()


def test_a_corrupt_overlaps_file_is_rebuilt_from_the_checkpoints(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", [0, 1, 2])
    out = tmp_path / "store"
    assert run_cli("--source", str(suite), "--out", str(out)).returncode == 0
    expected = pq.read_table(out / "overlaps.parquet")
    heads = (out / "heads.parquet").read_bytes()
    (out / "overlaps.parquet").write_bytes(b"not parquet")
    res = run_cli("--source", str(suite), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "cannot read" in res.stderr and "recomputing the overlaps" in res.stderr
    assert pq.read_table(out / "overlaps.parquet").equals(expected)
    assert (out / "heads.parquet").read_bytes() == heads  # the statistics untouched
