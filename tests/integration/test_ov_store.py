"""OV rows, circuit columns and --matrices end to end: a new store, a schema-version-2 store that a
rerun completes, one whose checkpoint is gone, and the option's errors.

The reference for values is dense numpy (tests/integration/test_precompute.py's reference heads);
the reference for a completed old store is a fresh run of the same checkpoints.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import load_file

from headwatch.analysis.store import open_store
from headwatch.analysis.store.format import CIRCUIT_COLUMNS, HEADS
from headwatch.analysis.store.lenses.overlaps import OVERLAPS
from tests.integration.conftest import make_suite, run_cli
from tests.integration.test_precompute import reference_heads, reference_ov_heads

STEPS = [0, 1, 4]
N_LAYERS, N_HEADS = 2, 4


@pytest.fixture
def three(tmp_path: Path) -> Path:
    return make_suite(tmp_path / "three", STEPS)


def _dense_circuit(w: np.ndarray) -> tuple[float, float]:
    sym = np.sum(((w + w.T) / 2) ** 2) / np.sum(w**2)
    mu = np.linalg.eigvals(w)
    mu = mu[np.abs(mu) > 1e-9 * np.abs(mu).max()]
    return float(sym), float(mu.real.sum() / np.abs(mu).sum())


def _as_version_2(store: Path) -> None:
    """Rewrite a qk-only store as schema version 2 wrote it: no circuit columns, overlaps without
    ``matrix`` and ``rel_change``."""
    heads = pq.read_table(store / "heads.parquet")
    pq.write_table(heads.drop_columns(list(CIRCUIT_COLUMNS)), store / "heads.parquet")
    overlaps = pq.read_table(store / "overlaps.parquet")
    pq.write_table(overlaps.drop_columns(["matrix", "rel_change"]), store / "overlaps.parquet")
    raw = json.loads((store / "meta.json").read_text())
    raw["schema_version"] = 2
    raw["settings"].pop("matrices")
    (store / "meta.json").write_text(json.dumps(raw))


def test_ov_rows_and_circuit_columns_match_dense_numpy(three: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    res = run_cli("--source", str(three), "--out", str(out))
    assert res.returncode == 0, res.stderr
    store = open_store(out)
    assert store.meta.matrices == ["qk", "ov"]
    assert store.meta.settings["matrices"] == ["qk", "ov", "layers"]
    for i, step in enumerate(STEPS):
        state = load_file(three / f"step{step}" / "model.safetensors")
        for matrix, reference in (("qk", reference_heads), ("ov", reference_ov_heads)):
            dense = reference(state, N_LAYERS, N_HEADS)
            for layer in range(N_LAYERS):
                for head in range(N_HEADS):
                    w = dense[layer][head]
                    sym, pos = _dense_circuit(w)
                    assert store.array("sym_frac", matrix=matrix)[i, layer, head] == pytest.approx(sym, abs=1e-5)
                    assert store.array("eig_positivity", matrix=matrix)[i, layer, head] == pytest.approx(pos, abs=1e-5)
                    np.testing.assert_allclose(
                        store.array("sv", matrix=matrix)[i, layer, head], np.linalg.svd(w, compute_uv=False)[:16], rtol=1e-5
                    )
                    assert store.array("std", matrix=matrix)[i, layer, head] == pytest.approx(w.std(), rel=1e-5)
    # qk and ov differ: a swapped extraction would not pass both
    assert not np.allclose(store.array("std", matrix="qk"), store.array("std", matrix="ov"))


def test_a_version_2_store_opens_and_a_rerun_completes_it_to_a_fresh_runs_store(three: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    assert run_cli("--source", str(three), "--out", str(fresh)).returncode == 0
    old = tmp_path / "old"
    res = run_cli("--source", str(three), "--out", str(old), "--matrices", "qk")
    assert res.returncode == 0, res.stderr
    _as_version_2(old)

    store = open_store(old)  # opens as version 3: qk only, circuit columns and rel_change NaN
    assert store.meta.schema_version == 2 and store.meta.upgraded and store.meta.matrices == ["qk"]
    assert np.isnan(store.array("sym_frac")).all() and np.isnan(store.array("rel_change")).all()
    assert np.isfinite(store.array("std")).all() and store.overlaps(0, 0) is not None
    with pytest.raises(KeyError, match="ov"):
        store.array("std", matrix="ov")

    # the upgrade command without checkpoints: version 3 files, NaN where weights are needed
    copy = tmp_path / "copy"
    shutil.copytree(old, copy)
    from headwatch.precompute.store.upgrade import upgrade_store

    assert upgrade_store(copy) is True
    assert pq.read_schema(copy / "heads.parquet").equals(HEADS.schema)
    assert pq.read_schema(copy / "overlaps.parquet").equals(OVERLAPS.schema)
    assert np.isnan(open_store(copy).array("eig_positivity")).all()

    # a rerun with the checkpoints adds ov and the missing columns: the same store as a fresh run
    res = run_cli("--source", str(three), "--out", str(old))
    assert res.returncode == 0, res.stderr
    assert "3 checkpoints already in the store were read again" in res.stderr
    done = open_store(old)
    assert done.meta.matrices == ["qk", "ov"] and not done.meta.upgraded
    for name in ("heads.parquet", "overlaps.parquet"):
        assert pq.read_table(old / name).equals(pq.read_table(fresh / name)), name
    # a further rerun has nothing to do
    res = run_cli("--source", str(three), "--out", str(old))
    assert res.returncode == 0 and "read again" not in res.stderr


def test_a_checkpoint_gone_from_the_source_keeps_nan_ov_rows(three: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    assert run_cli("--source", str(three), "--out", str(out), "--matrices", "qk").returncode == 0
    shutil.rmtree(three / "step1")
    res = run_cli("--source", str(three), "--out", str(out), "--matrices", "qk,ov")
    assert res.returncode == 0, res.stderr
    assert "step1" in res.stderr and "1 checkpoints could not be read again" in res.stderr
    store = open_store(out)
    assert store.meta.matrices == ["qk", "ov"]
    std = store.array("std", matrix="ov")
    assert np.isnan(std[1]).all() and np.isfinite(std[[0, 2]]).all()
    assert np.isfinite(store.array("std")).all()  # qk rows untouched


def test_matrices_option_errors_and_a_store_keeps_its_matrices(three: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    res = run_cli("--source", str(three), "--out", str(out), "--matrices", "qk,vo")
    assert res.returncode == 2 and "'vo'" in res.stderr and "qk,ov,layers" in res.stderr
    res = run_cli("--source", str(three), "--out", str(out), "--matrices", "layers", "--revisions", "step0")
    assert res.returncode == 2 and "per-head matrix" in res.stderr
    assert not out.exists()
    assert run_cli("--source", str(three), "--out", str(out), "--matrices", "ov", "--revisions", "step0").returncode == 0
    assert open_store(out).meta.matrices == ["ov"]
    # a later run asked for qk alone computes the store's ov as well
    res = run_cli("--source", str(three), "--out", str(out), "--matrices", "qk", "--revisions", "step0,step1")
    assert res.returncode == 0, res.stderr
    store = open_store(out)
    assert store.meta.matrices == ["qk", "ov"]
    assert np.isfinite(store.array("std", matrix="ov")).all() and np.isfinite(store.array("std", matrix="qk")).all()
