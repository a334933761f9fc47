"""Stage boundaries on synthetic LLC and loss curves with known breakpoints and noise (analysis/stages/curve.py)."""

from __future__ import annotations

import numpy as np
import pytest

from headwatch.analysis.stages.curve import (
    StageRule,
    chain_standard_errors,
    llc_stages,
    loss_noise,
    loss_stages,
    pooled_standard_error,
    segment,
    standard_errors,
)

# A log-spaced schedule like the reference run's: 0, 1, 2, 4, ..., 512, then every 64 to 4096.
STEPS = np.array([0] + [2**i for i in range(10)] + list(range(576, 4097, 64)))
U = np.log10(1 + STEPS)


def piecewise(knots_u: list[float], knots_y: list[float]) -> np.ndarray:
    return np.interp(U, knots_u, knots_y)


def test_peak_trough_and_plateau_found_within_one_checkpoint() -> None:
    """Rise to step 16, fall to 256, flat to 1024, rise to the end, with noise of half a unit (each feature
    changes by at least 5 standard errors between neighbouring checkpoints): in at least 18 of 20 draws the
    four stages are found with every boundary within one checkpoint of where the curve was built to turn
    (the misses merge the end of the fall into the flat stretch, which one point tells apart)."""
    knots = [U[0], np.log10(17), np.log10(257), np.log10(1025), U[-1]]
    clean = piecewise(knots, [0.0, 40.0, 20.0, 20.0, 45.0])
    sigma = 0.5
    found = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        stages = llc_stages(STEPS, clean + rng.normal(0, sigma, len(STEPS)), sigma)
        assert stages[0].start_step == 0 and stages[-1].end_step == STEPS[-1]
        assert stages[0].trend == "rising" and stages[-1].trend == "rising"
        if [s.trend for s in stages] != ["rising", "falling", "flat", "rising"]:
            continue
        assert [s.boundary for s in stages[1:]] == ["LLC peak", "LLC stops falling", "LLC starts rising"]
        near = [
            abs(int(np.searchsorted(STEPS, s.start_step)) - int(np.searchsorted(STEPS, w))) <= 1
            for s, w in zip(stages[1:], (16, 256, 1024), strict=True)
        ]
        found += all(near)
    assert found >= 18, f"{found} of 20 draws found the four stages"


def test_sparse_llc_like_the_reference_run() -> None:
    """8 log-spaced estimates (the shipped runs' schedule): rise, fall, rise with the peak and trough at the
    points where they were put."""
    steps = np.array([0, 1, 4, 16, 32, 128, 512, 1536])
    llc = np.array([0.0, 12.0, 36.0, 26.0, 18.0, 18.5, 29.0, 40.0])
    stages = llc_stages(steps, llc, 1.0)
    assert [(s.start_step, s.end_step, s.trend) for s in stages] == [
        (0, 4, "rising"),
        (4, 32, "falling"),
        (32, 128, "flat"),
        (128, 1536, "rising"),
    ]
    assert stages[1].start_value == 36.0 and stages[1].end_value == 18.0


@pytest.mark.parametrize("n_points", [8, 40])
def test_pure_noise_within_the_spread_makes_no_stage(n_points: int) -> None:
    """A flat curve with noise of the stated spread gives one flat stage in at least 97% of 300 draws (the
    rule tests at 3 standard errors)."""
    steps = STEPS[np.linspace(0, len(STEPS) - 1, n_points).astype(int)]
    rng = np.random.default_rng(1)
    extra = 0
    for _ in range(300):
        stages = llc_stages(steps, 30 + rng.normal(0, 2.0, n_points), 2.0)
        extra += len(stages) != 1 or stages[0].trend != "flat"
    assert extra <= 9, f"{extra} of 300 noise-only curves got a stage boundary"


