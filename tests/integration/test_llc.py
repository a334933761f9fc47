"""The refined-LLC stage (`precompute.lenses.llc`, ``--lenses llc``) on tiny GPT-NeoX models made here.

In process, on a model trained a little on its own sequences (so that it sits near a minimum):
the estimate is finite and reproducible with the same seed, its initial loss is the model's own
``labels=`` loss on the sampler's sequences, it equals n beta (mean SGLD loss - initial loss)
recomputed from devinterp's samples, parameters the loss does not depend on (the embedding rows
of tokens absent from the data) give 0 while an active head gives far more, and a head's mask
moves exactly that head's Q, K, V rows and output columns (every other parameter bit-identical
after sampling). Through the command line (the batched sampler, the default): the table and meta.json
``llc``, the default steps, a run killed between checkpoints resumes computing only the missing ones to
the uninterrupted table, another sampler setting or implementation is refused, the scratch folder is removed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.analysis.store import open_store, read_meta
from headwatch.analysis.store.lenses.llc import LLC, LLC_WHOLE_MODEL, SamplerSettings
from headwatch.precompute.lenses.llc import (
    check_family,
    default_llc_steps,
    estimate_llc,
    head_masks,
    masked_parameters,
    parse_llc_steps,
)
from tests.integration.conftest import REPO, run_cli
from tests.integration.test_forward_lens import byte_run

VOCAB, HIDDEN, LAYERS, HEADS, T = 64, 32, 2, 4, 16
D_HEAD = HIDDEN // HEADS
USED = 48  # the data uses token ids 0..47; rows 48..63 of the embedding never enter the loss
SAMPLER = SamplerSettings(lr=1e-3, n_beta=30.0, localization=300.0, chains=2, draws=8, burnin=0, batch_size=2, sequences=8)


def tiny_model():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=2 * HIDDEN,
        max_position_embeddings=T,
        rotary_pct=0.25,
    )
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(config)


def sequences(n: int, seed: int) -> np.ndarray:
    """n sequences of T ids < USED: x_t = x_{t-1} + x_{t-2} (mod USED), one token in five replaced at random
    (so the heads have something to attend to, and the loss a floor above 0)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, T), dtype=np.int64)
    x[:, :2] = rng.integers(0, USED, size=(n, 2))
    for t in range(2, T):
        x[:, t] = (x[:, t - 1] + x[:, t - 2]) % USED
        noise = rng.random(n) < 0.2
        x[noise, t] = rng.integers(0, USED, size=int(noise.sum()))
    return x


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    """The sampler's 8 sequences: the first of the training set (the LLC is the training loss's)."""
    return sequences(512, seed=0)[:8]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """A tiny model trained for 300 Adam steps on 512 sequences, saved with save_pretrained and loaded back."""
    from transformers import AutoModelForCausalLM

    model = tiny_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ids = torch.from_numpy(sequences(512, seed=0))
    for i in range(300):
        batch = ids[(i % 8) * 64 : (i % 8 + 1) * 64]
        opt.zero_grad()
        model(input_ids=batch, labels=batch).loss.backward()
        opt.step()
    folder = tmp_path_factory.mktemp("tiny") / "step300"
    model.save_pretrained(folder)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_estimate_is_finite_reproducible_and_leaves_the_model_as_it_was(trained, data, tmp_path: Path) -> None:
    before = state(trained)
    masks = head_masks(trained, 1, 2)
    a = estimate_llc(trained, data, masks, SAMPLER, scratch=tmp_path)
    b = estimate_llc(trained, data, masks, SAMPLER, scratch=tmp_path)
    other = estimate_llc(trained, data, masks, SamplerSettings(**{**SAMPLER.as_meta(), "seed": 7}), scratch=tmp_path)
    assert np.isfinite([a.llc, a.llc_std, a.init_loss]).all()
    assert a.llc == b.llc and a.llc_std == b.llc_std and np.array_equal(a.trace, b.trace)
    assert other.llc != a.llc  # another seed, other noise
    assert a.trace.shape == (SAMPLER.chains, SAMPLER.draws)
    assert list(tmp_path.iterdir()) == []  # devinterp's samples are removed
    after = state(trained)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_initial_loss_is_the_models_own_loss_and_the_estimate_n_beta_times_the_loss_rise(trained, data, tmp_path) -> None:
    est = estimate_llc(trained, data, head_masks(trained, 0, 1), SAMPLER, scratch=tmp_path)
    with torch.no_grad():
        own = float(trained(input_ids=torch.from_numpy(data), labels=torch.from_numpy(data)).loss)
    assert est.init_loss == pytest.approx(own, abs=1e-5)  # one pass over every sequence
    # the definition, from devinterp's per-step losses: n beta (mean over steps and chains - L(w*))
    assert est.llc == pytest.approx(SAMPLER.n_beta * (est.trace.mean() - own), abs=1e-3)
    # with burn-in 0 it is devinterp's own llc_mean
    assert est.llc == pytest.approx(est.devinterp_llc, rel=1e-5, abs=1e-6)
    burn = SamplerSettings(**{**SAMPLER.as_meta(), "burnin": 4})
    late = estimate_llc(trained, data, head_masks(trained, 0, 1), burn, scratch=tmp_path)
    assert late.trace.shape == (2, 12)
    assert late.llc == pytest.approx(burn.n_beta * (late.trace[:, 4:].mean() - late.init_loss), abs=1e-3)


