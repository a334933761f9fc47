"""The similarity lens end to end: ``python -m headwatch.precompute --lenses similarity`` on tiny suites saved by
transformers, its pair statistics against dense float64 matrices of each model's own attention weights and
scipy.linalg.subspace_angles (GPT-NeoX, GPT-2, Llama with grouped-query attention), LayerNorm left unfolded,
the per-layer ultrametricity against analysis.weights.ultrametric on those dense values, resumed, added to a store
made without it, and refused where it cannot run."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import transformers

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.similarity import SIMILARITY, ULTRAMETRICITY, SimilarityOptions
from headwatch.analysis.weights.similarity import COLUMNS
from headwatch.analysis.weights.ultrametric import distance, ultrametric_shares
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
from tests.integration.conftest import perturb, run_cli
from tests.integration.test_composition_lens import family_suite, neox_suite, own_factors
from tests.unit.test_similarity import dense_similarity

NO_SPECIAL_TOKENS: dict[str, Any] = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
OPTIONS = RunOptions(
    device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, lenses=("similarity",), matrices=("qk", "ov")
)


def stored(store_path: Path) -> np.ndarray:
    """``(6, n_steps, layer_a, head_a, layer_b, head_b)`` through the store's one accessor."""
    store = open_store(store_path)
    columns = []
    for column in COLUMNS:
        values = store.dense(SIMILARITY, column)
        assert values is not None, (store_path, column)
        columns.append(values)
    return np.stack(columns)


