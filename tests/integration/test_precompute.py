"""``python -m headwatch.precompute`` end to end on small checkpoints saved by transformers.

References are independent of the pipeline: per-head matrices are rebuilt in
numpy from the saved state dict, statistics come from numpy/scipy, and file
digests from hashlib.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from scipy import stats as sps

from headwatch.analysis.errors import SchemaVersionError
from headwatch.analysis.store import open_store
from tests.integration.conftest import make_suite, neox_model, perturb, run_cli, save_bin


def reference_heads(state: dict[str, np.ndarray], n_layers: int, n_heads: int) -> list[list[np.ndarray]]:
    """Dense W_QK per (layer, head) in float64, from the fused NeoX weight split per head."""
    out = []
    for layer in range(n_layers):
        qkv = state[f"gpt_neox.layers.{layer}.attention.query_key_value.weight"].astype(np.float64)
        d_model = qkv.shape[1]
        d_head = d_model // n_heads
        per_head = qkv.reshape(n_heads, 3, d_head, d_model)
        out.append([per_head[h, 0].T @ per_head[h, 1] for h in range(n_heads)])
    return out


def reference_ov_heads(state: dict[str, np.ndarray], n_layers: int, n_heads: int) -> list[list[np.ndarray]]:
    """Dense W_OV = W_O[:, h] W_V,h per (layer, head) in float64: V rows of the fused NeoX weight split
    per head, W_O[:, h] the head's input columns of attention.dense (an nn.Linear, (out, in))."""
    out = []
    for layer in range(n_layers):
        qkv = state[f"gpt_neox.layers.{layer}.attention.query_key_value.weight"].astype(np.float64)
        w_o = state[f"gpt_neox.layers.{layer}.attention.dense.weight"].astype(np.float64)
        d_model = qkv.shape[1]
        d_head = d_model // n_heads
        v = qkv.reshape(n_heads, 3, d_head, d_model)[:, 2]
        out.append([w_o[:, h * d_head : (h + 1) * d_head] @ v[h] for h in range(n_heads)])
    return out


def test_store_matches_numpy_reference(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    res = run_cli("--source", str(suite), "--out", str(out))
    assert res.returncode == 0, res.stderr
    store = open_store(out)
    assert store.steps.tolist() == [0, 1, 4]
    assert (store.n_layers, store.n_heads, store.d_head) == (2, 4, 16)
    for i, step in enumerate(store.steps):
        state = load_file(suite / f"step{step}" / "model.safetensors")
        heads = reference_heads(state, 2, 4)
        for layer in range(2):
            for head in range(4):
                w = heads[layer][head]
                sv = np.linalg.svd(w, compute_uv=False)[:16]
                np.testing.assert_allclose(store.array("sv")[i, layer, head], sv, rtol=1e-5)
                x = w.ravel()
                np.testing.assert_allclose(store.array("std")[i, layer, head], x.std(), rtol=1e-5)
                np.testing.assert_allclose(store.array("mean")[i, layer, head], x.mean(), atol=1e-6 * x.std())
                np.testing.assert_allclose(store.array("kurtosis")[i, layer, head], sps.kurtosis(x), atol=1e-4)
                np.testing.assert_allclose(store.array("frob_norm")[i, layer, head], np.linalg.norm(w), rtol=1e-5)
    # the table and the dense arrays index the same rows
    df = store.table
    row = df[(df["step"] == 4) & (df["layer"] == 1) & (df["head"] == 3) & (df["matrix"] == "qk")].iloc[0]
    assert row["std"] == store.array("std")[2, 1, 3]
    np.testing.assert_array_equal(row["sv"], store.array("sv")[2, 1, 3])
    assert len(row["hist_z"]) == 202 and abs(sum(row["hist_z"]) - 1) < 1e-6
    assert "%" in res.stderr or "computed" in res.stderr


def test_weight_files_are_hashed_and_duplicates_marked(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    assert run_cli("--source", str(suite), "--out", str(out)).returncode == 0
    meta = json.loads((out / "meta.json").read_text())
    by_step = {c["step"]: c for c in meta["checkpoints"]}
    assert sorted(by_step) == [0, 1, 4, 8]
    for step, entry in by_step.items():
        digest = hashlib.sha256((suite / f"step{step}" / "model.safetensors").read_bytes()).hexdigest()
        assert entry["sha256"] == digest
        assert entry["revision"] == f"step{step}"
    assert by_step[8]["duplicate_of"] == 4
    assert all(by_step[s]["duplicate_of"] is None for s in (0, 1, 4))
    assert 8 not in set(open_store(out).table["step"])


@pytest.mark.parametrize(
    "fmt",
    ["safetensors-sharded", "bin", "bin-sharded"],
)
def test_every_weight_format_gives_the_same_statistics(fmt: str, tmp_path: Path) -> None:
    model = neox_model()
    perturb(model, 3)
    single = tmp_path / "single" / "step3"
    model.save_pretrained(single)
    other = tmp_path / fmt / "step3"
    if fmt == "safetensors-sharded":
        model.save_pretrained(other, max_shard_size="20KB")
        assert (other / "model.safetensors.index.json").is_file()
    elif fmt == "bin":
        save_bin(model, other)
    else:
        save_bin(model, other, shards=3)
    for name in ("single", fmt):
        res = run_cli("--source", str(tmp_path / name), "--out", str(tmp_path / f"out-{name}"))
        assert res.returncode == 0, res.stderr
    a, b = open_store(tmp_path / "out-single"), open_store(tmp_path / f"out-{fmt}")
    for col in ("std", "kurtosis", "kl_gauss", "stable_rank", "sv", "hist_z"):
        np.testing.assert_array_equal(a.array(col), b.array(col))


def test_bad_checkpoints_are_reported_skipped_and_retried(suite: Path, tmp_path: Path) -> None:
    (suite / "step2").mkdir()  # a checkpoint folder with no weights
    (suite / "step2" / "config.json").write_text((suite / "step0" / "config.json").read_text())
    weights = suite / "step1" / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])  # truncated download
    out = tmp_path / "store"
    res = run_cli("--source", str(suite), "--out", str(out))
    assert res.returncode == 1
    assert "step2" in res.stderr and "no weights" in res.stderr
    assert "step1" in res.stderr and "truncated" in res.stderr
    store = open_store(out)  # consistent, no partial record
    assert store.steps.tolist() == [0, 4]
    assert [f.step for f in store.meta.failed] == [1, 2]
    # repair the download and drop the empty folder: the next run picks step 1 up
    weights.write_bytes(good)
    shutil.rmtree(suite / "step2")
    res = run_cli("--source", str(suite), "--out", str(out))
    assert res.returncode == 0, res.stderr
    store = open_store(out)
    assert store.steps.tolist() == [0, 1, 4]
    assert store.meta.failed == [] or [f.step for f in store.meta.failed] == [2]


