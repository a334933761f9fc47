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


# --- the path read as Hoogland et al. read it: smoothed, its speed, turns, curvature and osculating centres ---


@pytest.mark.parametrize("radius", [0.5, 2.0])
def test_a_circles_curvature_and_centres_are_analytic(radius: float) -> None:
    """A circle of radius R traversed at any speed: kappa = 1/R everywhere and every osculating centre at its centre
    (its evolute is one point); central differences on 400 points leave an error of order (step)^2."""
    s = np.linspace(0.0, 1.0, 400)
    t = 2.0 * (s + 0.5 * s**2)  # uneven speed: curvature does not depend on it
    x, y = 3.0 + radius * np.cos(t), -1.0 + radius * np.sin(t)
    kappa, cx, cy = ed.curvature(x, y)
    inner = slice(2, -2)  # one-sided differences at the ends
    np.testing.assert_allclose(kappa[inner], 1.0 / radius, rtol=1e-3)
    np.testing.assert_allclose(cx[inner], 3.0, atol=1e-3 * radius)
    np.testing.assert_allclose(cy[inner], -1.0, atol=1e-3 * radius)


def test_a_parabolas_curvature_and_evolute_are_analytic() -> None:
    """y = x^2 traced as (s, s^2): kappa = 2 / (1 + 4 s^2)^(3/2), the osculating centre (-4 s^3, 1/2 + 3 s^2)."""
    s = np.linspace(-1.0, 1.0, 801)
    kappa, cx, cy = ed.curvature(s, s**2)
    inner = slice(2, -2)
    np.testing.assert_allclose(kappa[inner], (2.0 / (1.0 + 4.0 * s**2) ** 1.5)[inner], rtol=1e-4)
    np.testing.assert_allclose(cx[inner], (-4.0 * s**3)[inner], atol=1e-4)
    np.testing.assert_allclose(cy[inner], (0.5 + 3.0 * s**2)[inner], atol=1e-4)
    # float32 input: the same to single precision's differences
    k32, _, _ = ed.curvature(s.astype(np.float32), (s**2).astype(np.float32))
    np.testing.assert_allclose(k32[inner], kappa[inner], rtol=1e-2)


def test_smoothing_is_scipys_gaussian_filter_and_the_speed_numpys_gradient() -> None:
    from scipy.ndimage import gaussian_filter1d

    rng = np.random.default_rng(5)
    scores = rng.normal(size=(30, 3))
    np.testing.assert_allclose(ed.smoothed(scores, sigma=1.5), gaussian_filter1d(scores, 1.5, axis=0, mode="nearest"))
    np.testing.assert_array_equal(ed.smoothed(scores, sigma=0), scores)
    x = np.cumsum(rng.normal(size=(30, 2)), axis=0)
    hop = np.array([x[1] - x[0], *[(x[i + 1] - x[i - 1]) / 2 for i in range(1, 29)], x[29] - x[28]])  # (30, 2)
    np.testing.assert_allclose(ed.speed(x), np.linalg.norm(hop, axis=1))
    with pytest.raises(ValueError, match="0 or more"):
        ed.smoothed(scores, sigma=-1)


def _planted(path: np.ndarray, seed: int, noise: float = 0.01) -> np.ndarray:
    """A 2-D path embedded in 200 dimensions with noise, read back through the principal components."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(200, 2)))[0].T  # (2, 200) orthonormal
    scores, _ = ed.principal_components(path @ basis + noise * rng.normal(size=(len(path), 200)))
    return scores


def test_a_planted_cusp_is_found_with_its_angle_and_speed() -> None:
    """The semicubical parabola (t^2, t^3) halts at t = 0 and goes back the way it came, turning through 180 degrees:
    over 20 noisy draws the only turn with a verdict is a cusp at the middle checkpoint (+- 2: there the path moves
    slower than the noise), at a minimum of the
    speed, turning by more than the limit plus the margin."""
    t = np.linspace(-1.0, 1.0, 41)
    path = np.stack([t**2, t**3], axis=1)
    for seed in range(20):
        found = [x for x in ed.turns(_planted(path, seed)) if x.verdict != "none"]
        assert len(found) == 1 and found[0].verdict == "cusp" and abs(found[0].index - 20) <= 2, (seed, found)
        assert found[0].angle > ed.TURN_DEGREES + ed.MARGIN_DEGREES and found[0].travel > ed.ARC


def test_a_curve_without_a_cusp_has_none_and_none_near() -> None:
    """Half a circle at steady speed turns 180 degrees in all, but gently: its speed has no minimum that turns by
    anything near the limit, so the verdict is no cusp, with no turn within the margins."""
    t = np.linspace(0.0, np.pi, 41)
    path = np.stack([np.cos(t), np.sin(t)], axis=1)
    for seed in range(20):
        assert all(x.verdict == "none" for x in ed.turns(_planted(path, seed))), seed


def test_a_turn_on_the_rules_edge_is_near_not_a_verdict() -> None:
    """A path that turns by exactly 90 degrees at a halt (an L, slowing into the corner): neither a cusp nor no cusp
    is said of it; it is near one, reported with its angle."""
    t = np.linspace(-1.0, 1.0, 41)
    speed = np.abs(t)  # slows to a halt at the corner and speeds up again
    along = np.cumsum(speed) / np.sum(speed)
    corner = along[20]
    path = np.where(t[:, None] <= 0, np.stack([along - corner, 0 * t], 1), np.stack([0 * t, along - corner], 1))
    found = [x for x in ed.turns(path) if x.verdict != "none"]
    assert len(found) == 1 and found[0].verdict == "near" and abs(found[0].angle - 90.0) < ed.MARGIN_DEGREES, found


def test_a_store_trajectory_is_read_by_the_rule(tmp_path) -> None:
    """The shipped GPU-built induction-d512 store, one of whose speed minima turns by an angle within the margin of
    the rule's limit: read again, every speed minimum carries a verdict, the smoothed path and its curvature are
    given, and a turn within the margin (one at least, found here from the angles) is said to be near a cusp,
    neither a cusp nor none."""
    from pathlib import Path

    from headwatch.analysis.store import open_store

    store = open_store(Path(__file__).resolve().parents[2] / "data" / "induction-d512")
    found = ed.store_trajectory(store)
    assert found is not None
    path, _ = found
    for column in ("smooth1", "smooth2", "speed", "turn", "kappa", "centre_x", "centre_y", "verdict", "cusp"):
        assert column in path
    scores = path[[c for c in path.columns if c.startswith("pc")]].to_numpy()
    turns = ed.turns(scores)
    assert [path["verdict"].iloc[x.index] for x in turns] == [x.verdict for x in turns]
    edges = [abs(x.angle - ed.TURN_DEGREES) <= ed.MARGIN_DEGREES for x in turns]
    assert any(edges), [(x.index, x.angle) for x in turns]  # the store shows the case the test is about
    for x, edge in zip(turns, edges, strict=True):
        assert (x.verdict == "near") == edge, x


def test_the_turn_is_said_to_be_over_a_share_of_the_path_not_checkpoints() -> None:
    """store_trajectory's ``turn`` column is `arc_turns` over `ARC` of the path's length (as the module docstring and
    the code read it), not over `WINDOW` checkpoints."""
    doc = " ".join((ed.store_trajectory.__doc__ or "").split())
    assert "``turn`` (`arc_turns`: the angle over `ARC`" in doc and "over `WINDOW` checkpoints" not in doc
