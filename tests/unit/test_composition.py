"""analysis.weights.composition against dense numpy products, a planted pair and the analytic baseline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headwatch.analysis.weights.composition import (
    KINDS,
    baseline_draws,
    baseline_rms,
    composition_scores,
    random_baseline,
    strongest_sources,
)


def dense_scores(w_q: np.ndarray, w_k: np.ndarray, w_o_t: np.ndarray, w_v: np.ndarray) -> np.ndarray:
    """The scores by definition, from the d_model x d_model matrices (float64 numpy), pair by pair."""
    n_layers, n_heads = w_q.shape[:2]
    out = np.full((3, n_layers, n_heads, n_layers, n_heads), np.nan)
    for lb in range(n_layers):
        for hb in range(n_heads):
            w_qk = w_q[lb, hb].T @ w_k[lb, hb]  # (d_model, d_model): W_QK = W_Q^T W_K
            ov_b = w_o_t[lb, hb].T @ w_v[lb, hb]  # W_OV = W_O W_V
            for la in range(lb):
                for ha in range(n_heads):
                    ov_a = w_o_t[la, ha].T @ w_v[la, ha]
                    for i, (m, prod) in enumerate(((w_qk, w_qk.T @ ov_a), (w_qk, w_qk @ ov_a), (ov_b, ov_b @ ov_a))):
                        out[i, la, ha, lb, hb] = np.linalg.norm(prod) / (np.linalg.norm(m) * np.linalg.norm(ov_a))
    return out


def random_factors(rng: np.random.Generator, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [rng.normal(size=shape) for _ in range(4)]


@pytest.mark.parametrize("dtype,rtol", [(torch.float64, 1e-10), (torch.float32, 5e-6)])
def test_every_score_equals_the_dense_product(dtype, rtol) -> None:
    rng = np.random.default_rng(0)
    w = random_factors(rng, (4, 3, 5, 17))  # (layers, heads, d_head, d_model)
    w[1][2] += 0.8 * w[2][1]  # layer-2 keys read what layer-1 writes: some large K scores
    t = [torch.as_tensor(x, dtype=dtype) for x in w]
    before = [x.clone() for x in t]
    got = composition_scores((t[0], t[1]), (t[2], t[3]), dtype=dtype, chunk_elements=200)  # several chunks
    assert all(torch.equal(a, b) for a, b in zip(t, before, strict=True)), "inputs modified"
    want = dense_scores(*(x.double().numpy() for x in t))
    assert got.shape == (3, 4, 3, 4, 3) and got.dtype == torch.float64
    assert np.array_equal(np.isnan(got.numpy()), np.isnan(want))
    for la in range(4):
        for lb in range(4):
            block = np.isnan(want[:, la, :, lb])
            assert block.all() if la >= lb else not block.any(), (la, lb)
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=0)
    assert np.nanmax(got.numpy()) <= 1.0


def test_a_planted_k_composition_pair_scores_highest() -> None:
    """Head (0, 1) writes into a d_head-dimensional subspace S that head (2, 0)'s keys alone read."""
    rng = np.random.default_rng(1)
    n_layers, n_heads, d_head, d_model = 3, 4, 4, 64
    w_q, w_k, w_o_t, w_v = random_factors(rng, (n_layers, n_heads, d_head, d_model))
    basis = np.linalg.qr(rng.normal(size=(d_model, d_head)))[0].T  # (d_head, d_model): S
    w_o_t[0, 1] = rng.normal(size=(d_head, d_head)) @ basis  # A writes only into S
    w_k[2, 0] = rng.normal(size=(d_head, d_head)) @ basis  # B's keys read only S
    scores = composition_scores((torch.tensor(w_q), torch.tensor(w_k)), (torch.tensor(w_o_t), torch.tensor(w_v))).numpy()
    k = scores[KINDS.index("k")]
    assert np.unravel_index(np.nanargmax(k), k.shape) == (0, 1, 2, 0)
    assert k[0, 1, 2, 0] > 3 * np.nanmedian(k)  # the median is about 1/sqrt(d_model)
    np.testing.assert_allclose(scores, dense_scores(w_q, w_k, w_o_t, w_v), rtol=1e-10)


