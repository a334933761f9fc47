"""Essential dynamics (analysis/stages/essential.py): the principal components against numpy's SVD, a synthetic trajectory's
known cusp, the sample's positions and tokens."""

from __future__ import annotations

import numpy as np
import pytest

from headwatch.analysis.stages import essential as ed


def _svd_scores(outputs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference: centre over checkpoints, thin SVD, scores U S, explained S^2 / sum S^2 (numpy only)."""
    x = outputs - outputs.mean(axis=0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    return u[:, :k] * s[:k], (s**2 / np.sum(s**2))[:k]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_principal_components_match_numpys_svd(dtype) -> None:
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, 30)[:, None]
    outputs = (
        np.hstack([np.sin(3 * t), t**2, np.cos(5 * t)]) @ rng.normal(size=(3, 500)) + 0.01 * rng.normal(size=(30, 500))
    ).astype(dtype)
    scores, explained = ed.principal_components(outputs, components=3)
    ref, ref_explained = _svd_scores(outputs.astype(np.float64), 3)
    tol = 1e-9 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(explained, ref_explained, rtol=tol * 10)
    for j in range(3):  # a component's sign is free: compare up to it
        sign = np.sign(scores[:, j] @ ref[:, j])
        np.testing.assert_allclose(scores[:, j], sign * ref[:, j], atol=tol * np.abs(ref[:, j]).max())
        assert scores[np.argmax(np.abs(scores[:, j])), j] > 0  # the stated sign convention


def test_a_trajectory_that_turns_back_has_its_cusp_found() -> None:
    """Outputs that move along one direction to checkpoint 12 and then back along another (a V in component
    space), with small noise: the cusp is at checkpoint 12 and nowhere else, in 20 of 20 draws."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 400))
    t = np.arange(25, dtype=np.float64)
    for seed in range(20):
        noise = np.random.default_rng(seed).normal(0, 0.02, size=(25, 400))
        path = np.where(t[:, None] <= 12, t[:, None] * a, 12 * a + (t[:, None] - 12) * (0.3 * b - 0.8 * a))
        scores, _ = ed.principal_components(path + noise)
        assert np.flatnonzero(ed.cusps(scores)).tolist() == [12], seed


def test_jitter_where_the_path_stalls_is_no_cusp() -> None:
    """A path that moves steadily to checkpoint 20 and then stalls, only jittering (as a trained model's outputs do
    late in training): the jitter turns the stalled path every way, but no checkpoint is a cusp, in 20 of 20 draws."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=300)
    t = np.minimum(np.arange(40, dtype=np.float64), 20)[:, None]
    for seed in range(20):
        scores, _ = ed.principal_components(t * a + np.random.default_rng(seed).normal(0, 0.3, size=(40, 300)))
        assert np.nanmax(ed.turning_angles(scores)[25:]) > 90  # the stall does turn
        assert not ed.cusps(scores).any(), seed


def test_a_straight_or_gently_bending_path_has_no_cusp() -> None:
    t = np.linspace(0, 1, 40)[:, None]
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 300))
    bend = t * a + t**2 * b  # turns by less than 90 degrees over the whole path
    scores, _ = ed.principal_components(bend + 0.001 * rng.normal(size=bend.shape))
    assert not ed.cusps(scores).any()
    assert np.nanmax(ed.turning_angles(scores)) < 90


def test_the_sample_positions_and_tokens() -> None:
    assert ed.sample_positions(64).tolist() == [1, 10, 18, 27, 36, 45, 53, 62]  # 1 + 61 i / 7, rounded
    assert ed.sample_positions(5).tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="at least 3"):
        ed.sample_positions(2)
    assert ed.token_subset(np.array([3, 3]), 100).tolist() == list(range(100))  # a small vocabulary: every token
    targets = np.array([7, 7, 7, 2, 2, 9, 500, 500, 500, 500])
    assert ed.token_subset(targets, 1000, size=4).tolist() == [2, 7, 9, 500]
    assert ed.token_subset(targets, 1000, size=6).tolist() == [0, 1, 2, 7, 9, 500]  # then the lowest unseen ids


def test_bad_outputs_are_refused() -> None:
    with pytest.raises(ValueError, match="T >= 2"):
        ed.principal_components(np.zeros((1, 5)))
    with pytest.raises(ValueError, match="non-finite"):
        ed.principal_components(np.array([[0.0, np.nan], [1.0, 2.0]]))
