"""analysis.weights.heads.checkpoint_statistics against a brute-force NumPy loop over heads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headwatch.analysis.store.format import CIRCUIT_COLUMNS, HIST_Z_EDGES, NULL_COLUMNS, SCALAR_COLUMNS
from headwatch.analysis.weights.heads import checkpoint_statistics

N_LAYERS, N_HEADS, D_HEAD, D_MODEL = 2, 3, 8, 64
N = D_MODEL * D_MODEL


@pytest.fixture(scope="module")
def weights() -> tuple[np.ndarray, np.ndarray]:
    """float64 (n_layers, n_heads, d_head, d_model) weights; heads differ in scale and shape."""
    rng = np.random.default_rng(0)
    w_q = rng.normal(0.0, 0.05, (N_LAYERS, N_HEADS, D_HEAD, D_MODEL))
    w_k = rng.normal(0.0, 0.05, (N_LAYERS, N_HEADS, D_HEAD, D_MODEL))
    w_q[0, 1] *= 10.0
    w_k[1, 2] = rng.laplace(0.01, 0.05, (D_HEAD, D_MODEL))
    w_q[1, 0, :, :4] += 1.0  # a few outlier features: heavy tails, non-zero mean
    return w_q, w_k


@pytest.fixture(scope="module")
def brute_force(weights, reference) -> dict[str, np.ndarray]:
    """Every statistic by a plain per-head loop over dense float64 W_QK = W_Q^T W_K."""
    w_q, w_k = weights
    out: dict[str, list] = {}
    for layer in range(N_LAYERS):
        for head in range(N_HEADS):
            dense = w_q[layer, head].T @ w_k[layer, head]  # (d_model, d_model)
            row = {**reference.elementwise(dense, HIST_Z_EDGES), **reference.spectral(dense, D_HEAD)}
            for name, value in row.items():
                out.setdefault(name, []).append(value)
    arrays = {name: np.array(values).reshape(N_LAYERS, N_HEADS, -1) for name, values in out.items()}
    return {name: a if name in ("sv", "hist_z") else a[..., 0] for name, a in arrays.items()}


def _check_shapes(got: dict[str, np.ndarray]) -> None:
    assert set(got) == set(SCALAR_COLUMNS) | set(NULL_COLUMNS) | set(CIRCUIT_COLUMNS) | {"sv", "hist_z"}
    for name in SCALAR_COLUMNS + NULL_COLUMNS + CIRCUIT_COLUMNS:
        assert got[name].shape == (N_LAYERS, N_HEADS), name
        assert got[name].dtype == np.float64, name
    assert got["sv"].shape == (N_LAYERS, N_HEADS, D_HEAD)
    assert got["hist_z"].shape == (N_LAYERS, N_HEADS, len(HIST_Z_EDGES) + 1)


@pytest.mark.parametrize(
    "chunk_elements",
    [2**26, 2 * N, N, 1],  # all heads at once; chunks of 2 + 1 heads; one head per chunk; below one head
)
def test_float64_matches_brute_force(weights, brute_force, chunk_elements: int) -> None:
    w_q, w_k = weights
    got = checkpoint_statistics(w_q, w_k, dtype=torch.float64, chunk_elements=chunk_elements)

    _check_shapes(got)
    for name in (
        "mean",
        "std",
        "skew",
        "kurtosis",
        "min",
        "max",
        "kl_gauss",
        "stable_rank",
        "spectral_entropy",
        "participation_ratio",
        "condition_number",
        "frob_norm",
        "spectral_norm",
    ):
        np.testing.assert_allclose(got[name], brute_force[name], rtol=1e-9, atol=0, err_msg=name)
    np.testing.assert_allclose(got["sv"], brute_force["sv"], rtol=1e-9)
    np.testing.assert_array_equal(got["hist_z"], brute_force["hist_z"])


def test_float32_default_within_tolerances_of_float64_reference(weights, brute_force) -> None:
    """The default: dense product and element-wise statistics in float32, spectrum in float64."""
    w_q, w_k = weights
    got = checkpoint_statistics(w_q.astype(np.float32), w_k.astype(np.float32), chunk_elements=2 * N)
    ref = brute_force

    _check_shapes(got)
    sigma = ref["std"]
    np.testing.assert_array_less(np.abs(got["mean"] - ref["mean"]) / sigma, 1e-5)
    for name in ("std", "min", "max"):
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(got["skew"], ref["skew"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(got["kurtosis"], ref["kurtosis"], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(got["hist_z"], ref["hist_z"], rtol=0, atol=3.0 / N)  # <= 3 entries per bin
    np.testing.assert_allclose(got["kl_gauss"], ref["kl_gauss"], rtol=0, atol=1e-3)
    for name in (
        "sv",
        "stable_rank",
        "spectral_entropy",
        "participation_ratio",
        "condition_number",
        "frob_norm",
        "spectral_norm",
    ):
        # the weights themselves were rounded to float32: relative error ~1e-7 * conditioning
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, err_msg=name)


def test_float64_weights_keep_float64_spectrum_with_float32_dense_product() -> None:
    """spectrum_dtype is the precision of the spectrum of the given weights, whatever `dtype` is."""
    scales = np.logspace(0, -9, D_HEAD)  # exact singular values 1 .. 1e-9
    rng = np.random.default_rng(1)
    u, _ = np.linalg.qr(rng.standard_normal((D_HEAD, D_HEAD)))
    v, _ = np.linalg.qr(rng.standard_normal((D_MODEL, D_HEAD)))
    k, _ = np.linalg.qr(rng.standard_normal((D_MODEL, D_HEAD)))
    # W_Q = U S V^T mixes the scales in every entry, so rounding W_Q to float32 would
    # bury the small singular values; W_K has orthonormal rows: the s_k of W_QK are S.
    w_q = (u @ np.diag(scales) @ v.T)[None, None]  # (1, 1, d_head, d_model)
    w_k = k.T[None, None].copy()
    got = checkpoint_statistics(w_q, w_k, dtype=torch.float32)
    np.testing.assert_allclose(got["sv"][0, 0], scales, rtol=1e-5)
    assert got["condition_number"][0, 0] == pytest.approx(1e9, rel=1e-4)


def test_inputs_not_modified_and_torch_inputs_accepted(weights, brute_force) -> None:
    w_q, w_k = (torch.from_numpy(w.copy()) for w in weights)
    got = checkpoint_statistics(w_q, w_k, dtype=torch.float64)
    assert torch.equal(w_q, torch.from_numpy(weights[0]))
    assert torch.equal(w_k, torch.from_numpy(weights[1]))
    np.testing.assert_allclose(got["stable_rank"], brute_force["stable_rank"], rtol=1e-9)


def test_rejects_mismatched_or_wrong_rank_shapes(weights) -> None:
    w_q, w_k = weights
    with pytest.raises(ValueError, match="n_layers, n_heads, d_head, d_model"):
        checkpoint_statistics(w_q, w_k[:, :2])
    with pytest.raises(ValueError, match="n_layers, n_heads, d_head, d_model"):
        checkpoint_statistics(w_q[0], w_k[0])


def test_unknown_device_is_refused(weights) -> None:
    with pytest.raises(ValueError, match="tpu"):
        checkpoint_statistics(*weights, device="tpu")  # type: ignore[arg-type]  # an unknown device on purpose


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error(weights) -> None:
    with pytest.raises(ValueError, match="cuda"):
        checkpoint_statistics(*weights, device="cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(weights, brute_force) -> None:
    w_q, w_k = (w.astype(np.float32) for w in weights)
    cpu = checkpoint_statistics(w_q, w_k, device="cpu", chunk_elements=2 * N)
    cuda = checkpoint_statistics(w_q, w_k, device="cuda", chunk_elements=2 * N)
    auto = checkpoint_statistics(w_q, w_k, device="auto", chunk_elements=2 * N)

    _check_shapes(cuda)
    for name in (*SCALAR_COLUMNS, "sv"):
        # float32 sums in another order: statistics of order one agree to a few float32 epsilons
        np.testing.assert_allclose(cuda[name], cpu[name], rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(auto[name], cuda[name], err_msg=name)
    # float32 rounding of z may move a few entries across a bin edge
    np.testing.assert_allclose(cuda["hist_z"], cpu["hist_z"], rtol=0, atol=3.0 / N)
    np.testing.assert_allclose(cuda["kl_gauss"], brute_force["kl_gauss"], rtol=0, atol=1e-3)
    # leading vectors on CUDA span the same directions as on CPU (signs are arbitrary)
    cpu_v = checkpoint_statistics(w_q, w_k, device="cpu", vectors=4)
    cuda_v = checkpoint_statistics(w_q, w_k, device="cuda", vectors=4)
    for name in ("u", "v"):
        overlap = np.abs(np.einsum("lhdk,lhdk->lhk", cpu_v[name].astype(np.float64), cuda_v[name].astype(np.float64)))
        np.testing.assert_allclose(overlap, 1.0, atol=1e-4, err_msg=name)


def test_leading_vectors_are_those_of_the_dense_product(weights) -> None:
    from headwatch.analysis.weights.heads import checkpoint_vectors

    w_q, w_k = weights
    plain = checkpoint_statistics(w_q, w_k)
    got = checkpoint_statistics(w_q, w_k, vectors=4)
    assert got["u"].shape == got["v"].shape == (N_LAYERS, N_HEADS, D_MODEL, 4) and got["u"].dtype == np.float32
    np.testing.assert_allclose(got["sv"], plain["sv"], rtol=1e-12)  # one factorization for values and vectors
    for layer in range(N_LAYERS):
        for head in range(N_HEADS):
            u, _s, vt = np.linalg.svd(w_q[layer, head].T @ w_k[layer, head])
            for j in range(4):  # each triplet up to a shared sign
                sign = np.sign(u[:, j] @ got["u"][layer, head, :, j])
                np.testing.assert_allclose(got["u"][layer, head, :, j] * sign, u[:, j], atol=1e-6)
                np.testing.assert_allclose(got["v"][layer, head, :, j] * sign, vt[j], atol=1e-6)
    # the re-read path of a resumed precompute gives the same vectors bit for bit
    u, v = checkpoint_vectors(w_q, w_k, 4)
    np.testing.assert_array_equal(u, got["u"])
    np.testing.assert_array_equal(v, got["v"])


def test_null_columns_follow_the_null_model_of_the_reference_spectrum(weights, brute_force) -> None:
    from headwatch.analysis.rmt.nullmodel import kl_null, null_expectations

    got = checkpoint_statistics(*weights, dtype=torch.float64)
    np.testing.assert_allclose(got["kl_null"], kl_null(brute_force["sv"] ** 2, D_HEAD / D_MODEL), atol=1e-12)
    expected = null_expectations(D_MODEL, D_HEAD)
    for name in ("stable_rank", "spectral_entropy", "participation_ratio"):
        np.testing.assert_allclose(got[f"{name}_over_null"], brute_force[name] / expected[name], rtol=1e-9)


def test_constant_and_nearly_constant_products_fall_back_to_the_dense_moments(reference) -> None:
    """The mean and E[w^2] come from the factors; where sigma^2 = E[w^2] - mean^2 cancels
    (a constant product, or one whose spread is 1e-6 of its mean) the dense pass decides."""
    rng = np.random.default_rng(3)
    w_q = np.zeros((1, 3, D_HEAD, D_MODEL))
    w_k = np.zeros((1, 3, D_HEAD, D_MODEL))
    w_q[0, :, 0] = 0.5  # rank one, every entry 0.5 * 0.2 = 0.1
    w_k[0, :, 0] = 0.2
    w_k[0, 1, 0] += rng.normal(0.0, 1e-6, D_MODEL)  # nearly constant
    w_q[0, 2] = rng.normal(0.0, 0.05, (D_HEAD, D_MODEL))  # an ordinary head beside them
    w_k[0, 2] = rng.normal(0.0, 0.05, (D_HEAD, D_MODEL))
    got = checkpoint_statistics(w_q, w_k, dtype=torch.float64)
    assert got["std"][0, 0] == 0.0 and np.isnan(got["skew"][0, 0]) and np.isnan(got["kurtosis"][0, 0])
    assert got["mean"][0, 0] == pytest.approx(0.1, rel=1e-15)
    for head in (1, 2):
        dense = w_q[0, head].T @ w_k[0, head]
        ref = reference.elementwise(dense, HIST_Z_EDGES)
        for name in ("mean", "std", "skew", "kurtosis"):
            np.testing.assert_allclose(got[name][0, head], ref[name], rtol=1e-6, err_msg=f"{head} {name}")
        np.testing.assert_allclose(got["hist_z"][0, head], ref["hist_z"], atol=1.5 / N)
