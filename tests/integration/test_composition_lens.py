"""The composition lens end to end: ``python -m headwatch.precompute --lenses composition`` on tiny suites saved by
transformers, its scores against dense float64 products of each model's own attention weights
(GPT-NeoX, GPT-2, Llama with grouped-query attention), LayerNorm left unfolded, resumed, added to a
store made without it, restricted with ``--composition-top``, and refused where it cannot run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import transformers

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.composition import COMPOSITION, CompositionOptions
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
from tests.integration.conftest import neox_model, perturb, run_cli
from tests.unit.test_composition import dense_scores

NO_SPECIAL_TOKENS: dict[str, Any] = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
OPTIONS = RunOptions(
    device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, lenses=("composition",), matrices=("qk", "ov")
)


def neox_suite(root: Path, steps: list[int]) -> Path:
    """A 3-layer GPT-NeoX per step, whose attention LayerNorm gains are far from uniform."""
    model = neox_model(layers=3)
    gen = torch.Generator().manual_seed(5)
    for step in steps:
        perturb(model, step)
        with torch.no_grad():
            for layer in model.gpt_neox.layers:
                layer.input_layernorm.weight.copy_(0.2 + 2.8 * torch.rand(layer.input_layernorm.weight.shape, generator=gen))
        model.save_pretrained(root / f"step{step}")
    return root


def own_factors(model) -> list[np.ndarray]:
    """``(W_Q, W_K, W_O^T, W_V)`` per head, each ``(n_layers, n_heads, d_head, d_model)`` float64, read
    from the model's own modules as each family lays them out (written here, apart from headwatch.families)."""
    config = model.config
    out: list[list[np.ndarray]] = [[], [], [], []]
    if config.model_type == "gpt_neox":
        h = config.num_attention_heads
        for layer in model.gpt_neox.layers:
            qkv = layer.attention.query_key_value.weight.detach().double().numpy()
            d_model = qkv.shape[1]
            qkv = qkv.reshape(h, 3, d_model // h, d_model)  # interleaved per head
            w_o = layer.attention.dense.weight.detach().double().numpy()  # (d_model, n_heads d_head)
            heads = [w_o[:, i * (d_model // h) : (i + 1) * (d_model // h)].T for i in range(h)]
            for i, w in enumerate((qkv[:, 0], qkv[:, 1], np.stack(heads), qkv[:, 2])):
                out[i].append(w)
    elif config.model_type == "gpt2":
        h = config.n_head
        for block in model.transformer.h:
            c_attn = block.attn.c_attn.weight.detach().double().numpy()  # Conv1D (in, out): y = x @ W
            d_model = c_attn.shape[0]
            d = d_model // h
            q, k, v = (c_attn[:, j * d_model : (j + 1) * d_model].T for j in range(3))  # (out, in)
            c_proj = block.attn.c_proj.weight.detach().double().numpy()  # (n_heads d_head, d_model): rows read head h
            for i, w in enumerate((q, k, c_proj, v)):
                out[i].append(w.reshape(h, d, d_model))
    else:  # llama: key and value head j serves query heads j g .. j g + g - 1
        h, kv = config.num_attention_heads, config.num_key_value_heads
        for layer in model.model.layers:
            attn = layer.self_attn
            q, k, v, o = (m.weight.detach().double().numpy() for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj))
            d_model = q.shape[1]
            d = q.shape[0] // h
            serves = [j // (h // kv) for j in range(h)]
            out[0].append(q.reshape(h, d, d_model))
            out[1].append(k.reshape(kv, d, d_model)[serves])
            out[2].append(np.stack([o[:, j * d : (j + 1) * d].T for j in range(h)]))
            out[3].append(v.reshape(kv, d, d_model)[serves])
    return [np.stack(w) for w in out]


def stored_scores(store_path: Path) -> np.ndarray:
    """``(3, n_steps, layer_a, head_a, layer_b, head_b)`` through the store's one accessor."""
    store = open_store(store_path)
    kinds = []
    for kind in ("q", "k", "v"):
        scores = store.dense(COMPOSITION, kind)
        assert scores is not None, (store_path, kind)
        kinds.append(scores)
    return np.stack(kinds)


def test_the_cli_writes_the_scores_of_the_models_own_weights_resumes_and_a_store_gains_them(tmp_path: Path) -> None:
    steps = [0, 1, 4]
    suite = neox_suite(tmp_path / "suite", steps)
    out = tmp_path / "store"
    done = run_cli("--source", str(suite), "--out", str(out), "--lenses", "composition")
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out / COMPOSITION.file)
    assert table.num_rows == len(steps) * 16 * 3  # 4 x 4 heads per pair of layers, 3 pairs of layers
    assert table.equals(COMPOSITION.sorted(table)) and table.schema.equals(COMPOSITION.schema)
    assert (np.array(table["layer_a"]) < np.array(table["layer_b"])).all()
    got = stored_scores(out)
    assert got.shape == (3, 3, 3, 4, 3, 4)
    for i, step in enumerate(steps):
        model = transformers.GPTNeoXForCausalLM.from_pretrained(suite / f"step{step}")
        w = own_factors(model)
        np.testing.assert_allclose(got[:, i], dense_scores(*w), rtol=1e-6)  # NaN where layer_a >= layer_b, both
        # LayerNorm is not folded: the gains folded into the reading factors give other scores
        gamma = np.stack(
            [layer.get_parameter("input_layernorm.weight").detach().double().numpy() for layer in model.gpt_neox.layers]
        )
        g = gamma[:, None, None, :]  # (n_layers, 1, 1, d_model)
        folded = dense_scores(w[0] * g, w[1] * g, w[2], w[3] * g)
        assert np.nanmax(np.abs(folded / got[:, i] - 1)) > 0.05  # against the 1e-6 the stored scores match
    meta = open_store(out).meta.composition
    assert meta is not None and meta["top"] is None and meta["layernorm"].startswith("not folded")
    for kind in ("q", "k", "v"):  # Gaussian heads of d_model 64: just below 1/sqrt(64)
        assert 0.9 / 8 < meta["baseline"][kind] < 1 / 8
    assert meta["baseline_rms"] == pytest.approx(1 / 8)

    # a rerun computes nothing and keeps the table; a run without the lens keeps it too
    before = (out / COMPOSITION.file).read_bytes()
    assert run_precompute(suite, out, OPTIONS).computed == []
    run_precompute(suite, out, replace(OPTIONS, lenses=()))
    assert (out / COMPOSITION.file).read_bytes() == before

    # a store made without the lens gains it for every checkpoint it has, the same rows
    later = tmp_path / "later"
    run_precompute(suite, later, replace(OPTIONS, lenses=()))
    assert not (later / COMPOSITION.file).exists()
    report = run_precompute(suite, later, OPTIONS)
    assert report.computed == [] and report.lenses == {"composition": steps}
    assert pq.read_table(later / COMPOSITION.file).equals(table)

    # resumed: a new checkpoint gets its rows in the pass over it
    perturb(model, 9)
    model.save_pretrained(suite / "step9")
    report = run_precompute(suite, out, OPTIONS)
    assert report.computed == [9]
    assert pq.read_table(out / COMPOSITION.file).num_rows == 4 * 48


def family_suite(root: Path, config) -> Path:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    model.save_pretrained(root / "step0")
    return root


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(
            lambda: transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=3, n_head=4, n_positions=64, **NO_SPECIAL_TOKENS),
            id="gpt2",
        ),
        pytest.param(
            lambda: transformers.LlamaConfig(
                vocab_size=64,
                hidden_size=32,
                num_hidden_layers=3,
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
def test_other_families_score_their_own_weights(config, tmp_path: Path) -> None:
    suite = family_suite(tmp_path / "suite", config())
    run_precompute(suite, tmp_path / "store", OPTIONS)
    model = transformers.AutoModelForCausalLM.from_pretrained(suite / "step0")
    np.testing.assert_allclose(stored_scores(tmp_path / "store")[:, 0], dense_scores(*own_factors(model)), rtol=1e-6)


def test_top_k_keeps_each_targets_strongest_sources_and_a_store_keeps_its_choice(tmp_path: Path) -> None:
    suite = neox_suite(tmp_path / "suite", [0])
    every, top = tmp_path / "every", tmp_path / "top"
    run_precompute(suite, every, OPTIONS)
    run_precompute(suite, top, replace(OPTIONS, lens_options={"composition": CompositionOptions(top=2)}))
    full, kept = stored_scores(every)[:, 0], stored_scores(top)[:, 0]
    for lb in range(1, 3):
        for hb in range(4):
            want = set()
            for kind in range(3):
                ranked = sorted(((full[kind, la, ha, lb, hb], la, ha) for la in range(lb) for ha in range(4)), reverse=True)
                want |= {(la, ha) for _, la, ha in ranked[:2]}
            have = {(la, ha) for la in range(lb) for ha in range(4) if not np.isnan(kept[0, la, ha, lb, hb])}
            assert have == want
            for la, ha in have:
                np.testing.assert_array_equal(kept[:, la, ha, lb, hb], full[:, la, ha, lb, hb])
    recorded = open_store(top).meta.composition
    assert recorded is not None and recorded["top"] == 2
    with pytest.raises(ValueError, match="made with --composition-top 2"):
        run_precompute(suite, top, OPTIONS)


def test_refusals_come_before_anything_is_written(tmp_path: Path) -> None:
    suite = neox_suite(tmp_path / "suite", [0])
    given = run_cli("--source", str(suite), "--out", str(tmp_path / "a"), "--lenses", "composition", "--matrices", "qk")
    assert given.returncode != 0 and "add ov to --matrices" in given.stderr
    given = run_cli("--source", str(suite), "--out", str(tmp_path / "b"), "--lenses", "composition", "--composition-top", "0")
    assert given.returncode != 0 and "--composition-top 0" in given.stderr
    given = run_cli("--source", str(suite), "--out", str(tmp_path / "c"), "--composition-top", "3")
    assert given.returncode == 2 and "add --lenses composition" in given.stderr
    assert not any((tmp_path / name).exists() for name in "abc")