def test_non_finite_weights_are_refused(tmp_path: Path) -> None:
    model = neox_model()
    with __import__("torch").no_grad():
        model.gpt_neox.layers[1].attention.query_key_value.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path / "src" / "step5")
    res = run_cli("--source", str(tmp_path / "src"), "--out", str(tmp_path / "store"))
    assert res.returncode == 1
    assert "step5" in res.stderr and "non-finite" in res.stderr and "layer 1" in res.stderr


def test_unknown_architecture_is_refused_by_name(suite: Path, tmp_path: Path) -> None:
    for cfg in suite.glob("step*/config.json"):
        cfg.write_text(cfg.read_text().replace('"gpt_neox"', '"bert"'))
    res = run_cli("--source", str(suite), "--out", str(tmp_path / "store"))
    assert res.returncode == 2
    assert "'bert'" in res.stderr and "not supported" in res.stderr
    assert not (tmp_path / "store").exists()


def test_store_from_newer_schema_is_refused_and_untouched(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    make_suite(tmp_path / "first", [0])
    assert run_cli("--source", str(tmp_path / "first"), "--out", str(out)).returncode == 0
    meta = json.loads((out / "meta.json").read_text())
    meta["schema_version"] = 99
    (out / "meta.json").write_text(json.dumps(meta))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    res = run_cli("--source", str(suite), "--out", str(out))
    assert res.returncode == 2
    assert "schema_version 99" in res.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(SchemaVersionError):
        open_store(out)


def test_store_of_another_model_is_refused(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    assert run_cli("--source", str(suite), "--out", str(out)).returncode == 0
    other = tmp_path / "other" / "step0"
    neox_model(hidden=32, heads=2).save_pretrained(other)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    res = run_cli("--source", str(other.parent), "--out", str(out))
    assert res.returncode == 2 and "is the store of another model" in res.stderr
    # both models, named, with their geometry
    assert (
        "suite (gpt_neox, 2 layers of 4 heads, d_model 64, d_head 16), not other (gpt_neox, 2 layers of 2 heads, "
        "d_model 32, d_head 16)" in res.stderr
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_missing_source_and_empty_source_give_clear_errors(tmp_path: Path) -> None:
    res = run_cli("--source", str(tmp_path / "nope"), "--out", str(tmp_path / "s"))
    assert res.returncode == 2 and "is not a directory" in res.stderr
    (tmp_path / "empty" / "final").mkdir(parents=True)
    res = run_cli("--source", str(tmp_path / "empty"), "--out", str(tmp_path / "s"))
    assert res.returncode == 2 and "step<N>" in res.stderr and "final" in res.stderr


def test_null_model_columns_are_stored_and_old_stores_resume(suite: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from headwatch.analysis.rmt.nullmodel import kl_null, null_expectations
    from headwatch.analysis.store.format import NULL_COLUMNS

    out = tmp_path / "store"
    assert run_cli("--source", str(suite), "--out", str(out), "--revisions", "step0,step1").returncode == 0
    store = open_store(out)
    assert set(NULL_COLUMNS) <= set(store.arrow.column_names)
    sv = store.array("sv").astype(np.float64)
    np.testing.assert_allclose(store.array("kl_null"), kl_null(sv**2, 16 / 64), atol=1e-12)
    expected = null_expectations(64, 16)
    np.testing.assert_allclose(store.array("stable_rank_over_null"), store.array("stable_rank") / expected["stable_rank"])
    # a store written before these columns existed: drop them, then resume it
    table = pq.read_table(out / "heads.parquet")
    pq.write_table(table.drop_columns(list(NULL_COLUMNS)), out / "heads.parquet")
    assert open_store(out).array("kl_null").shape == (2, 2, 4)  # the reader derives them
    res = run_cli("--source", str(suite), "--out", str(out))
    assert res.returncode == 0, res.stderr
    resumed = open_store(out)
    assert resumed.steps.tolist() == [0, 1, 4]
    assert set(NULL_COLUMNS) <= set(resumed.arrow.column_names)
    np.testing.assert_allclose(resumed.array("kl_null")[:2], store.array("kl_null"), atol=1e-12)
