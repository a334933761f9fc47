"""Where an in-context-learning score falls most sharply and the stage boundary at which induction heads form
(`analysis.findings.icl`), against a brute-force scan written here and hand-computed values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.findings.icl import fall_sentence, induction_boundary, sharpest_fall


def brute_force(steps, score):
    """Every pair of consecutive finite checkpoints, the slope per log10(1 + step), the most negative kept."""
    best = None
    points = [(s, v) for s, v in zip(steps, score, strict=True) if math.isfinite(v)]
    for (a, va), (b, vb) in itertools.pairwise(points):
        rate = (vb - va) / (math.log10(1 + b) - math.log10(1 + a))
        if rate < 0 and (best is None or rate < best[2]):
            best = (a, b, rate, vb - va)
    return best


def test_the_sharpest_fall_is_the_steepest_drop_per_log_step_by_hand() -> None:
    steps = np.array([0, 9, 99, 999])  # log10(1 + step) = 0, 1, 2, 3: one unit apart
    score = np.array([0.0, -0.1, -1.1, -1.3])
    se = np.array([0.03, 0.04, 0.0, 0.0])
    fall = sharpest_fall(steps, score, se)
    assert fall is not None
    assert (fall.start, fall.end) == (9, 99)
    assert fall.drop == pytest.approx(-1.0)
    assert fall.rate == pytest.approx(-1.0)
    assert fall.se == pytest.approx(0.04)  # hypot(0.04, 0.0)
    assert fall.text() == "steps 9 → 99 (−1 ± 0.04 nats)"


def test_a_small_drop_over_a_short_log_interval_beats_a_large_one_over_a_long_one() -> None:
    # 0 -> 1 spans log10(2) = 0.301; 1 -> 1000 spans log10(1001/2) = 2.699
    steps = np.array([0, 1, 1000])
    score = np.array([0.0, -0.5, -3.0])
    fall = sharpest_fall(steps, score)
    assert fall is not None and (fall.start, fall.end) == (0, 1)
    assert fall.rate == pytest.approx(-0.5 / math.log10(2))
    assert math.isnan(fall.se)


@pytest.mark.parametrize("seed", range(5))
def test_the_sharpest_fall_matches_a_brute_force_scan_with_gaps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps = np.unique(rng.integers(0, 5000, size=30))
    score = np.cumsum(rng.normal(0, 0.3, size=len(steps)))
    score[rng.random(len(steps)) < 0.2] = np.nan  # steps without a score are skipped, not bridged to zero
    fall = sharpest_fall(steps, score)
    expected = brute_force(steps.tolist(), score.tolist())
    assert fall is not None and expected is not None
    assert (fall.start, fall.end) == (expected[0], expected[1])
    assert fall.rate == pytest.approx(expected[2])
    assert fall.drop == pytest.approx(expected[3])


def test_a_score_that_never_falls_or_has_one_value_has_no_fall() -> None:
    assert sharpest_fall(np.array([0, 1, 2]), np.array([0.0, 0.1, 0.1])) is None
    assert sharpest_fall(np.array([0, 1, 2]), np.array([np.nan, -1.0, np.nan])) is None


def _stages(boundaries: list[str], starts: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"stage": range(len(starts)), "start_step": starts, "boundary": boundaries})


def test_the_induction_boundary_is_the_first_stage_that_names_induction_heads() -> None:
    stages = _stages(
        [
            "start of training",
            "previous-token heads form (L0 H1)",
            "induction heads form (L1 H0, L1 H5); previous-token heads form (L0 H0)",
            "induction heads form (L1 H1)",
        ],
        [0, 700, 1250, 1500],
    )
    assert induction_boundary(stages) == 1250
    assert induction_boundary(stages.iloc[::-1]) == 1250  # read in stage order, whatever the rows' order
    assert induction_boundary(stages.iloc[:2]) is None
    assert induction_boundary(None) is None


def test_the_sentence_places_the_fall_beside_the_boundary() -> None:
    fall = sharpest_fall(np.array([1000, 1300, 1400, 1500]), np.array([-0.1, -0.2, -1.5, -1.6]), np.full(4, 0.01))
    assert fall is not None and (fall.start, fall.end) == (1300, 1400)
    before = fall_sentence("probe ICL score", fall, 1250)
    assert before.startswith("The probe ICL score falls most sharply over steps 1,300 → 1,400 (−1.3 ± 0.014 nats)")
    assert before.endswith(
        "induction heads form at the stage boundary at step 1,250, 50 steps before the fall's interval starts."
    )
    assert fall_sentence("x", fall, 1400).endswith("at step 1,400, within that interval.")
    assert fall_sentence("x", fall, 1600).endswith("200 steps after the fall's interval ends.")
    assert fall_sentence("x", fall, None).endswith("no stage boundary of this run names induction heads.")
    assert fall_sentence("x", None, 1250) == "The x never falls; induction heads form at the stage boundary at step 1,250."