def test_parameters_the_loss_ignores_give_zero_far_below_an_active_head(trained, data, tmp_path: Path) -> None:
    assert data.max() < USED
    weight = trained.gpt_neox.embed_in.weight
    rows = torch.zeros(weight.shape[0], dtype=torch.bool)
    rows[USED:] = True  # tokens absent from the data
    absent: dict[str, torch.Tensor | None] = {"gpt_neox.embed_in.weight": rows[:, None].expand_as(weight).clone()}
    assert masked_parameters(trained, absent) == (VOCAB - USED) * HIDDEN
    idle = estimate_llc(trained, data, absent, SAMPLER, scratch=tmp_path)
    active = estimate_llc(trained, data, head_masks(trained, 0, 0), SAMPLER, scratch=tmp_path)
    assert abs(idle.llc) < 1e-4 and idle.llc_std < 1e-4
    assert active.llc > 0.5 and active.llc > 1000 * abs(idle.llc)


def head_index(layer: int, head: int) -> dict[str, torch.Tensor]:
    """Head (layer, head)'s entries, written from GPT-NeoX's layout (not from devinterp): query_key_value
    rows are (head, [q, k, v], d_head) flattened, so rows head*3*d_head up to (head+1)*3*d_head, weight
    and bias; attention.dense reads the heads' outputs concatenated, so columns head*d_head up to (head+1)*d_head."""
    p = f"gpt_neox.layers.{layer}.attention."
    qkv_rows = torch.zeros(3 * HIDDEN, dtype=torch.bool)
    qkv_rows[head * 3 * D_HEAD : (head + 1) * 3 * D_HEAD] = True
    cols = torch.zeros(HIDDEN, dtype=torch.bool)
    cols[head * D_HEAD : (head + 1) * D_HEAD] = True
    return {
        p + "query_key_value.weight": qkv_rows[:, None].expand(3 * HIDDEN, HIDDEN),
        p + "query_key_value.bias": qkv_rows,
        p + "dense.weight": cols[None, :].expand(HIDDEN, HIDDEN),
    }


@pytest.mark.parametrize("layer,head", [(0, 0), (1, 3)])
def test_the_head_mask_moves_exactly_the_heads_parameters(trained, data, layer: int, head: int) -> None:
    from datasets import Dataset
    from devinterp.optim import SGMCMC
    from devinterp.slt.lm_loss import make_evaluate_fn
    from devinterp.slt.sampler import sample_single_chain

    masks = head_masks(trained, layer, head)
    expected = head_index(layer, head)
    assert set(masks) == set(expected)
    assert all((m := masks[k]) is not None and torch.equal(m, expected[k]) for k in expected)
    assert masked_parameters(trained, masks) == 3 * D_HEAD * (HIDDEN + 1) + HIDDEN * D_HEAD
    before = state(trained)
    sampled: dict[str, torch.Tensor] = {}

    def keep(*, model, **_) -> None:
        sampled.update(state(model))

    sample_single_chain(
        trained,
        Dataset.from_dict({"input_ids": data}).with_format("torch"),
        make_evaluate_fn(),
        masks,
        num_draws=4,
        sampling_method=SGMCMC.sgld,
        sampling_method_kwargs={"lr": 1e-3, "nbeta": 30.0, "localization": 300.0},
        seed=0,
        dataloader_seed=0,
        callbacks=[keep],
        batch_size=2,
    )
    for name, value in before.items():
        moved = sampled[name] != value
        if name in expected:
            assert torch.equal(moved, expected[name]), name  # every entry of the head moved, no other
        else:
            assert torch.equal(sampled[name], value), name  # bit-identical