def test_a_change_below_k_standard_errors_is_not_a_stage_but_above_is() -> None:
    steps = np.array([1, 2, 4, 8, 16, 32])
    step_up = np.array([10.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    step_up[3:] += 2.0  # 2 sigma with sigma = 1: within the noise at k = 3
    assert [s.trend for s in llc_stages(steps, step_up, 1.0)] == ["flat"]
    step_up[3:] += 10.0  # 12 sigma: a rise
    assert "rising" in [s.trend for s in llc_stages(steps, step_up, 1.0)]


def test_segment_matches_brute_force_over_every_cut() -> None:
    """The dynamic programme's cut is the cheapest of all 2^(n-2) cuts, each priced by numpy's own line fit."""
    from itertools import combinations, pairwise

    rng = np.random.default_rng(3)
    u = np.sort(rng.uniform(0, 3, 9))
    y = np.abs(u - 1.2) * 5 + rng.normal(0, 0.3, 9)

    def rss(i: int, j: int) -> float:
        if j - i < 2:
            return 0.0
        _, res, *_ = np.polyfit(u[i : j + 1], y[i : j + 1], 1, full=True)
        return float(res[0]) if len(res) else 0.0

    best = None
    for r in range(0, 8):
        for inner in combinations(range(1, 8), r):
            cuts = [0, *inner, 8]
            cost = sum(rss(a, b) for a, b in pairwise(cuts)) / 0.3**2 + 9.0 * r
            best = min(best or (np.inf, ()), (cost, tuple(cuts)))
    found = segment(u, y, 0.3, penalty=9.0)
    assert best is not None
    assert tuple([0, *[j for _, j in found]]) == best[1]


def test_loss_plateau_between_drops() -> None:
    """A loss that drops fast, nearly stalls from step 32 to 128, then drops again: one plateau there."""
    clean = piecewise([U[0], np.log10(33), np.log10(129), U[-1]], [6.0, 3.0, 2.95, 1.8])
    rng = np.random.default_rng(4)
    loss = clean + rng.normal(0, 0.004, len(STEPS))
    stages = loss_stages(STEPS, loss)
    assert [s.trend for s in stages] == ["drop", "plateau", "drop"], stages
    assert abs(np.searchsorted(STEPS, stages[1].start_step) - np.searchsorted(STEPS, 32)) <= 1
    assert abs(np.searchsorted(STEPS, stages[2].start_step) - np.searchsorted(STEPS, 128)) <= 1
    assert stages[1].boundary == "loss plateau begins" and stages[2].boundary == "loss drop begins"


def test_steady_loss_decline_is_one_drop() -> None:
    loss = 5.0 - 1.0 * U + np.random.default_rng(5).normal(0, 0.003, len(STEPS))
    assert [s.trend for s in loss_stages(STEPS, loss)] == ["drop"]


def test_loss_noise_recovers_the_jitter_of_a_smooth_curve() -> None:
    rng = np.random.default_rng(6)
    x = np.linspace(0, 1, 2000)
    assert loss_noise(3 * np.exp(-3 * x) + rng.normal(0, 0.01, len(x))) == pytest.approx(0.01, rel=0.06)


def test_standard_errors_from_population_std_and_from_chains() -> None:
    rng = np.random.default_rng(7)
    chains = rng.normal(10, 2, (50, 4))
    want = chains.std(axis=1, ddof=1) / 2.0
    np.testing.assert_allclose(chain_standard_errors(chains), want)
    np.testing.assert_allclose(standard_errors(llc_std=chains.std(axis=1), chains=4), want)
    assert pooled_standard_error(np.array([3.0, 4.0, np.nan])) == pytest.approx(np.sqrt(12.5))


def test_bad_input_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="increase"):
        llc_stages(np.array([0, 2, 1]), np.zeros(3), 1.0)
    with pytest.raises(ValueError, match="finite"):
        llc_stages(np.array([0, 1, 2]), np.array([0.0, np.nan, 1.0]), 1.0)
    with pytest.raises(ValueError, match="2 chains"):
        llc_stages(np.array([0, 1, 2]), np.zeros(3), 0.0)
    with pytest.raises(ValueError, match="standard errors"):
        StageRule(k=0)
    assert llc_stages(np.array([0, 1]), np.zeros(2), 1.0) == []


def test_the_stages_module_on_a_folder_that_is_not_a_store_says_so(tmp_path, capsys) -> None:
    from headwatch.precompute.lenses.stages import main

    assert main([str(tmp_path / "nowhere")]) == 2
    assert "is not a statistics store" in capsys.readouterr().err
