"""layers.parquet end to end: `--matrices`, the rows against numpy on the saved tensors, duplicates,
a rerun adding the table to a store made without it, and the reader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions, matrices_option
from tests.integration.conftest import run_cli

ROLES = {  # role -> GPT-NeoX tensor suffix
    "attn_qkv": "attention.query_key_value.weight",
    "attn_out": "attention.dense.weight",
    "mlp_in": "mlp.dense_h_to_4h.weight",
    "mlp_out": "mlp.dense_4h_to_h.weight",
}


def _options(matrices: str) -> RunOptions:
    return RunOptions(
        device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, matrices=matrices_option(matrices)
    )


def test_layer_rows_match_numpy_on_the_saved_weights(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    run_precompute(suite, out, _options("qk,ov,layers"))
    table = pd.read_parquet(out / LAYERS.file)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["matrices"] == ["qk", "ov", "layers"]
    # step 8 duplicates step 4: no rows of its own
    assert sorted(table["step"].unique()) == [0, 1, 4]
    assert len(table) == 3 * 2 * 4
    assert table.equals(table.sort_values(["step", "layer", "role"]).reset_index(drop=True))
    for step in (0, 4):
        state = load_file(suite / f"step{step}" / "model.safetensors")
        for layer in range(2):
            for role, suffix in ROLES.items():
                w = state[f"gpt_neox.layers.{layer}.{suffix}"].astype(np.float64)
                row = table[(table.step == step) & (table.layer == layer) & (table.role == role)].iloc[0]
                assert (row.rows, row.cols) == w.shape
                s = np.linalg.svd(w, compute_uv=False)
                np.testing.assert_allclose(row.sv, s, rtol=1e-6)  # float32 column
                assert row.frob_norm == pytest.approx(np.linalg.norm(w), rel=1e-9)
                assert row["std"] == pytest.approx(w.std(), rel=1e-5)
                c, x = min(w.shape) / max(w.shape), s**2 / (max(w.shape) * w.var())
                assert row.mp_spikes == int((x > (1 + np.sqrt(c)) ** 2).sum())
    # the reader hands out the same rows, at the store's training states
    store = open_store(out)
    assert store.has(LAYERS)
    got = store.frame(LAYERS, columns=["frob_norm"])
    assert got is not None
    assert list(got.columns) == ["step", "layer", "role", "frob_norm"]
    np.testing.assert_array_equal(got["frob_norm"].to_numpy(), table["frob_norm"].to_numpy())


def test_without_layers_no_table_and_a_rerun_adds_it(suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    run_precompute(suite, out, _options("qk"))
    assert not (out / LAYERS.file).exists()
    store = open_store(out)
    assert not store.has(LAYERS) and store.frame(LAYERS) is None
    heads_before = (out / "heads.parquet").read_bytes()
    run_precompute(suite, out, _options("qk,layers"))
    added = pd.read_parquet(out / LAYERS.file)
    assert sorted(added["step"].unique()) == [0, 1, 4]
    assert (out / "heads.parquet").read_bytes() == heads_before  # heads untouched by the fill
    fresh = tmp_path / "fresh"
    run_precompute(suite, fresh, _options("qk,layers"))
    pd.testing.assert_frame_equal(added, pd.read_parquet(fresh / LAYERS.file))


def test_bad_matrices_option_is_refused(suite: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="subset of qk,ov,layers"):
        matrices_option("qk,mlp")
    with pytest.raises(ValueError, match="subset"):
        matrices_option(" , ")
    result = run_cli("--source", str(suite), "--out", str(tmp_path / "s"), "--matrices", "qk,bogus")
    assert result.returncode == 2
    assert "unknown ['bogus']" in result.stderr
