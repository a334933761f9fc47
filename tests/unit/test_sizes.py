"""Across sizes (issue 43): the resampling rule on known curves, the consolidation rule, the power-law fit, the
parameter count, and the joint clusters on synthetic runs with planted universal types and with planted
size-specific trajectories. Expected values are worked out here by hand or by plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headwatch.analysis.across_sizes.joint_clusters import joint_associate, judge_joint, transfer_scores
from headwatch.analysis.across_sizes.scaling import consolidation_index, fit_power_law
from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.comparison import common_grid, joint_trajectories
from headwatch.analysis.findings.sizes import check_comparable, parameter_count
from headwatch.analysis.store.meta import ModelInfo

# --- the resampling rule -----------------------------------------------------------------------------------------


def _last_at_or_before(x: np.ndarray, g: float) -> int:
    """A plain loop: the last index with x <= g (0 when none)."""
    out = 0
    for i, v in enumerate(x):
        if v <= g + 1e-12:
            out = i
    return out


def test_runs_with_the_same_steps_are_not_resampled() -> None:
    steps = [np.array([0, 10, 20, 40]), np.array([0, 10, 20, 40])]
    grid, picks, same = common_grid(steps)
    assert same and np.allclose(grid, [0, 0.25, 0.5, 1.0])
    assert all((p == np.arange(4)).all() for p in picks)


def test_fraction_grid_is_the_fewest_runs_checkpoints_and_others_pick_their_last_at_or_before() -> None:
    short = np.array([0, 10, 20, 30, 40])  # 5 checkpoints: the grid 0, .25, .5, .75, 1
    dense = np.array([0, 3, 7, 12, 26, 49, 51, 80, 99, 100])
    grid, picks, same = common_grid([dense, short])
    assert not same and np.allclose(grid, [0, 0.25, 0.5, 0.75, 1.0])
    assert list(picks[1]) == [0, 1, 2, 3, 4]
    assert list(picks[0]) == [_last_at_or_before(dense / 100, g) for g in grid] == [0, 3, 5, 6, 9]
    # a known curve of the fraction of training, f = fraction^2: each run's value is f at the checkpoint it picks
    values = [((s / s[-1]) ** 2)[:, None, None] * np.ones((1, 2, 3)) for s in (dense, short)]
    traj, index, _ = joint_trajectories(values, [dense, short])
    assert traj.shape == (12, 5) and (index[:6, 0] == 0).all() and (index[6:, 0] == 1).all()
    assert np.allclose(traj[6:], grid**2)  # the short run: exactly f on the grid
    assert np.allclose(traj[:6], (dense[[0, 3, 5, 6, 9]] / 100.0) ** 2)  # the dense run: f where it was


def test_of_two_runs_with_the_fewest_checkpoints_the_grid_is_the_same_in_either_order() -> None:
    """Two runs of five checkpoints at different fractions: the grid was the first one given; now the one whose
    times come first, whichever order they are given in."""
    a, b, dense = np.array([0, 10, 20, 30, 40]), np.array([0, 5, 25, 30, 40]), np.arange(0, 101, 5)
    grids = [common_grid(order)[0] for order in ([a, b, dense], [b, a, dense], [dense, b, a])]
    assert all(np.array_equal(g, grids[0]) for g in grids)
    assert np.allclose(grids[0], b / 40)  # 0, .125, ... comes before 0, .25, ...


def test_tokens_grid_stops_where_the_shortest_run_stops() -> None:
    a_steps, b_steps = np.array([0, 10, 20, 40]), np.array([0, 25, 50, 75, 100, 150])
    a_tokens, b_tokens = a_steps * 100, b_steps * 10  # a: up to 4,000 tokens; b: up to 1,500
    grid, picks, same = common_grid([a_steps, b_steps], align="tokens", tokens=[a_tokens, b_tokens])
    assert not same and list(grid) == [0, 1000]  # a's checkpoints (the fewest) up to b's last tokens
    assert list(picks[0]) == [0, 1] and list(picks[1]) == [0, 4]  # b: 1,000 tokens at step 100
    with pytest.raises(ValueError, match="token counts"):
        common_grid([a_steps, b_steps], align="tokens")


# --- consolidation ------------------------------------------------------------------------------------------------


def test_consolidation_of_an_exponential_approach_matches_the_analytic_time() -> None:
    t = np.linspace(0, 100, 1001)
    tau, end = 10.0, 100.0
    v = 1 - np.exp(-t / tau)
    # |v(t) - v(end)| = e^{-t/tau} - e^{-end/tau} <= 0.1 (1 - e^{-end/tau})
    t_star = -tau * math.log(0.1 * (1 - math.exp(-end / tau)) + math.exp(-end / tau))
    i = consolidation_index(v)
    assert i is not None and t[i - 1] < t_star <= t[i] + 1e-12


def test_consolidation_waits_for_a_curve_that_leaves_its_final_band() -> None:
    assert consolidation_index(np.array([0, 1, 2, 0.5, 1.0, 1.0])) == 4  # 0.5 at index 3 is outside 1 +- 0.1
    assert consolidation_index(np.array([0, 0.95, 1.0, np.nan, 1.0])) == 1
    assert consolidation_index(np.array([3.0, 3.0, 3.0])) is None  # no change
    assert consolidation_index(np.array([np.nan, 1.0])) is None
    with pytest.raises(ValueError, match="share"):
        consolidation_index(np.arange(3.0), share=0)


# --- the power law ------------------------------------------------------------------------------------------------


def test_power_law_recovers_a_planted_exponent_with_its_seed_uncertainty() -> None:
    n = np.array([1e5, 1e5, 4e5, 4e5, 1.6e6, 1.6e6, 6.4e6, 6.4e6, 2.56e7, 2.56e7])
    d = np.array([0.02, -0.02] * 5)  # each size's two seeds at +-0.02 in log10 around the law
    t = 10 ** (1.0 + 0.5 * np.log10(n) + d)
    fit = fit_power_law(n, t)
    assert fit.fitted and fit.sizes == 5 and fit.runs == 10
    assert fit.exponent == pytest.approx(0.5, abs=1e-9) and fit.intercept == pytest.approx(1.0, abs=1e-9)
    x = np.log10(n)
    pure = (2 * 0.02**2) * 5 / 5  # each size: (0.02^2 + 0.02^2) over 1 degree of freedom; 5 sizes, 5 dof
    assert fit.se == pytest.approx(math.sqrt(pure / ((x - x.mean()) ** 2).sum()), rel=1e-9)
    assert fit.low < 0.5 < fit.high
    assert "N^0.50" in fit.text("induction emergence step") and "from the seeds" in fit.text("x")


def test_three_sizes_are_too_few_and_say_so_in_words() -> None:
    fit = fit_power_law(np.array([1e5, 4e5, 1.6e6, 4e5]), np.array([100.0, 200.0, 400.0, np.nan]))
    assert not fit.fitted and math.isnan(fit.exponent)
    text = fit.text("first induction emergence step")
    assert "no fit" in text and "3 model sizes" in text and "too few" in text and "N^" not in text
    assert "1 of 4 runs have no such time" in text


def test_a_fit_without_seeds_says_it_has_no_uncertainty() -> None:
    n = np.array([1e5, 4e5, 1.6e6, 6.4e6])
    fit = fit_power_law(n, 3 * n**0.25)
    assert fit.fitted and fit.exponent == pytest.approx(0.25) and math.isnan(fit.se)
    assert "no size has two seeds" in fit.text("t")


# --- the parameter count ------------------------------------------------------------------------------------------


def test_parameter_count_is_the_non_embedding_weight_matrices() -> None:
    gpt2 = ModelInfo(id="x", family="gpt2", n_layers=2, n_heads=8, d_model=128, d_head=16, config={"n_inner": 512})
    assert parameter_count(gpt2) == 2 * (4 * 128 * 128 + 2 * 128 * 512)
    gqa = ModelInfo(id="y", family="llama", n_layers=3, n_heads=8, d_model=64, d_head=8, n_kv_heads=2, config={})
    # q and o: 64 x 64 each; k and v: 64 x 16 each; no d_mlp recorded: 4 d_model
    assert parameter_count(gqa) == 3 * (2 * 64 * 64 + 2 * 64 * 16 + 2 * 64 * 256)


def test_one_run_is_not_a_comparison() -> None:
    with pytest.raises(StoreError, match="at least two runs, got 1"):
        check_comparable({"only": object()})  # type: ignore[dict-item]  # refused before the store is read


# --- joint clusters on planted runs -------------------------------------------------------------------------------

SHAPES = {  # functions of the fraction of training u in [0, 1]
    "previous_token": lambda u: 1 / (1 + np.exp(-(u - 0.15) * 40)),  # an early step up
    "induction": lambda u: 1 / (1 + np.exp((u - 0.6) * 30)),  # a late step down
    "none": lambda u: np.sin(3 * np.pi * u),  # wanders
}
SIZES = (64, 128, 256, 512)  # four runs, each a different schedule and number of heads


def _ladder(shape_of, rng: np.random.Generator):
    """Per run: steps (its own schedule), values (S, 2, n_heads) and type labels, each head's curve
    ``shape_of(run, type)(fraction)`` times a random scale plus a random level plus noise."""
    values, steps, types = [], [], []
    kinds = list(SHAPES)
    for r, _d in enumerate(SIZES):
        n_heads = 3 + r  # 6, 8, 10, 12 heads
        s = np.unique(np.concatenate([[0], np.geomspace(1, 500 * (r + 1), 20 + 5 * r).astype(int)]))
        u = s / s[-1]
        labels = np.array([kinds[i % 3] for i in range(2 * n_heads)])
        v = np.empty((len(s), 2 * n_heads))
        for h, kind in enumerate(labels):
            curve = shape_of(r, kind)(u)
            v[:, h] = rng.uniform(0.5, 3) * curve + rng.normal(0, 5) + rng.normal(0, 0.03, len(s))
        values.append(v.reshape(len(s), 2, n_heads))
        steps.append(s)
        types.append(labels)
    return values, steps, types


def _joint(values, steps, types, *, layers: bool = True):
    traj, index, same = joint_trajectories(values, steps)
    assert not same
    run = np.array([f"d{SIZES[i]}" for i in index[:, 0]])
    depth = index[:, 1] if layers else None
    return joint_associate(traj, run, np.concatenate(types), layers=depth, permutations=499, seed=0)


def _reading(result) -> str:
    return judge_joint({"statistic": result})["statistic"].reading


def test_planted_universal_types_are_found_and_the_run_does_not_matter() -> None:
    values, steps, types = _ladder(lambda r, kind: SHAPES[kind], np.random.default_rng(1))
    result, _clusters = _joint(values, steps, types)
    assert result.testable and result.runs == 4 and result.heads == sum(2 * (3 + r) for r in range(4))
    assert result.clusters == 3 and result.ami_type > 0.9 and result.p_type < 0.01 and result.p_type_layers < 0.01
    assert abs(result.ami_run) < 0.1 and result.p_run > 0.2  # near 0 (chance: 0 on average; 36 heads)
    assert result.transfer_gain > 0.5 and result.p_transfer < 0.01  # every left-out run's types predicted
    assert _reading(result).startswith("Universal kinds of trajectory across these runs")
    assert "no run effect shown" in _reading(result) and "fails to reject" in _reading(result)


def test_planted_size_specific_trajectories_follow_the_run_not_the_type() -> None:
    def by_size(r, kind):  # every head of run r the same step up, later in bigger runs; the type plays no part
        return lambda u: 1 / (1 + np.exp(-(u - (0.15 + 0.22 * r)) * 40))

    values, steps, types = _ladder(by_size, np.random.default_rng(2))
    result, _ = _joint(values, steps, types)
    assert result.testable and result.ami_run > 0.8 and result.p_run < 0.01
    assert abs(result.ami_type) < 0.1 and result.p_type > 0.2
    reading = _reading(result)
    assert reading.startswith("Not shown to follow the head types") and "run-specific trajectories" in reading


def test_types_that_follow_the_layers_alone_are_not_called_universal() -> None:
    """Layer 0's heads all previous-token with an early step up, layer 1's all induction with a late step down: the
    clusters follow the types, and carry to a left-out run, only because both follow depth. The test within each
    layer finds nothing beyond it, and the reading says so (the skeptic's objection to stable rank, issue 62)."""
    values, steps, _ = _ladder(lambda r, kind: SHAPES[kind], np.random.default_rng(3))
    rng = np.random.default_rng(4)
    types = []
    for v in values:
        s, _, n_heads = v.shape
        u = np.linspace(0, 1, s)
        for layer, kind in enumerate(("previous_token", "induction")):
            for h in range(n_heads):
                v[:, layer, h] = rng.uniform(0.5, 3) * SHAPES[kind](u) + rng.normal(0, 5) + rng.normal(0, 0.03, s)
        types.append(np.repeat(["previous_token", "induction"], n_heads))
    result, _ = _joint(values, steps, types)
    assert result.ami_type > 0.9 and result.p_type < 0.01 and result.p_transfer < 0.01
    assert result.ami_layer > 0.9 and result.p_type_layers == 1.0  # nothing left to shuffle within a layer
    reading = _reading(result)
    assert reading.startswith("Not shown to be universal kinds of trajectory") and "not beyond the layers" in reading
    without, _ = _joint(values, steps, types, layers=False)  # no layers given: one stratum per run
    assert without.p_type_layers == without.p_type


def test_types_that_follow_the_clusters_in_one_run_only_are_not_called_universal() -> None:
    """The largest run's types follow the shapes; every other run's are shuffled. Pooled over the runs the AMI
    with the types still reaches p < 0.05 with the run held fixed, which the old reading called "universal kinds
    of trajectory"; clusters fitted without a run do not predict its types, and the reading says so (issue 62)."""
    values, steps, types = _ladder(lambda r, kind: SHAPES[kind], np.random.default_rng(1))
    rng = np.random.default_rng(5)
    types = [t if i == len(types) - 1 else rng.permutation(t) for i, t in enumerate(types)]
    result, _ = _joint(values, steps, types)
    assert result.p_type < 0.05 and result.p_run > 0.2  # what the old verdict read as universal
    assert result.p_transfer > 0.2 and abs(result.transfer_gain) < 0.1
    reading = _reading(result)
    assert reading.startswith("Not shown to be universal kinds of trajectory")
    assert "do not predict its types better than shuffled types do" in reading


def test_the_left_out_run_score_is_the_log_probability_counted_by_hand() -> None:
    """Two runs of three heads: the score of each held-out head is log((n_ct + 1/2) / (n_c + T / 2)) over the
    other run's heads of its cluster, worked out here by a plain loop."""
    held = np.array([True, True, True, False, False, False])
    labels = np.array([0, 1, 1, 0, 1, 0])  # the held-out run's heads put in the other run's clusters
    types = np.array([0, 1, 0, 0, 1, 1])
    folds = [(held, labels), (~held, labels)]
    want = 0.0
    for mask, lab in folds:
        for i in np.flatnonzero(mask):
            train = [j for j in np.flatnonzero(~mask) if lab[j] == lab[i]]
            n_ct = sum(types[j] == types[i] for j in train)
            want += math.log((n_ct + 0.5) / (len(train) + 2 * 0.5))
    assert transfer_scores(folds, types[None])[0] == pytest.approx(want / 6, abs=1e-12)


def test_the_joint_clusters_and_every_figure_do_not_depend_on_the_order_of_the_runs() -> None:
    values, steps, types = _ladder(lambda r, kind: SHAPES[kind], np.random.default_rng(7))
    for v in values:  # blur the shapes, so that k-means has local minima to fall into
        v += np.random.default_rng(8).normal(0, 0.4, v.shape)
    first, clusters = _joint(values, steps, types)
    order = [2, 0, 3, 1]
    traj, index, _ = joint_trajectories([values[i] for i in order], [steps[i] for i in order])
    run = np.array([f"d{SIZES[order[i]]}" for i in index[:, 0]])
    again, shuffled = joint_associate(
        traj, run, np.concatenate([types[i] for i in order]), layers=index[:, 1], permutations=499, seed=0
    )
    assert again == first
    # the same head in the same cluster (clusters numbered by size: the same numbers)
    _, index0, _ = joint_trajectories(values, steps)
    mine = {(f"d{SIZES[r]}", int(lay), int(h)): c for (r, lay, h), c in zip(index0, clusters, strict=True)}
    theirs = {(r, int(lay), int(h)): c for r, (_, lay, h), c in zip(run, index, shuffled, strict=True)}
    assert mine == theirs


def test_joint_association_refuses_labels_that_do_not_match_and_says_why_one_run_is_not_testable() -> None:
    traj = np.random.default_rng(0).normal(size=(6, 5))
    with pytest.raises(ValueError, match="need one each"):
        joint_associate(traj, np.zeros(5), np.zeros(6))
    result, _ = joint_associate(traj, np.zeros(6), np.array(["a", "b"] * 3), permutations=9)
    assert not result.testable and "one run" in result.reason and _reading(result).startswith("not testable")
