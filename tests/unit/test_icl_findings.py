"""Where an in-context-learning score falls most sharply and the stage boundary at which induction heads form
(`analysis.findings.icl`), against a brute-force scan written here and hand-computed values."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.findings.events import stage_rows
from headwatch.analysis.findings.icl import Boundary, fall_sentence, induction_boundary, run_induction_boundary, sharpest_fall
from headwatch.analysis.store import open_store

ROOT = Path(__file__).resolve().parents[2]


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


def _emergence(steps: list[int | None]) -> pd.DataFrame:
    return pd.DataFrame(
        {"type": ["induction"] * len(steps) + ["previous_token"], "emergence_step": pd.array([*steps, 10], dtype="Int64")}
    )


def test_the_induction_boundary_is_led_by_an_induction_score_rise_nearest_the_first_emergence() -> None:
    stages = _stages(
        [
            "start of training",
            "previous-token scores rise in L0 H1: 0.07 -> 0.2",
            "induction scores rise in L1 H0, H5: 0.06 -> 0.19; previous-token scores rise in L0 H1: 0.3 -> 0.4",
            "previous-token scores rise in L0 H5: 0.5 -> 0.7; induction scores rise in L1 H0: 0.19 -> 0.7",
            "induction scores rise in L1 H1: 0.6 -> 0.8",
        ],
        [0, 700, 1100, 1300, 1900],
    )
    # without emergence: the first led by an induction rise (1,300's name has it second: not a candidate)
    first = induction_boundary(stages)
    assert first is not None and first.step == 1100 and "first boundary" in first.why
    reversed_ = induction_boundary(stages.iloc[::-1])
    assert reversed_ is not None and reversed_.step == 1100  # read in stage order, whatever the rows' order
    nearest = induction_boundary(stages, _emergence([1700, None, 1800]))
    assert nearest is not None and nearest.step == 1900 and "step 1,700" in nearest.why and "of the 2" in nearest.why
    choices: list[list[int | None]] = [[1400], [None]]
    for emerged in choices:  # |1100-1400| < |1900-1400|; no induction head: the first
        chosen = induction_boundary(stages, _emergence(emerged))
        assert chosen is not None and chosen.step == 1100
    assert induction_boundary(stages.iloc[:2]) is None
    assert induction_boundary(None) is None


def test_the_induction_boundary_of_the_shipped_induction_d128() -> None:
    """The rule on the shipped store, against its tables read directly: the run boundaries whose name leads with an
    induction-score rise, the nearest to the first induction emergence, and the first without emergence."""
    import pandas as pd

    folder = ROOT / "data" / "induction-d128"
    stages = pd.read_parquet(folder / "stages.parquet")
    run = stages[stages["basis"] == "run"].sort_values("start_step")
    candidates = [
        int(s) for s, b in zip(run["start_step"], run["boundary"], strict=True) if str(b).startswith("induction scores rise")
    ]
    emergence = pd.read_parquet(folder / "head_emergence.parquet")
    first_head = int(emergence[(emergence["type"] == "induction") & emergence["emergence_step"].notna()]["emergence_step"].min())
    assert len(candidates) >= 2  # the rule has to choose between them on this store
    nearest = min(candidates, key=lambda s: (abs(s - first_head), s))

    store = open_store(folder)
    boundary = run_induction_boundary(store)
    assert boundary is not None and boundary.step == nearest, boundary
    assert boundary.name.startswith("induction scores rise in L1")
    assert f"step {first_head:,}" in boundary.why
    first = induction_boundary(stage_rows(store, basis="run"))
    assert first is not None and first.step == candidates[0]


def test_the_sentence_places_the_fall_beside_the_boundary() -> None:
    fall = sharpest_fall(np.array([1000, 1300, 1400, 1500]), np.array([-0.1, -0.2, -1.5, -1.6]), np.full(4, 0.01))
    assert fall is not None and (fall.start, fall.end) == (1300, 1400)

    def at(step: int) -> Boundary:
        return Boundary(step, "induction scores rise in L1 H0: 0.1 -> 0.5", "why")

    before = fall_sentence("probe ICL score", fall, at(1250))
    assert before.startswith("The probe ICL score falls most sharply over steps 1,300 → 1,400 (−1.3 ± 0.014 nats)")
    assert before.endswith(
        "induction heads form at the stage boundary at step 1,250 (why), 50 steps before the fall's interval starts."
    )
    assert fall_sentence("x", fall, at(1400)).endswith("at step 1,400 (why), within that interval.")
    assert fall_sentence("x", fall, at(1600)).endswith("200 steps after the fall's interval ends.")
    assert fall_sentence("x", fall, None).endswith("no stage boundary of this run leads with a rise in induction scores.")
    assert fall_sentence("x", None, at(1250)) == (
        "The x has no fall beyond its noise (no drop between consecutive checkpoints exceeds 2 standard errors); "
        "induction heads form at the stage boundary at step 1,250 (why)."
    )


def test_a_drop_within_two_standard_errors_of_the_difference_is_no_fall() -> None:
    steps = np.array([0, 9, 99, 999])  # one log unit apart
    score = np.array([0.0, -0.4, -0.5, -0.8])
    se = np.array([0.25, 0.25, 0.01, 0.01])  # 0 -> 9: -0.4 against 2 * hypot(.25, .25) = 0.71: noise
    fall = sharpest_fall(steps, score, se)
    assert fall is not None and (fall.start, fall.end) == (99, 999)  # -0.3 against 2 * 0.014: a fall
    assert fall.se == pytest.approx(math.hypot(0.01, 0.01))
    assert sharpest_fall(steps, score, np.full(4, 0.3)) is None  # every drop within its noise
    # the noise level by hand: a drop of exactly 2 s.e. is not beyond it, a hair more is
    se2 = np.array([0.3, 0.4, 0.4, 0.4])  # hypot(0.3, 0.4) = 0.5
    assert sharpest_fall(steps, np.array([0.0, -1.0, -1.0, -1.0]), se2) is None
    assert sharpest_fall(steps, np.array([0.0, -1.001, -1.001, -1.001]), se2) is not None
