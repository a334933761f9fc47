"""Whole-layer matrices: roles per family, the Marchenko-Pastur law, its departures and the tail exponent.

References are independent of `analysis/`: numpy's dense SVD, the law's analytic
edges and moments (integrated with scipy.quad), matrices built with a known number
of spikes, and the ``powerlaw`` package (weightwatcher's fitter) for alpha.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import powerlaw
import pytest
import scipy.integrate
import torch
import transformers

from headwatch.analysis.errors import CheckpointError
from headwatch.analysis.rmt.marchenko_pastur import (
    mp_below,
    mp_cdf,
    mp_density,
    mp_edges,
    mp_kl,
    mp_quantile,
    mp_spikes,
    powerlaw_fit,
)
from headwatch.analysis.store.format import HIST_Z_EDGES
from headwatch.analysis.weights.layers import gram_eigenvalues, layer_matrix_statistics
from headwatch.families.blocks import block_roles, block_tensor_names, extract_blocks
from headwatch.families.registry import model_shape

NO_SPECIAL_TOKENS: dict[str, Any] = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
SMALL: dict[str, Any] = dict(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64, **NO_SPECIAL_TOKENS
)
CONFIGS = {
    "gpt_neox": lambda: transformers.GPTNeoXConfig(**SMALL, num_attention_heads=4),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, **NO_SPECIAL_TOKENS),
    "llama_gqa": lambda: transformers.LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL, num_attention_heads=4, num_key_value_heads=2),
}


def _powerlaw_reference(evals: np.ndarray) -> tuple[float, float, float]:
    """powerlaw.Fit as weightwatcher calls it (continuous, xmin by KS), with alpha unbounded
    above as in powerlaw 1.x (2.0's default range caps alpha at 3)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = powerlaw.Fit(np.asarray(evals, dtype=np.float64), verbose=False, parameter_ranges={"alpha": [1, None]})
    return float(fit.alpha), float(fit.xmin), float(fit.D)


# ----------------------------------------------------------------------------- roles


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_every_2d_block_weight_has_a_role(case):
    """The role table covers every 2-D weight of a block (norms and biases are 1-D), with the stored shape."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[case]())
    state = model.state_dict()
    shape = model_shape(model.config.to_dict())
    names = block_tensor_names(shape, state)
    block_2d = {n for n, t in state.items() if t.ndim == 2 and (".layers." in n or ".h." in n)}
    assert set(names.values()) == block_2d
    blocks = extract_blocks(shape, state)
    assert tuple(blocks) == block_roles(shape.family)
    for (layer, role), name in names.items():
        assert torch.equal(blocks[role][layer], state[name])
    if shape.family == "llama":
        assert tuple(blocks["attn_k"][0].shape) == (2 * 8, 32)  # n_kv_heads x d_head rows
        assert tuple(blocks["mlp_gate"][0].shape) == (48, 32)
    if shape.family == "gpt2":
        assert tuple(blocks["attn_qkv"][0].shape) == (32, 96)  # Conv1D (in, out), as stored


def test_missing_role_is_a_clear_error():
    shape = model_shape(CONFIGS["gpt_neox"]().to_dict())
    state = transformers.AutoModelForCausalLM.from_config(CONFIGS["gpt_neox"]()).state_dict()
    del state["gpt_neox.layers.1.mlp.dense_4h_to_h.weight"]
    with pytest.raises(CheckpointError, match="no mlp_out weight for layer 1"):
        block_tensor_names(shape, state)


# ----------------------------------------------------------------------------- the law


@pytest.mark.parametrize("c", [0.25, 0.5, 1.0])
def test_mp_law_against_its_analytic_moments_and_cdf(c):
    lo, hi = mp_edges(c)
    assert (lo, hi) == pytest.approx(((1 - np.sqrt(c)) ** 2, (1 + np.sqrt(c)) ** 2), abs=0)
    dens = lambda x: mp_density(np.array([x]), c)[0]  # noqa: E731
    for k, expected in ((0, 1.0), (1, 1.0), (2, 1.0 + c)):  # mass, mean, second moment
        value, _ = scipy.integrate.quad(lambda x, k=k: x**k * dens(x), lo, hi, limit=200)
        assert value == pytest.approx(expected, rel=1e-6)
    for x in (lo + 0.1 * (hi - lo), 1.0, lo + 0.9 * (hi - lo)):
        ref, _ = scipy.integrate.quad(dens, lo, x, limit=200)
        assert mp_cdf(x, c) == pytest.approx(ref, abs=2e-5)
    q = np.array([0.125, 0.5, 0.875])
    assert mp_cdf(mp_quantile(q, c), c) == pytest.approx(q, abs=1e-6)


def test_bad_ratio_is_refused():
    with pytest.raises(ValueError, match="ratio"):
        mp_edges(1.5)


# ----------------------------------------------------------------------------- spectrum


# (70, 2100) and (2100, 70): several slices of the long side and row blocks of uneven size
@pytest.mark.parametrize("shape", [(64, 200), (200, 64), (96, 96), (70, 2100), (2100, 70)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_gram_eigenvalues_match_a_dense_svd(shape, dtype):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal(shape) * 0.02).astype(np.float64)
    w[:, 0] *= 30  # a spread of scales
    t = torch.tensor(w, dtype=dtype)
    ref = np.linalg.svd(t.to(torch.float64).numpy(), compute_uv=False)
    s = np.sqrt(gram_eigenvalues(t[None]).numpy()[0])
    assert s.shape == (min(shape),)
    # absolute error ~ eps64 * s_max^2 / s_k; every value here is above 1e-3 s_max
    assert np.abs(s - ref).max() <= 1e-11 * ref[0]
    assert np.all(np.diff(s) <= 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_layers_of_a_role_split_over_threads_match_a_dense_svd(threads):
    """On CPU the matrices of a chunk go to one Python thread per torch thread; each
    layer keeps its own spectrum, and the caller's torch thread count is restored."""
    rng = np.random.default_rng(4)
    mats = [rng.standard_normal((90, 150)) * (0.01 * (i + 1)) for i in range(5)]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        recs = layer_matrix_statistics({"attn_out": [torch.tensor(m) for m in mats]})
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    for rec, m in zip(recs, mats, strict=True):
        ref = np.linalg.svd(m, compute_uv=False)
        assert np.abs(rec["sv"] - ref).max() <= 1e-11 * ref[0]


def _records(w: np.ndarray, role: str = "mlp_in") -> dict:
    return layer_matrix_statistics({role: [torch.tensor(w)]})[0]


def test_record_columns_against_numpy():
    rng = np.random.default_rng(2)
    w = rng.standard_t(5, size=(120, 300)) * 0.05 + 0.01
    rec = _records(w.astype(np.float32))
    w32 = w.astype(np.float32).astype(np.float64)
    s = np.linalg.svd(w32, compute_uv=False)
    assert (rec["rows"], rec["cols"]) == (120, 300)
    assert rec["sv"] == pytest.approx(s, rel=1e-9)
    assert rec["frob_norm"] == pytest.approx(np.linalg.norm(w32), rel=1e-9)
    assert rec["spectral_norm"] == pytest.approx(np.linalg.norm(w32, 2), rel=1e-9)
    assert rec["stable_rank"] == pytest.approx((s**2).sum() / s[0] ** 2, rel=1e-9)
    import scipy.stats

    assert rec["mean"] == pytest.approx(w32.mean(), rel=1e-5)
    assert rec["std"] == pytest.approx(w32.std(), rel=1e-5)
    assert rec["skew"] == pytest.approx(scipy.stats.skew(w32.ravel()), abs=1e-4)
    assert rec["kurtosis"] == pytest.approx(scipy.stats.kurtosis(w32.ravel()), abs=1e-3)
    assert (rec["min"], rec["max"]) == (pytest.approx(w32.min()), pytest.approx(w32.max()))
    z = (w32.ravel() - w32.mean()) / w32.std()
    counts, _ = np.histogram(z, bins=np.concatenate([[-np.inf], HIST_Z_EDGES, [np.inf]]))
    assert np.abs(rec["hist_z"] - counts / z.size).max() <= 2 / z.size  # a value on a bin edge may move
    # the MP columns, from numpy's singular values and the analytic edges
    c, x = 120 / 300, s**2 / (300 * w32.var())
    assert rec["mp_spikes"] == int((x > (1 + np.sqrt(c)) ** 2).sum())
    assert rec["mp_below"] == pytest.approx((x < (1 - np.sqrt(c)) ** 2).mean(), abs=1.5 / 120)
    inner = mp_quantile(np.arange(1, 8) / 8, c)
    p = np.bincount(np.searchsorted(inner, x), minlength=8) / 120
    assert rec["mp_kl"] == pytest.approx(np.sum(p[p > 0] * np.log(8 * p[p > 0])), abs=0.02)
    alpha, xmin, ks = _powerlaw_reference(s**2)
    assert (rec["alpha"], rec["alpha_xmin"], rec["alpha_ks"]) == pytest.approx((alpha, xmin, ks), rel=1e-6)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shape", [(300, 1200), (400, 400)])
def test_gaussian_matrix_follows_the_law(seed, shape):
    """Nothing above the edge (Tracy-Widom fluctuations are ~n^(-2/3): at most one may peek out),
    nothing below the lower edge, a small KL."""
    w = np.random.default_rng(seed).standard_normal(shape) * 0.02
    rec = _records(w)
    assert rec["mp_spikes"] <= 1
    assert rec["mp_below"] <= 1 / min(shape)
    assert rec["mp_kl"] < 0.02
    s = rec["sv"]
    c = min(shape) / max(shape)
    assert s[0] ** 2 / (max(shape) * rec["std"] ** 2) == pytest.approx((1 + np.sqrt(c)) ** 2, rel=0.05)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_planted_spikes_are_counted_exactly(k):
    """k rank-one terms with singular values 3x the bulk edge (far above the BBP threshold)."""
    rng = np.random.default_rng(k)
    m, n, sigma = 300, 900, 0.02
    w = rng.standard_normal((m, n)) * sigma
    u, _ = np.linalg.qr(rng.standard_normal((m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((n, k)))
    edge = sigma * (np.sqrt(m) + np.sqrt(n))
    w += (u * (3 * edge * (1 + 0.1 * np.arange(k)))) @ v.T
    assert _records(w)["mp_spikes"] == k
    assert mp_spikes(np.array([0.5, 1.0, 4.0, 4.5, 9.0]), 1.0) == 2  # edge (1 + 1)^2 = 4: strictly above


def test_mass_below_the_lower_edge():
    """A matrix with 20% of its singular directions shrunk to 1% has mass 0.2 below the edge."""
    rng = np.random.default_rng(5)
    m, n = 200, 800
    u, _ = np.linalg.qr(rng.standard_normal((m, m)))
    v, _ = np.linalg.qr(rng.standard_normal((n, m)))
    s = np.sqrt(n) * np.sqrt(np.linspace(0.4, 2.0, m))
    s[:40] *= 0.01
    rec = _records((u * s) @ v.T)
    assert rec["mp_below"] == pytest.approx(40 / 200)
    assert mp_below(np.array([[0.0, 0.3, 1.0, 2.0]]), 0.25)[0] == pytest.approx(0.25)  # x_- = 0.25, strict


def test_mp_kl_bounds():
    c = 0.25
    assert mp_kl(mp_quantile((np.arange(800) + 0.5) / 800, c)[None], c)[0] == pytest.approx(0, abs=1e-12)
    assert mp_kl(np.full((1, 50), 100.0), c)[0] == pytest.approx(np.log(8))
    assert np.isnan(mp_kl(np.full((1, 5), np.nan), c)[0])


def test_constant_matrix_gives_nan_not_an_error():
    rec = _records(np.full((20, 40), 0.5))
    assert np.isnan(rec["mp_kl"]) and np.isnan(rec["mp_below"]) and rec["mp_spikes"] == 0


# ----------------------------------------------------------------------------- alpha


@pytest.mark.parametrize("alpha", [1.8, 2.5, 3.5, 5.0])
def test_alpha_of_a_pareto_esd_matches_powerlaw(alpha):
    rng = np.random.default_rng(int(alpha * 10))
    evals = (rng.pareto(alpha - 1, 600) + 1) * 2.5  # density ~ x^(-alpha) above 2.5
    mine = powerlaw_fit(evals)
    assert mine == pytest.approx(_powerlaw_reference(evals), rel=1e-9)
    assert mine[0] == pytest.approx(alpha, rel=0.15)


@pytest.mark.parametrize("seed", range(3))
def test_alpha_of_heavy_tailed_matrices_matches_powerlaw(seed):
    """Student-t entries give a power-law ESD tail; the column equals powerlaw's fit of numpy's eigenvalues."""
    rng = np.random.default_rng(seed)
    w = rng.standard_t(2.5 + seed, size=(150, 400))
    rec = _records(w, role="attn_out")
    evals = np.linalg.svd(w, compute_uv=False) ** 2
    assert (rec["alpha"], rec["alpha_xmin"], rec["alpha_ks"]) == pytest.approx(_powerlaw_reference(evals), rel=1e-6)


def test_alpha_of_too_few_values_is_nan():
    assert all(np.isnan(v) for v in powerlaw_fit(np.array([1.0, 2.0, 3.0])))
