"""The refined LLC's cost model that ``headwatch plan`` prices a run with (`precompute.costs.llc_token_macs`,
`precompute.costs.llc_work`): its multiply-adds against torch's ``FlopCounterMode`` on the batched sampler's own
steps, and its seconds against the CPU-seconds measured per checkpoint (docs/benchmarks.md)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from headwatch.analysis.store.lenses.llc import SamplerSettings
from headwatch.families.forward import architecture, parameters
from headwatch.families.geometry import Geometry
from headwatch.families.registry import model_geometry
from headwatch.precompute import costs
from headwatch.precompute.lenses.llc_sampler import LaneNoise, frozen_layers, sample_layer_heads, sample_whole_model

T = 24


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=96, n_embd=48, n_layer=3, n_head=4, n_inner=160, n_positions=64, bos_token_id=0)
    config.eos_token_id = 0
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0  # the batched sampler has no dropout
    return GPT2LMHeadModel(config).eval()


def neox() -> torch.nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    config = GPTNeoXConfig(
        vocab_size=96, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=160,
        max_position_embeddings=64, rotary_pct=0.25,
    )  # fmt: skip
    return GPTNeoXForCausalLM(config).eval()


@pytest.mark.parametrize("batch", [1, 2], ids=["one-sequence", "two-sequences"])
@pytest.mark.parametrize("make", [gpt2, neox], ids=["gpt2-sequential", "neox-parallel"])
def test_the_multiply_adds_are_what_the_batched_sampler_computes(make, batch: int) -> None:
    """One SGLD step of every head of every layer, and of the whole model, under ``FlopCounterMode``: twice the
    model's multiply-adds per token (a multiply-add is two operations) for each of two chains, of ``batch``
    sequences of T tokens (attention is per sequence: its products grow with T, not with the batch's tokens)."""
    model = make()
    config = model.config.to_dict()
    shape = type("Shape", (), {"n_layers": 3, "n_heads": 4, "d_model": 48, "d_head": 12})()
    geometry = model_geometry(shape, config)
    assert geometry.parallel == (config["model_type"] == "gpt_neox")
    arch, params = architecture(model), dict(parameters(model))
    ids = torch.as_tensor(np.random.default_rng(0).integers(0, 96, size=(4, T)))
    one_step = SamplerSettings(chains=2, burnin=0, draws=1, sequences=4, batch_size=batch)
    frozen, _ = frozen_layers(arch, params, ids)
    with FlopCounterMode(display=False) as heads:
        for layer in range(3):
            sample_layer_heads(arch, params, frozen[layer], layer, ids, one_step, noise=LaneNoise(0, "cpu"))
    with FlopCounterMode(display=False) as whole:
        sample_whole_model(arch, params, ids, one_step, noise=LaneNoise(0, "cpu"))
    want_heads, want_whole = costs.llc_token_macs(geometry, T)
    assert heads.get_total_flops() == pytest.approx(2 * 2 * batch * T * want_heads, rel=1e-3)
    assert whole.get_total_flops() == pytest.approx(2 * 2 * batch * T * want_whole, rel=1e-3)
    run = costs.LlcRun(seq_len=T, chain_steps=2, sequences=batch)  # what plan prices, efficiency aside
    efficiency = (48 / 768) ** costs.LLC_WIDTH_EXPONENT
    assert costs.llc_work(geometry, run) * efficiency == pytest.approx(
        (heads.get_total_flops() + whole.get_total_flops()) / 2, rel=1e-3
    )


# CPU-seconds per checkpoint at one thread under the default sampler, measured on the 2-core machine (docs/benchmarks.md
# "What `headwatch plan` prices the refined LLC at"): shape, evaluation length, seconds
MEASURED = {
    "induction-d64": (Geometry(2, 4, 64, 256, 256, False), 64, 6.0),
    "induction-d128": (Geometry(2, 8, 128, 512, 256, False), 64, 20.2),
    "induction-d256": (Geometry(2, 8, 256, 1024, 256, False), 64, 54.0),
    "induction-d512": (Geometry(2, 8, 512, 2048, 256, False), 64, 177.0),
    "shakespeare-pythia-6x8": (
        Geometry(6, 8, 256, 1024, 256, True),
        256,
        math.sqrt(1507 * 1665),
    ),
}


@pytest.mark.parametrize("name", MEASURED)
def test_the_priced_seconds_are_within_15_percent_of_the_measured(name: str) -> None:
    from headwatch.analysis.store.lenses.llc import LLC_LENS

    assert LLC_LENS.seconds is not None and LLC_LENS.seconds.scale == "llc"
    geometry, tokens, measured = MEASURED[name]
    default = costs.LlcRun(tokens, costs.LLC_REFERENCE_CHAIN_STEPS)
    reference = costs.llc_work(
        costs.PYTHIA_160M_GEOMETRY, costs.LlcRun(costs.LLC_REFERENCE_TOKENS, costs.LLC_REFERENCE_CHAIN_STEPS)
    )
    priced = LLC_LENS.seconds.seconds * costs.llc_work(geometry, default) / reference
    assert priced == pytest.approx(measured, rel=0.15)


def test_the_price_follows_the_sampler_and_the_sequence_length() -> None:
    """Steps scale the work linearly; longer sequences more than linearly (attention); a wider model runs at a
    better rate, up to Pythia-160M's width."""
    geometry = MEASURED["induction-d128"][0]
    base = costs.llc_work(geometry, costs.LlcRun(64, 576))
    assert costs.llc_work(geometry, costs.LlcRun(64, 1152)) == pytest.approx(2 * base)
    assert costs.llc_work(geometry, costs.LlcRun(128, 576)) > 2 * base
    wide = dataclasses.replace(costs.PYTHIA_160M_GEOMETRY, d_model=1536, d_mlp=6144)
    macs = costs.llc_token_macs(wide, 256)
    assert costs.llc_work(wide, costs.LlcRun(256, 576)) == pytest.approx(576 * 256 * sum(macs))  # efficiency 1


def llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=160, max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("make", [gpt2, neox, llama], ids=["gpt2", "neox", "llama-gated-gqa"])
def test_the_forward_multiply_adds_are_the_models_forward_pass(make) -> None:
    """`forward_token_macs`, which prices the forward and essential-dynamics lenses, against ``FlopCounterMode`` on
    the model's own forward pass with its attention weights returned (as the forward lens runs it); the llama
    family's gated MLP and grouped-query attention (2 key/value heads for 4) included."""
    from headwatch.families.registry import model_shape

    model = make()
    model.config._attn_implementation = "eager"
    config = model.config.to_dict()
    geometry = model_geometry(model_shape(config), config)
    assert geometry.gated == (make is llama) and (geometry.kv_heads or 4) == (2 if make is llama else 4)
    ids = torch.as_tensor(np.random.default_rng(0).integers(0, 96, size=(2, T)))
    with FlopCounterMode(display=False) as counted, torch.no_grad():
        model(ids, output_attentions=True)
    assert counted.get_total_flops() == pytest.approx(2 * 2 * T * costs.forward_token_macs(geometry, T), rel=1e-3)


# the forward lens's wall seconds per checkpoint at 2 threads, machine idle (docs/benchmarks.md "Performance: the
# forward-pass lens"): shape, --eval-length, seconds; the 2-layer d128 model is left out (0.10 s: per-call cost)
FORWARD_MEASURED = {
    "induction-d512": (Geometry(2, 8, 512, 2048, 256, False), 64, 0.32),
    "shakespeare-pythia-6x8": (
        Geometry(6, 8, 256, 1024, 256, True),
        256,
        1.60,
    ),
}


@pytest.mark.parametrize("name", FORWARD_MEASURED)
def test_the_forward_lens_is_priced_within_15_percent_of_the_measured(name: str) -> None:
    from headwatch.analysis.store.lenses.attention import ATTENTION_LENS

    assert ATTENTION_LENS.seconds is not None and ATTENTION_LENS.seconds.scale == "forward"
    geometry, seq_len, measured = FORWARD_MEASURED[name]
    ref_n, ref_t = costs.FORWARD_REFERENCE
    sequences = ATTENTION_LENS.seconds.sequences
    assert sequences is not None
    ratio = costs.forward_work(geometry, sequences(32), seq_len) / costs.forward_work(
        costs.PYTHIA_160M_GEOMETRY, sequences(ref_n), ref_t
    )
    assert ATTENTION_LENS.seconds.seconds * ratio == pytest.approx(measured, rel=0.15)


def test_the_forward_lenses_sequences_are_the_lenses_own() -> None:
    """The sequences the attention and essential-dynamics figures are scaled by: the lenses' own counts (the
    evaluation sequences and the induction probe's; the essential sample's 4 + 4), the essential lens taking fewer
    evaluation sequences when there are fewer."""
    from headwatch.analysis.stages.essential import SEQUENCES
    from headwatch.analysis.store.lenses.attention import ATTENTION_LENS
    from headwatch.analysis.store.lenses.essential import ESSENTIAL_LENS
    from headwatch.precompute.evalset import EVAL_LENGTH, EVAL_SEQUENCES, INDUCTION_SEQUENCES

    assert ATTENTION_LENS.seconds is not None and ESSENTIAL_LENS.seconds is not None
    assert ATTENTION_LENS.seconds.sequences is not None and ESSENTIAL_LENS.seconds.sequences is not None
    assert ATTENTION_LENS.seconds.sequences(32) == 32 + INDUCTION_SEQUENCES
    assert ESSENTIAL_LENS.seconds.sequences(32) == 2 * SEQUENCES and ESSENTIAL_LENS.seconds.sequences(2) == 2 + SEQUENCES
    assert costs.FORWARD_REFERENCE == (EVAL_SEQUENCES, EVAL_LENGTH)
    shape = type("Shape", (), {"n_layers": 2, "n_heads": 8, "d_model": 128, "d_head": 16})()
    config = {"model_type": "gpt2", "vocab_size": 256}
    full, _ = costs.time_scale(ESSENTIAL_LENS.seconds, shape, config, evaluation=(32, 64))
    two, how = costs.time_scale(ESSENTIAL_LENS.seconds, shape, config, evaluation=(2, 64))
    assert two == pytest.approx(full * 6 / 8) and "6 sequences of 64 tokens" in how