def test_the_cli_writes_the_statistics_of_the_models_own_weights_resumes_and_a_store_gains_them(tmp_path: Path) -> None:
    steps = [0, 3]
    suite = neox_suite(tmp_path / "suite", steps)  # 3 layers x 4 heads, d_head 16, d_model 64
    out = tmp_path / "store"
    done = run_cli("--source", str(suite), "--out", str(out), "--lenses", "similarity")
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out / SIMILARITY.file)
    assert table.num_rows == len(steps) * math.comb(12, 2)  # every unordered pair of the 12 heads
    assert table.equals(SIMILARITY.sorted(table)) and table.schema.equals(SIMILARITY.schema)
    got = stored(out)
    assert got.shape == (6, 2, 3, 4, 3, 4)
    meta = open_store(out).meta.similarity
    assert meta is not None and meta["tolerance"] == 0.1 and meta["layernorm"].startswith("not folded")
    assert meta["expected"]["col_mean"] == 16 / 64 and meta["expected"]["frob_rms"] == 1 / 64
    for column in COLUMNS:  # random Gaussian heads of d_head 16 in d_model 64: mean cos^2 about 1/4
        if column.endswith(("col", "row")):
            assert meta["baseline"]["mean"][column] == pytest.approx(0.25, rel=0.03)
    ultra = pq.read_table(out / ULTRAMETRICITY.file)
    assert ultra.num_rows == len(steps) * 3 * 6 and ultra.equals(ULTRAMETRICITY.sorted(ultra))
    rows = ultra.to_pandas().set_index(["step", "layer", "distance"])
    for i, step in enumerate(steps):
        model = transformers.GPTNeoXForCausalLM.from_pretrained(suite / f"step{step}")
        w = own_factors(model)
        want = dense_similarity(*w)
        np.testing.assert_allclose(got[:, i], want, rtol=0, atol=1e-6)  # float32 in the store; NaN where a >= b
        # LayerNorm is not folded: the gains folded into the reading factors give other statistics
        gamma = np.stack(
            [layer.get_parameter("input_layernorm.weight").detach().double().numpy() for layer in model.gpt_neox.layers]
        )
        g = gamma[:, None, None, :]  # (n_layers, 1, 1, d_model)
        folded = dense_similarity(w[0] * g, w[1] * g, w[2], w[3] * g)
        assert np.nanmax(np.abs(folded - got[:, i])) > 0.05
        for c, column in enumerate(COLUMNS):
            for layer in range(3):
                d = distance(column.split("_", 1)[1], want[c, layer, :, layer, :])
                share, share_of_max, count = ultrametric_shares(d, 0.1)
                row = rows.loc[(step, layer, column)]
                assert row["triangles"] == count == 4
                assert row["share"] == share and row["share_of_max"] == share_of_max
                assert row["baseline"] == meta["baseline"]["share"][column]
                assert row["baseline_of_max"] == meta["baseline"]["share_of_max"][column]
    store = open_store(out)
    dense = store.dense(ULTRAMETRICITY, "share", at={"distance": "qk_frob"})
    assert dense is not None
    assert dense.shape == (2, 3) and np.array_equal(dense[1], rows.xs("qk_frob", level="distance").loc[3]["share"].to_numpy())

    # a rerun computes nothing and keeps the tables; a run without the lens keeps them too
    before = [(out / spec.file).read_bytes() for spec in (SIMILARITY, ULTRAMETRICITY)]
    assert run_precompute(suite, out, OPTIONS).computed == []
    run_precompute(suite, out, replace(OPTIONS, lenses=()))
    assert [(out / spec.file).read_bytes() for spec in (SIMILARITY, ULTRAMETRICITY)] == before

    # a store made without the lens gains it for every checkpoint it has, the same rows
    later = tmp_path / "later"
    run_precompute(suite, later, replace(OPTIONS, lenses=()))
    assert not (later / SIMILARITY.file).exists()
    report = run_precompute(suite, later, OPTIONS)
    assert report.computed == [] and report.lenses == {"similarity": steps}
    assert pq.read_table(later / SIMILARITY.file).equals(table)
    assert pq.read_table(later / ULTRAMETRICITY.file).equals(ultra)

    # resumed: a new checkpoint gets its rows in the pass over it
    perturb(model, 9)
    model.save_pretrained(suite / "step9")
    report = run_precompute(suite, out, OPTIONS)
    assert report.computed == [9]
    assert pq.read_table(out / SIMILARITY.file).num_rows == 3 * 66
    assert pq.read_table(out / ULTRAMETRICITY.file).num_rows == 3 * 18


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(
            lambda: transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, **NO_SPECIAL_TOKENS),
            id="gpt2",
        ),
        pytest.param(
            lambda: transformers.LlamaConfig(
                vocab_size=64,
                hidden_size=32,
                num_hidden_layers=2,
                intermediate_size=48,
                max_position_embeddings=64,
                num_attention_heads=4,
                num_key_value_heads=2,
                **NO_SPECIAL_TOKENS,
            ),
            id="llama_gqa",
        ),
    ],
)
def test_other_families_compare_their_own_weights(config, tmp_path: Path) -> None:
    suite = family_suite(tmp_path / "suite", config())
    run_precompute(suite, tmp_path / "store", OPTIONS)
    model = transformers.AutoModelForCausalLM.from_pretrained(suite / "step0")
    got = stored(tmp_path / "store")[:, 0]
    np.testing.assert_allclose(got, dense_similarity(*own_factors(model)), rtol=0, atol=1e-6)
    if model.config.model_type == "llama":  # query heads 0 and 1 share key and value head 0: the same W_K, W_V
        for column in ("qk_row", "ov_row"):
            assert got[COLUMNS.index(column), 0, 0, 0, 1] == pytest.approx(1.0, abs=1e-6)
            assert got[COLUMNS.index(column), 0, 1, 0, 2] < 0.99


def test_a_store_keeps_its_tolerance_and_refusals_come_before_anything_is_written(tmp_path: Path) -> None:
    suite = neox_suite(tmp_path / "suite", [0])
    store = tmp_path / "store"
    run_precompute(suite, store, replace(OPTIONS, lens_options={"similarity": SimilarityOptions(tolerance=0.25)}))
    recorded = open_store(store).meta.similarity
    assert recorded is not None and recorded["tolerance"] == 0.25
    with pytest.raises(ValueError, match=r"--similarity-tolerance 0\.25"):
        run_precompute(suite, store, OPTIONS)
    given = run_cli("--source", str(suite), "--out", str(tmp_path / "a"), "--lenses", "similarity", "--matrices", "qk")
    assert given.returncode != 0 and "add ov to --matrices" in given.stderr
    given = run_cli(
        "--source", str(suite), "--out", str(tmp_path / "b"), "--lenses", "similarity", "--similarity-tolerance", "-1"
    )
    assert given.returncode != 0 and "--similarity-tolerance -1" in given.stderr
    given = run_cli("--source", str(suite), "--out", str(tmp_path / "c"), "--similarity-tolerance", "0.2")
    assert given.returncode == 2 and "add --lenses similarity" in given.stderr
    assert not any((tmp_path / name).exists() for name in "abc")
