"""The refined LLC's convergence diagnostics and flag rule (analysis/llc/diagnostics.py) on synthetic traces.

Three kinds of loss trace, as devinterp's calibration guidance describes them: one that rose and
flattened (a plateau plus noise), one still climbing (a linear rise plus noise) and one running
away (an exponential rise). Each is checked against the rule's statement, and the per-chain
statistics against numpy's own mean, variance and least-squares fit.
"""

from __future__ import annotations

import numpy as np
import pytest

from headwatch.analysis.llc.diagnostics import FLAG_NOTES, FLAGS, RISING_Z, chain_diagnostics, flag, rise_z

N_BETA = 30.0
INIT = 2.0  # loss at w*, nats per token


def estimates(trace: np.ndarray, burnin: int = 0) -> np.ndarray:
    return N_BETA * (trace[:, burnin:].mean(axis=1) - INIT)


def judged(trace: np.ndarray, params: int = 10_000, burnin: int = 0) -> str:
    d = chain_diagnostics(trace, burnin)
    return flag(estimates(trace, burnin), d.first_half, d.second_half, d.half_se, params)


def flat(chains: int = 4, draws: int = 200, seed: int = 0) -> np.ndarray:
    """Rose to a plateau 0.1 nats above w* within a few steps, then noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(draws)
    return INIT + 0.1 * (1 - np.exp(-t / 3.0)) + 0.01 * rng.standard_normal((chains, draws))


def rising(chains: int = 4, draws: int = 200, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return INIT + 0.002 * np.arange(draws) + 0.01 * rng.standard_normal((chains, draws))


def diverging(chains: int = 4, draws: int = 200) -> np.ndarray:
    return INIT + np.exp(np.arange(draws) / 10.0)[None, :].repeat(chains, axis=0) * 1e-3


def test_per_chain_statistics_match_numpy() -> None:
    trace = rising(chains=3, draws=13, seed=3)  # odd: the middle draw is in neither half
    d = chain_diagnostics(trace, burnin=3)  # 10 draws: halves of 5
    draws = trace[:, 3:]
    np.testing.assert_allclose(d.first_half, draws[:, :5].mean(axis=1))
    np.testing.assert_allclose(d.second_half, draws[:, 5:].mean(axis=1))
    for c in range(3):
        assert d.slope[c] == pytest.approx(np.polyfit(np.arange(5), draws[c, 5:], 1)[0])
        se = np.sqrt(np.var(draws[c, :5], ddof=1) / 5 + np.var(draws[c, 5:], ddof=1) / 5)
        assert d.half_se[c] == pytest.approx(se)
    z = rise_z(d.first_half, d.second_half, d.half_se)
    assert z == pytest.approx((d.second_half - d.first_half).mean() / (np.sqrt((d.half_se**2).sum()) / 3))


def test_a_trace_that_flattened_is_converged() -> None:
    for seed in range(5):
        assert judged(flat(seed=seed), burnin=20) == "converged"


def test_a_trace_still_climbing_is_still_rising() -> None:
    for seed in range(5):
        assert judged(rising(seed=seed)) == "still rising"
    # the same trace, short: 8 draws (the shipped default) still see a rise of 0.002 x 4 draws against noise 0.01
    short = INIT + 0.02 * np.arange(8) + 0.005 * np.random.default_rng(1).standard_normal((2, 8))
    assert judged(short) == "still rising"
    d = chain_diagnostics(short)
    assert rise_z(d.first_half, d.second_half, d.half_se) > RISING_Z


def test_a_trace_running_away_is_diverged() -> None:
    trace = diverging()
    assert estimates(trace).mean() > 10_000 / 2
    assert judged(trace, params=10_000) == "diverged"
    broken = flat()
    broken[1, 50] = np.nan
    assert judged(broken) == "diverged"


def test_the_bound_is_half_the_parameters_moved() -> None:
    trace = flat(seed=2)
    est = estimates(trace, burnin=20).max()  # about 3
    assert judged(trace, params=int(2 * est) + 2, burnin=20) == "converged"
    assert judged(trace, params=int(2 * est) - 1, burnin=20) == "diverged"


def test_too_few_draws_cannot_be_judged_as_rising() -> None:
    one = np.array([[INIT + 0.1], [INIT + 0.2]])
    d = chain_diagnostics(one)
    assert np.isnan(d.first_half).all() and np.isnan(d.half_se).all()
    assert judged(one) == "too few draws"
    assert judged(flat(draws=3)) == "too few draws" and judged(flat(draws=4), burnin=0) in ("converged", "still rising")


def test_a_negative_estimate_is_flagged_negative_never_converged_and_a_falling_trace_is_still_falling() -> None:
    """Issue 62: chains that settled below the loss at w* have flat traces, so the rise rule alone calls them
    converged (114 of the shipped stores' 124 negative head estimates were); a negative estimate is its own flag,
    ahead of the trace's trend and of too few draws, behind diverged."""
    rng = np.random.default_rng(0)
    settled = INIT - 0.05 * (1 - np.exp(-np.arange(200) / 3.0))[None, :].repeat(2, axis=0)
    settled = settled + 0.01 * rng.standard_normal((2, 200))
    d = chain_diagnostics(settled, 20)
    assert (estimates(settled, burnin=20) < 0).all() and abs(rise_z(d.first_half, d.second_half, d.half_se)) < RISING_Z
    assert judged(settled, burnin=20) == "negative"  # flat, but below w*: no learning coefficient
    falling = INIT - 0.002 * np.arange(200)[None, :].repeat(2, axis=0) + 0.01 * rng.standard_normal((2, 200))
    assert (estimates(falling) < 0).all() and judged(falling) == "negative"
    above = INIT + 0.5 - 0.002 * np.arange(200)[None, :].repeat(2, axis=0) + 0.01 * rng.standard_normal((2, 200))
    assert (estimates(above) > 0).all() and judged(above) == "still falling"
    one = np.array([[INIT - 0.1], [INIT - 0.2]])  # one draw per chain: too few to judge a trend, but negative
    assert judged(one) == "negative"
    # the estimate is the chains' mean: one chain below w* and the mean above it is judged by its traces
    mixed = np.concatenate([flat(chains=1, seed=1) - 0.12, flat(chains=1, seed=2)])
    assert estimates(mixed, burnin=20)[0] < 0 < estimates(mixed, burnin=20).mean()
    assert judged(mixed, burnin=20) != "negative"
    broken = settled.copy()
    broken[0, 50] = np.nan
    assert judged(broken) == "diverged"  # not finite first
    assert "negative" in FLAGS and "local minimum" in FLAG_NOTES["negative"] and "--llc-lr" in FLAG_NOTES["negative"]


SEQUENCE_LOSS = 0.05 * np.array([-3, -2, -1, 0, 1, 2, 3, 0], dtype=np.float64)  # 8 sequences, in the sampler's order


def cycling(draws: int, rise: float = 0.0, chains: int = 2, seed: int = 0) -> np.ndarray:
    """A trace whose loss is mostly which of 8 sequences the draw holds (they come in the same order every pass),
    plus a linear rise of ``rise`` nats per draw and a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(draws)
    return INIT + 0.1 + SEQUENCE_LOSS[t % 8] + rise * t + 0.002 * rng.standard_normal((chains, draws))


def test_the_halves_are_whole_passes_over_the_sequences() -> None:
    trace = rising(chains=3, draws=27, seed=4)
    d = chain_diagnostics(trace, burnin=3, batches=4)  # 24 draws: 6 passes of 4, halves of 3 passes
    blocks = trace[:, 3:27].reshape(3, 6, 4).mean(axis=2)
    np.testing.assert_allclose(d.first_half, blocks[:, :3].mean(axis=1))
    np.testing.assert_allclose(d.second_half, blocks[:, 3:].mean(axis=1))
    for c in range(3):
        assert d.slope[c] == pytest.approx(np.polyfit(4 * np.arange(3), blocks[c, 3:], 1)[0])  # per draw
        se = np.sqrt(np.var(blocks[c, :3], ddof=1) / 3 + np.var(blocks[c, 3:], ddof=1) / 3)
        assert d.half_se[c] == pytest.approx(se)
    with pytest.raises(ValueError, match="batches"):
        chain_diagnostics(trace, batches=0)


def test_one_pass_over_the_sequences_cannot_be_judged() -> None:
    """The shipped reference run's chains: 8 draws over 8 sequences. Judged draw by draw, a flat trace whose
    sequences happen to come cheapest first looks like a rise; judged by passes, one pass says nothing."""
    short = cycling(8)
    assert judged(short) == "still rising"  # the old rule, fooled by the order of the sequences
    d = chain_diagnostics(short, batches=8)
    assert flag(estimates(short), d.first_half, d.second_half, d.half_se, 10_000) == "too few draws"


def test_long_chains_over_cycling_sequences_are_judged_by_their_passes() -> None:
    for draws in (200, 96):
        flat_trace, climbing = cycling(draws), cycling(draws, rise=0.001)
        for trace, want in ((flat_trace, "converged"), (climbing, "still rising")):
            d = chain_diagnostics(trace, batches=8)
            assert flag(estimates(trace), d.first_half, d.second_half, d.half_se, 10_000) == want, (draws, want)