def gpt2_head_index(layer: int, head: int) -> dict[str, torch.Tensor]:
    """Head (layer, head)'s entries, written from GPT-2's layout (not from devinterp): ``attn.c_attn`` is a
    Conv1D (d_model, 3 d_model) whose columns are Q, then K, then V, each the heads' d_head columns in order;
    ``attn.c_proj`` (d_model, d_model) reads the heads' outputs concatenated, so rows head*d_head up to
    (head+1)*d_head. Its bias is shared by the heads and not the head's."""
    p = f"transformer.h.{layer}.attn."
    cols = torch.zeros(3 * HIDDEN, dtype=torch.bool)
    for block in range(3):
        cols[block * HIDDEN + head * D_HEAD : block * HIDDEN + (head + 1) * D_HEAD] = True
    rows = torch.zeros(HIDDEN, dtype=torch.bool)
    rows[head * D_HEAD : (head + 1) * D_HEAD] = True
    return {
        p + "c_attn.weight": cols[None, :].expand(HIDDEN, 3 * HIDDEN),
        p + "c_attn.bias": cols,
        p + "c_proj.weight": rows[:, None].expand(HIDDEN, HIDDEN),
    }


@pytest.mark.parametrize("layer,head", [(0, 1), (1, 3)])
def test_the_gpt2_head_mask_moves_exactly_the_heads_parameters(data, layer: int, head: int) -> None:
    from datasets import Dataset
    from devinterp.optim import SGMCMC
    from devinterp.slt.lm_loss import make_evaluate_fn
    from devinterp.slt.sampler import sample_single_chain
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=2 * HIDDEN)
    model = GPT2LMHeadModel(config).eval()
    masks = head_masks(model, layer, head)
    expected = gpt2_head_index(layer, head)
    assert set(masks) == set(expected)
    assert all((m := masks[k]) is not None and torch.equal(m, expected[k]) for k in expected)
    assert masked_parameters(model, masks) == 3 * D_HEAD * (HIDDEN + 1) + HIDDEN * D_HEAD
    before = state(model)
    sampled: dict[str, torch.Tensor] = {}

    def keep(*, model, **_) -> None:
        sampled.update(state(model))

    sample_single_chain(
        model,
        Dataset.from_dict({"input_ids": data}).with_format("torch"),
        make_evaluate_fn(),
        masks,
        num_draws=4,
        sampling_method=SGMCMC.sgld,
        sampling_method_kwargs={"lr": 1e-3, "nbeta": 30.0, "localization": 300.0},
        seed=0,
        dataloader_seed=0,
        callbacks=[keep],
        batch_size=2,
    )
    for name, value in before.items():
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # causal-mask buffers of older transformers, not parameters
        moved = sampled[name] != value
        if name in expected:
            assert torch.equal(moved, expected[name]), name  # every entry of the head moved, no other
        else:
            assert torch.equal(sampled[name], value), name  # bit-identical


def test_refusals_and_step_choice() -> None:
    with pytest.raises(UnknownArchitectureError, match="llama"):
        check_family({"model_type": "llama"})
    with pytest.raises(ValueError, match="batch"):
        SamplerSettings(sequences=5, batch_size=2)
    with pytest.raises(ValueError, match="chains"):
        SamplerSettings(chains=1)
    with pytest.raises(ValueError, match="lr"):
        SamplerSettings(lr=0.0)
    pythia = [0, *(2**i for i in range(10)), *range(1000, 143001, 1000)]
    chosen = default_llc_steps(pythia)
    assert len(chosen) == 8 and chosen[0] == 0 and chosen[-1] == 143000
    logs = np.log(chosen[1:])
    assert np.diff(logs).min() > 0.25 * (logs[-1] - logs[0]) / 7  # spread out in log(step), none bunched
    assert default_llc_steps([0, 5, 9]) == [0, 5, 9]
    assert parse_llc_steps("all", [3, 1]) == [1, 3]
    assert parse_llc_steps("1, 3", [0, 1, 3]) == [1, 3]
    with pytest.raises(ValueError, match=r"\[2\]"):
        parse_llc_steps("1,2", [0, 1, 3])


def test_devinterp_is_pinned_for_the_precompute_job_only() -> None:
    precompute = (REPO / "requirements-precompute.txt").read_text().splitlines()
    assert "devinterp==2.0.1" in precompute
    assert not any("devinterp" in line for line in (REPO / "requirements.txt").read_text().splitlines())


LLC_CLI = (
    "--llc-chains",
    "2",
    "--llc-burnin",
    "0",
    "--eval-sequences",
    "4",
    "--eval-length",
    "32",
    "--lenses",
    "llc",
    "--llc-draws",
    "2",
    "--llc-sequences",
    "4",
    "--llc-batch-size",
    "2",
)