def test_a_scalar_layernorm_gain_cancels_and_an_anisotropic_one_does_not() -> None:
    """What leaving LayerNorm unfolded means: folding a gain gamma multiplies the reading factors'
    columns by gamma. A uniform gamma leaves every score as it is; a varying one changes them, so
    the integration test can tell folded from unfolded scores."""
    rng = np.random.default_rng(2)
    w = [torch.tensor(x) for x in random_factors(rng, (3, 2, 4, 12))]
    plain = composition_scores((w[0], w[1]), (w[2], w[3]))
    reading = (0, 1, 3)  # W_Q, W_K, W_V read the stream; W_O^T writes it
    uniform = [x * 3.7 if i in reading else x for i, x in enumerate(w)]
    torch.testing.assert_close(composition_scores((uniform[0], uniform[1]), (uniform[2], uniform[3])), plain, equal_nan=True)
    gamma = torch.tensor(rng.uniform(0.2, 3.0, size=(3, 1, 1, 12)))
    varying = [x * gamma if i in reading else x for i, x in enumerate(w)]
    folded = composition_scores((varying[0], varying[1]), (varying[2], varying[3]))
    assert (folded - plain).abs().nan_to_num().max() > 0.05


def test_strongest_sources_keeps_the_union_of_each_kinds_top_k() -> None:
    rng = np.random.default_rng(3)
    w = [torch.tensor(x) for x in random_factors(rng, (4, 3, 4, 16))]
    scores = composition_scores((w[0], w[1]), (w[2], w[3]))
    keep = strongest_sources(scores, 2).numpy()
    s = scores.numpy()
    for lb in range(4):
        for hb in range(3):
            want = set()
            for kind in range(3):
                sources = [(s[kind, la, ha, lb, hb], la, ha) for la in range(lb) for ha in range(3)]
                want |= {(la, ha) for _, la, ha in sorted(sources, reverse=True)[:2]}
            got = {(la, ha) for la in range(4) for ha in range(3) if keep[la, ha, lb, hb]}
            assert got == want, (lb, hb)
    assert strongest_sources(scores, 100).numpy().sum() == (~np.isnan(s[0])).sum()
    with pytest.raises(ValueError, match="k=0"):
        strongest_sources(scores, 0)


def test_the_analytic_mean_square_matches_simulation_and_bounds_the_simulated_baseline() -> None:
    """E[score^2] = 1/d_model for independent Gaussian factors, for every kind; the simulated mean
    score lies just below its square root (Jensen)."""
    d_head, d_model = 6, 40
    gen = torch.Generator().manual_seed(7)
    w = torch.randn((4, 2, 48, d_head, d_model), generator=gen, dtype=torch.float64)
    scores = composition_scores((w[0], w[1]), (w[2], w[3]))[:, 0, :, 1, :]  # (3, 48, 48) pairs
    mean_square = (scores**2).mean(dim=(1, 2))
    np.testing.assert_allclose(mean_square.numpy(), 1.0 / d_model, rtol=0.05)
    # one draw of the baseline is the mean over those pairs
    assert baseline_draws(d_head, d_model, heads=48) == 64
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("headwatch.analysis.weights.composition.BASELINE_MAX_DRAWS", 1)
        one = random_baseline(d_head, d_model, heads=48, seed=7)
    np.testing.assert_allclose([one[k] for k in KINDS], scores.mean(dim=(1, 2)).numpy(), rtol=1e-12)
    baseline = random_baseline(d_head, d_model)  # 64 draws of 16 x 16 pairs
    for kind in KINDS:
        assert 0.9 * baseline_rms(d_model) < baseline[kind] < baseline_rms(d_model)
    assert random_baseline(d_head, d_model) == baseline  # a fixed seed
    assert baseline_draws(128, 2048) == 1


def test_refuses_mismatched_shapes() -> None:
    a = torch.zeros(2, 2, 3, 8)
    with pytest.raises(ValueError, match="one shape"):
        composition_scores((a, a), (a, torch.zeros(2, 2, 3, 9)))
    with pytest.raises(ValueError, match="d_head 9 exceeds d_model 8"):
        b = torch.zeros(2, 2, 9, 8)
        composition_scores((b, b), (b, b))
