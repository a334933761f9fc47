"""The batched refined-LLC sampler (`precompute.lenses.llc_sampler`) against devinterp and an analytic case.

- The pure forward pass (`families.forward`) gives the model's own loss (GPT-2 and GPT-NeoX),
  and a head's weights in its per-head layout are exactly the entries devinterp's head mask moves.
- Driven by devinterp's own noise stream (replayed here from its definition: per chain the global
  generator seeded ``seed + chain``, one full-size normal per masked parameter tensor per step, in the
  mask's order), every head's and the whole model's per-step losses equal devinterp's ``loss_trace``
  step for step, and the initial loss its ``init_loss``: same batches, same gradient, same update.
- Under its own per-lane noise it reproduces itself from the seed, does not depend on which lanes share
  a computation, and agrees with devinterp in distribution on the tiny model.
- On a quadratic loss with Hessian eigenvalues h_i, SGLD's stationary law is Gaussian with, per
  eigendirection, variance ``1 / (a_i (1 - lr a_i / 4))``, ``a_i = n_beta h_i + gamma`` (the exact
  stationary variance of the discretised Langevin step), so the estimator's mean is
  ``sum_i n_beta h_i / (2 a_i (1 - lr a_i / 4))``, about d/2 for a regular model: the sampler's
  estimate matches it within its standard error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import torch

from benchmarks.llc_noise import DevinterpNoise
from headwatch.analysis.store.lenses.llc import SamplerSettings
from headwatch.families.forward import HEAD_KEYS, Params, architecture, parameters
from headwatch.precompute.lenses.llc import (
    estimate_llc,
    estimates_from_traces,
    head_masks,
    head_parameter_count,
    masked_parameters,
)
from headwatch.precompute.lenses.llc_sampler import (
    WHOLE_MODEL,
    Lane,
    _sgld,
    batch_order,
    checkpoint_traces,
)
from tests.integration.test_llc import HEADS, HIDDEN, LAYERS, VOCAB, T, data, trained  # noqa: F401  # fixtures

SAMPLER = SamplerSettings(lr=1e-3, n_beta=30.0, localization=300.0, chains=2, draws=6, burnin=2, batch_size=2, sequences=8)


def tiny_gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    config = GPT2Config(  # no dropout: devinterp samples in train mode (see test_dropout_is_refused)
        vocab_size=VOCAB,
        n_positions=T,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_inner=2 * HIDDEN,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox"])
def test_pure_forward_is_the_models_own_loss_and_a_head_is_devinterps_mask(family: str, trained, data) -> None:  # noqa: F811
    model = tiny_gpt2() if family == "gpt2" else trained
    arch, params = architecture(model), parameters(model)
    ids = torch.from_numpy(data)
    with torch.no_grad():
        own = float(model(input_ids=ids, labels=ids).loss)
        assert float(arch.loss(params, ids)) == pytest.approx(own, abs=2e-6)
    # every parameter entry labelled by its flat index: a head's entries are exactly its mask's
    labelled = {n: torch.arange(p.numel(), dtype=torch.float64).reshape(p.shape) for n, p in params.items()}
    for layer, head in [(0, 0), (LAYERS - 1, HEADS - 1), (1, 2)]:
        masks = head_masks(model, layer, head)
        got = arch.head(labelled, layer, head)
        names = arch.head_parameter_names(layer)
        assert set(masks) == set(names)
        expected = sorted((n, int(i)) for n in names for i in labelled[n][masks[n]].tolist())
        # which tensor each layout key reads: Q, K, V weights and biases, output columns
        source = {
            "W_q": names[0],
            "W_k": names[0],
            "W_v": names[0],
            "b_q": names[1],
            "b_k": names[1],
            "b_v": names[1],
            "W_o": names[2],
        }
        found = sorted((source[k], int(i)) for k in HEAD_KEYS for i in got[k].flatten().tolist())
        assert found == expected
        # the count the batched path writes to llc.parquet (without devinterp) is devinterp's mask count
        assert head_parameter_count(arch, params, layer, head) == masked_parameters(model, masks)


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox"])
def test_with_devinterps_noise_every_trace_is_devinterps_step_for_step(family: str, trained, data, tmp_path: Path) -> None:  # noqa: F811
    model = tiny_gpt2() if family == "gpt2" else trained
    got = checkpoint_traces(model, data, SAMPLER, noise=DevinterpNoise(model, SAMPLER.seed))
    assert got.trace.shape == (LAYERS * HEADS * SAMPLER.chains + SAMPLER.chains, SAMPLER.burnin + SAMPLER.draws)
    for layer, head in [(0, 0), (0, 3), (1, 1), (WHOLE_MODEL, WHOLE_MODEL)]:
        masks = None if layer == WHOLE_MODEL else head_masks(model, layer, head)
        ref = estimate_llc(model, data, masks, SAMPLER, scratch=tmp_path)
        rows = [i for i, lane in enumerate(got.lanes) if (lane.layer, lane.head) == (layer, head)]
        assert [got.lanes[i].chain for i in rows] == list(range(SAMPLER.chains))
        assert got.init_loss == pytest.approx(ref.init_loss, abs=1e-5)
        np.testing.assert_allclose(got.trace[rows], ref.trace, rtol=0, atol=2e-4, err_msg=f"layer {layer} head {head}")
        # and the estimate made from them is devinterp's estimator
        est = {(r[0], r[1]): r[2] for r in estimates_from_traces(got, SAMPLER)}[(layer, head)]
        assert est.llc == pytest.approx(ref.llc, abs=5e-3 * SAMPLER.n_beta)
        assert est.per_chain.shape == (SAMPLER.chains,)


def test_own_noise_reproduces_from_the_seed_whatever_shares_the_computation(trained, data) -> None:  # noqa: F811
    a = checkpoint_traces(trained, data, SAMPLER)
    b = checkpoint_traces(trained, data, SAMPLER, max_lane_logits=SAMPLER.batch_size * T * VOCAB)  # one lane per call
    c = checkpoint_traces(trained, data, SamplerSettings(**{**SAMPLER.as_meta(), "seed": 5}))
    assert a.lanes == b.lanes
    np.testing.assert_allclose(a.trace, b.trace, rtol=0, atol=1e-5)
    assert not np.allclose(a.trace[:, 1:], c.trace[:, 1:])
    # chains differ from each other after their first step (the first loss is at w* on the same batch)
    np.testing.assert_allclose(a.trace[0, 0], a.trace[1, 0], rtol=0, atol=1e-6)
    assert abs(a.trace[0, 1:] - a.trace[1, 1:]).max() > 1e-6
    assert np.isfinite(a.trace).all()


def test_the_batches_are_devinterps_order() -> None:
    from datasets import Dataset
    from torch.utils.data import DataLoader
    from torch.utils.data import Dataset as TorchDataset

    s = SamplerSettings(sequences=8, batch_size=2, seed=3)
    # devinterp: DataLoader(dataset, batch_size, shuffle=True, generator seeded init_seed, drop_last=True), cycled,
    # over the Hugging Face dataset estimate_llc gives it (devinterp casts it to a torch Dataset as here)
    ids = Dataset.from_dict({"input_ids": np.arange(8)[:, None]}).with_format("torch")
    g = torch.Generator().manual_seed(3)
    loader = DataLoader(cast(TorchDataset, ids), batch_size=2, shuffle=True, generator=g, drop_last=True)
    ref = [b["input_ids"][:, 0].tolist() for b in loader]
    assert [b.tolist() for b in batch_order(8, s)] == ref
    assert sorted(i for b in ref for i in b) == list(range(8))


def test_same_distribution_as_devinterp_on_the_tiny_model(trained, data, tmp_path: Path) -> None:  # noqa: F811
    """Under its own noise, against devinterp's under the same settings: per head, the chains' means agree
    within their spread (16 chains each, the difference of means within 4 standard errors)."""
    s = SamplerSettings(lr=1e-3, n_beta=30.0, localization=300.0, chains=16, draws=16, burnin=8, batch_size=2, sequences=8)
    ours = {
        (r[0], r[1]): r[2] for r in estimates_from_traces(checkpoint_traces(trained, data, s, layers=[1], whole_model=False), s)
    }
    for head in (0, 3):
        ref = estimate_llc(trained, data, head_masks(trained, 1, head), s, scratch=tmp_path)
        mine = ours[(1, head)]
        se = math.sqrt(mine.per_chain.var(ddof=1) / s.chains + ref.per_chain.var(ddof=1) / s.chains)
        assert abs(mine.llc - ref.llc) < 4 * se, (head, mine.llc, ref.llc, se)
        assert 0.5 < mine.llc_std / ref.llc_std < 2.0


def test_quadratic_loss_gives_the_analytic_llc() -> None:
    """SGLD on L(w) = 1/2 sum_i h_i w_i^2 (w* = 0, a regular minimum of d = 6 parameters)."""
    h = torch.tensor([0.5, 1.0, 2.0, 4.0, 8.0, 16.0], dtype=torch.float64)
    s = SamplerSettings(lr=1e-4, n_beta=100.0, localization=1.0, chains=64, draws=4000, burnin=1000, batch_size=1, sequences=1)
    a = s.n_beta * h + s.localization
    expected = float((s.n_beta * h / (2 * a * (1 - s.lr * a / 4))).sum())
    assert abs(expected - len(h) / 2) < 0.1  # about d/2
    lanes = [Lane(0, 0, c) for c in range(s.chains)]
    theta0 = {"w": torch.zeros(s.chains, len(h), dtype=torch.float64)}
    gen = torch.Generator().manual_seed(0)

    def noise(lanes: Sequence[Lane], shapes: dict[str, torch.Size], step: int) -> Params:
        return {"w": torch.randn(len(lanes), *shapes["w"], generator=gen, dtype=torch.float64)}

    def loss(theta: Params, _: torch.Tensor) -> torch.Tensor:
        return 0.5 * (h * theta["w"] ** 2).sum()

    trace = _sgld(loss, theta0, lanes, lambda idx: (idx,), (None,), [torch.zeros(1)], s, noise)
    per_chain = s.n_beta * trace[:, s.burnin :].mean(axis=1)  # L(w*) = 0
    se = per_chain.std(ddof=1) / math.sqrt(s.chains)
    assert abs(per_chain.mean() - expected) < 4 * se + 0.02, (per_chain.mean(), expected, se)
    assert se < 0.1


def test_dropout_is_refused() -> None:
    """devinterp samples in train mode, so a model with dropout has dropout noise in its SGLD losses;
    the pure forward pass has none, and refuses such a model rather than estimate something else."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from headwatch.analysis.errors import UnknownArchitectureError

    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=HIDDEN, n_layer=1, n_head=HEADS))
    with pytest.raises(UnknownArchitectureError, match="dropout"):
        architecture(model)