def test_the_record_names_devinterps_version_only_when_devinterp_samples() -> None:
    from importlib.metadata import version

    from headwatch.precompute.lenses.llc import sampler_record

    assert sampler_record("devinterp")["devinterp"] == version("devinterp")
    assert sampler_record("devinterp")["implementation"] == "devinterp"
    batched = sampler_record("batched")
    assert batched["implementation"] == "batched" and "devinterp" not in batched


def test_the_stage_writes_its_table_resumes_after_a_kill_and_refuses_other_settings(tmp_path: Path) -> None:
    steps = [0, 1, 2, 4, 8, 16]
    run = byte_run(tmp_path, steps, hidden=32, layers=2, heads=2)
    chosen = ("--llc-steps", "0,2,16")
    reference = tmp_path / "uninterrupted"
    done = run_cli("--source", str(run), "--out", str(reference), *LLC_CLI, *chosen)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(reference / LLC.file)
    assert table.schema.equals(LLC.schema)
    assert table.num_rows == 3 * (2 * 2 + 1)
    assert sorted(set(table["step"].to_pylist())) == [0, 2, 16]
    assert np.isfinite(table["llc"].to_numpy()).all() and np.isfinite(table["init_loss"].to_numpy()).all()
    meta = read_meta(reference)
    assert meta.llc is not None
    assert meta.llc["sampler"] == SamplerSettings(chains=2, burnin=0, draws=2, sequences=4, batch_size=2).as_meta()
    assert meta.llc["steps"] == [0, 2, 16] and set(meta.llc["seconds"]) == {"0", "2", "16"}
    assert meta.llc["implementation"] == "batched"  # the default sampler (tests/integration/test_llc_sampler.py)
    assert "devinterp" not in meta.llc  # devinterp did not sample: its version (or "unknown") says nothing here
    assert not any(p.name.startswith(".uninterrupted.") and p.is_dir() for p in tmp_path.iterdir())  # scratch removed
    store = open_store(reference)
    rllc, whole = store.dense(LLC, "llc"), store.dense(LLC, "llc", at=LLC_WHOLE_MODEL)
    assert rllc is not None and whole is not None
    assert rllc.shape == (len(steps), 2, 2)
    assert np.isnan(rllc[[1, 3, 4]]).all() and np.isfinite(rllc[[0, 2, 5]]).all()
    assert np.isfinite(whole[[0, 2, 5]]).all()

    # killed after its first checkpoint's estimates are committed: the rerun computes only the others
    out = tmp_path / "killed"
    assert run_cli("--source", str(run), "--out", str(out)).returncode == 0  # the weight statistics first
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headwatch.precompute",
            "--no-progress",
            "--source",
            str(run),
            "--out",
            str(out),
            *LLC_CLI,
            *chosen,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if (json.loads((out / "meta.json").read_text()).get("llc") or {}).get("seconds"):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = pq.read_table(out / LLC.file)
    assert sorted(set(partial["step"].to_pylist())) == [0]
    again = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, *chosen)
    assert again.returncode == 0, again.stderr
    assert "refined LLC: computed at steps 2, 16" in again.stderr
    assert pq.read_table(out / LLC.file).equals(table)
    assert "refined LLC: computed" not in run_cli("--source", str(run), "--out", str(out), *LLC_CLI, *chosen).stderr

    refused = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-lr", "0.002", *chosen)
    assert refused.returncode == 2
    assert "other settings" in refused.stderr and "lr 0.001 (now 0.002)" in refused.stderr
    assert pq.read_table(out / LLC.file).equals(table)
    other = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-implementation", "devinterp", *chosen)
    assert other.returncode == 2 and "implementation 'batched' (now 'devinterp'" in other.stderr  # one per store
    bad = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-steps", "3")
    assert bad.returncode == 2 and "--llc-steps '3'" in bad.stderr
    lost = run_cli("--source", str(run), "--out", str(out), "--llc-draws", "3")
    assert lost.returncode == 2 and "add --lenses llc" in lost.stderr


def test_default_steps_through_the_cli(tmp_path: Path) -> None:
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256]
    run = byte_run(tmp_path, steps, hidden=16, layers=1, heads=2)
    out = tmp_path / "store"
    done = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-draws", "1", "--llc-chains", "2")
    assert done.returncode == 0, done.stderr
    got = sorted(set(pq.read_table(out / LLC.file)["step"].to_pylist()))
    assert got == default_llc_steps(steps) and len(got) == 8 and got[0] == 0 and got[-1] == 256
