"""analysis.weights.similarity against dense numpy and scipy.linalg.subspace_angles, its invariance under a rotation
of the residual basis (and not under a scaling), the exact moments of its random baseline, and
analysis.weights.ultrametric on hand-built distances."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from scipy.cluster.hierarchy import cophenet, linkage
from scipy.spatial.distance import squareform
from scipy.stats import ortho_group

from headwatch.analysis.weights.similarity import (
    COLUMNS,
    baseline_layers,
    expected,
    head_bases,
    layer_ultrametricity,
    random_baseline,
    similarity,
)
from headwatch.analysis.weights.ultrametric import distance, triangles, ultrametric_shares


def dense_similarity(w_q: np.ndarray, w_k: np.ndarray, w_o_t: np.ndarray, w_v: np.ndarray) -> np.ndarray:
    """The statistics by definition, from the d_model x d_model matrices, pair by pair (numpy, scipy)."""
    n_layers, n_heads = w_q.shape[:2]
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    mats = {(la, ha): (w_q[la, ha].T @ w_k[la, ha], w_o_t[la, ha].T @ w_v[la, ha]) for la, ha in heads}
    out = np.full((6, n_layers, n_heads, n_layers, n_heads), np.nan)
    for i, a in enumerate(heads):
        for b in heads[i + 1 :]:
            for m in range(2):
                ma, mb = mats[a][m], mats[b][m]
                frob = np.sum(ma * mb) / (np.linalg.norm(ma) * np.linalg.norm(mb))
                col = np.mean(np.cos(scipy.linalg.subspace_angles(ma, mb)) ** 2)
                row = np.mean(np.cos(scipy.linalg.subspace_angles(ma.T, mb.T)) ** 2)
                out[3 * m : 3 * m + 3, a[0], a[1], b[0], b[1]] = frob, col, row
    return out


def factors(rng: np.random.Generator, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [rng.normal(size=shape) for _ in range(4)]


def run(w: list[np.ndarray], **kwargs) -> np.ndarray:
    t = [torch.as_tensor(x) for x in w]
    return similarity((t[0], t[1]), (t[2], t[3]), **kwargs).numpy()


@pytest.mark.parametrize("chunk_elements", [2**26, 4 * 5**2 * 2])  # one block; blocks of two heads
def test_every_statistic_equals_the_dense_matrices_and_scipy(chunk_elements) -> None:
    rng = np.random.default_rng(0)
    w = factors(rng, (3, 3, 5, 17))  # (layers, heads, d_head, d_model)
    w[1][0, 2, 3] = 0.0  # a rank-4 W_QK: its angles are min(rank) = 4 with the others
    w[3][2, 1, :2] = 0.0  # a rank-3 W_OV
    w[0][1, 1] += 0.9 * w[0][0, 0]  # some alike pairs, across layers
    w[2][2, 0] = -w[2][2, 2]  # W_OV of (2, 0) and (2, 2) share their column space
    before = [x.copy() for x in w]
    got = run(w, chunk_elements=chunk_elements)
    assert all(np.array_equal(a, b) for a, b in zip(w, before, strict=True)), "inputs modified"
    want = dense_similarity(*w)
    assert got.shape == (6, 3, 3, 3, 3)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert (~np.isnan(got)).sum() == 6 * math.comb(9, 2)  # every unordered pair, once
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert np.isclose(got[COLUMNS.index("ov_col"), 2, 0, 2, 2], 1.0)
    within = run(w, chunk_elements=chunk_elements, within_layers=True)  # what the baseline computes
    for la in range(3):
        for lb in range(3):
            if la == lb:
                np.testing.assert_allclose(within[:, la, :, lb], got[:, la, :, lb], rtol=0, atol=1e-14)
            else:
                assert np.isnan(within[:, la, :, lb]).all()


def test_float32_products_agree_to_float32_precision() -> None:
    rng = np.random.default_rng(3)
    w = factors(rng, (2, 4, 8, 64))
    got = similarity(*((torch.tensor(w[0]), torch.tensor(w[1])), (torch.tensor(w[2]), torch.tensor(w[3]))), dtype=torch.float32)
    np.testing.assert_allclose(got.numpy(), dense_similarity(*w), rtol=0, atol=2e-5)


def test_a_zero_head_has_no_statistics_and_a_negated_head_scores_minus_one() -> None:
    rng = np.random.default_rng(4)
    w = factors(rng, (1, 3, 4, 12))
    w[0][0, 1] = 0.0  # W_QK of head 1 is zero
    w[2][0, 2] = -w[2][0, 0]  # W_OV of head 2 = - W_OV of head 0 when W_V agrees
    w[3][0, 2] = w[3][0, 0]
    got = run(w)
    qk = [COLUMNS.index(c) for c in ("qk_frob", "qk_col", "qk_row")]
    assert np.isnan(got[qk, 0, 0, 0, 1]).all() and np.isnan(got[qk, 0, 1, 0, 2]).all()
    assert np.isfinite(got[qk, 0, 0, 0, 2]).all()
    assert got[COLUMNS.index("ov_frob"), 0, 0, 0, 2] == pytest.approx(-1.0, abs=1e-12)
    assert got[COLUMNS.index("ov_col"), 0, 0, 0, 2] == pytest.approx(1.0, abs=1e-12)


def test_head_bases_are_the_svd_of_the_product() -> None:
    rng = np.random.default_rng(5)
    x, y = (torch.tensor(rng.normal(size=(3, 4, 9))) for _ in range(2))
    x[1, 2] = 0.0  # a singular R: this head's basis comes from the full QR
    y[2, 0] = y[2, 3] + 1e-9 * torch.tensor(rng.normal(size=9))  # nearly rank 3: its solved rows are not orthonormal
    col, row, s, kept = head_bases(x, y)
    m = x.mT @ y
    np.testing.assert_allclose((col.mT @ torch.diag_embed(s) @ row).numpy(), m.numpy(), atol=1e-12)
    np.testing.assert_allclose(s.numpy(), torch.linalg.svdvals(m)[:, :4].numpy(), rtol=1e-6, atol=1e-12)
    for basis in (col, row):
        np.testing.assert_allclose((basis @ basis.mT).numpy(), np.broadcast_to(np.eye(4), (3, 4, 4)), atol=1e-12)
    assert kept.sum(1).tolist() == [4, 3, 4]


def test_a_rotation_of_the_residual_basis_changes_nothing_and_a_scaling_does() -> None:
    rng = np.random.default_rng(6)
    d_model = 24
    w = factors(rng, (2, 3, 4, d_model))
    w[1][1, 0] += 0.7 * w[1][0, 2]
    rotation = ortho_group.rvs(d_model, random_state=7)  # x -> R x, so every factor W -> W R^T
    got = run(w)
    rotated = run([x @ rotation.T for x in w])
    np.testing.assert_allclose(rotated, got, rtol=0, atol=1e-10)
    gamma = rng.uniform(0.2, 3.0, size=d_model)  # a LayerNorm gain folded into the weights: not orthogonal
    scaled = run([x * gamma for x in w])
    assert np.nanmax(np.abs(scaled - got)) > 1e-2
    uniform = run([x * 2.5 for x in w])  # a uniform gain cancels
    np.testing.assert_allclose(uniform, got, rtol=0, atol=1e-10)


def test_the_simulated_baseline_matches_the_exact_moments() -> None:
    n_heads, d_head, d_model = 8, 4, 32
    base = random_baseline(n_heads, d_head, d_model)
    exact = expected(d_head, d_model)
    layers = baseline_layers(n_heads)
    pairs = layers * math.comb(n_heads, 2)
    assert layers == math.ceil(5000 / math.comb(n_heads, 3))
    for m in ("qk", "ov"):
        # frob: mean 0, root mean square 1/d_model (a few standard errors)
        frob = base["mean"][f"{m}_frob"]
        assert frob is not None and abs(frob) < 4 * exact["frob_rms"] / math.sqrt(pairs)
        assert base["rms"][f"{m}_frob"] == pytest.approx(exact["frob_rms"], rel=0.1)
        for side in ("col", "row"):
            assert base["mean"][f"{m}_{side}"] == pytest.approx(exact[f"{side}_mean"], rel=0.02)
        for key in ("share", "share_of_max"):
            assert all((v := base[key][c]) is not None and 0.0 <= v <= 1.0 for c in COLUMNS)
    assert random_baseline(n_heads, d_head, d_model) == base, "same shapes, same seed: same numbers"
    assert random_baseline(2, d_head, d_model)["share"] == dict.fromkeys(COLUMNS)  # no triangle of two heads


def test_random_heads_look_ultrametric_by_the_largest_side_alone_but_not_by_the_spread() -> None:
    """Nearly equidistant random heads in a wide residual stream: why `share` is measured against the spread."""
    base = random_baseline(16, 16, 256)
    for c in COLUMNS:
        share_of_max, share = base["share_of_max"][c], base["share"][c]
        assert share_of_max is not None and share_of_max > 0.95, c
        assert share is not None and share < 0.3, c


# ------------------------------------------------------------------ analysis.weights.ultrametric


def test_a_hierarchy_is_ultrametric() -> None:
    rng = np.random.default_rng(8)
    points = rng.normal(size=(9, 3))
    d = squareform(cophenet(linkage(points, "average")))  # the dendrogram's merge heights: an ultrametric
    share, share_of_max, count = ultrametric_shares(d, 0.0)
    assert (share, share_of_max, count) == (1.0, 1.0, math.comb(9, 3))


def test_a_known_share_and_where_the_two_criteria_differ() -> None:
    # three points at distance 1 and a fourth at 1, 1, 2 from them: triangles {0,1,2}, {0,1,3} are
    # equilateral, {0,2,3} and {1,2,3} have sides 1, 1, 2 (a point between two others: not ultrametric)
    d = np.array([[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 2], [1, 1, 2, 0]], dtype=float)
    assert ultrametric_shares(d, 0.1) == (0.5, 0.5, 4)
    # one triangle with sides 10, 10.5, 11: the gap 0.5 is half the spread but 5% of the largest side
    t = np.array([[0, 10, 10.5], [10, 0, 11], [10.5, 11, 0]])
    assert ultrametric_shares(t, 0.1) == (0.0, 1.0, 1)
    assert ultrametric_shares(t, 0.5) == (1.0, 1.0, 1)
    # a line of points (every triangle degenerate): share 0; shifted and scaled: the same
    line = np.abs(np.subtract.outer(np.arange(6.0), np.arange(6.0)))
    assert ultrametric_shares(line, 0.1)[0] == 0.0
    assert ultrametric_shares(3 * line + 5, 0.1)[0] == 0.0
    d_shifted = 3 * d + 5
    assert ultrametric_shares(d_shifted, 0.1)[0] == 0.5


def test_nan_sides_leave_their_triangles_out_and_bad_input_is_refused() -> None:
    d = np.array([[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 2], [1, 1, 2, 0]], dtype=float)
    d[0, 3] = np.nan  # triangles {0,1,3} and {0,2,3} lose a side
    share, _, count = ultrametric_shares(d, 0.1)
    assert (share, count) == (0.5, 2)
    assert np.isnan(ultrametric_shares(np.ones((2, 2)))[0]) and len(triangles(2)) == 0
    with pytest.raises(ValueError, match="square"):
        ultrametric_shares(np.ones((3, 4)))
    with pytest.raises(ValueError, match="tolerance"):
        ultrametric_shares(np.ones((3, 3)), -0.1)
    with pytest.raises(ValueError, match="unknown similarity statistic"):
        distance("angle", np.ones(2))


def test_the_distances_are_the_chordal_ones() -> None:
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=(2, 6, 6))
    c = np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b))
    assert distance("frob", np.array(c)) == pytest.approx(np.linalg.norm(a / np.linalg.norm(a) - b / np.linalg.norm(b)))
    qa, qb = (np.linalg.qr(rng.normal(size=(10, 3)))[0] for _ in range(2))
    mean_cos2 = np.mean(np.cos(scipy.linalg.subspace_angles(qa, qb)) ** 2)
    chordal = np.linalg.norm(qa @ qa.T - qb @ qb.T) / np.sqrt(2 * 3)
    assert distance("col", np.array(mean_cos2)) == pytest.approx(chordal)


def test_layer_ultrametricity_reads_each_layers_block() -> None:
    rng = np.random.default_rng(10)
    w = factors(rng, (2, 5, 3, 16))
    values = run(w)
    got = layer_ultrametricity(values, 0.2)
    dense = dense_similarity(*w)
    for c, column in enumerate(COLUMNS):
        for layer in range(2):
            block = dense[c, layer, :, layer, :]
            d = distance(column.split("_", 1)[1], block)  # NaN below the diagonal: only i < j is read
            share, share_of_max, count = ultrametric_shares(d, 0.2)
            assert count == math.comb(5, 3)
            assert got["share"][c, layer] == share and got["share_of_max"][c, layer] == share_of_max
