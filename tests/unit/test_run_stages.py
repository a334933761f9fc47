"""Boundaries where a curve's rate changes, the behavioural curves, the run's merged boundaries and their names
(analysis/stages/curve.py, analysis/stages/run.py), on synthetic curves with known breakpoints and on the shipped stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from headwatch.analysis.findings.events import stage_events, stage_rows
from headwatch.analysis.stages import run as run_module
from headwatch.analysis.stages.curve import Stage, StageRule, llc_stages, loss_stages
from headwatch.analysis.stages.run import (
    LONE_SUPPORT,
    NO_EVENT,
    HeadScores,
    Support,
    ablation_scores,
    best_supported,
    boundary_name,
    count_stages,
    group_interval,
    merge_boundaries,
    name_changes,
    run_stages_from,
    stands,
)
from headwatch.analysis.store import open_store
from tests.unit.test_stage_schedules import SHIPPED as SCHEDULED
from tests.unit.test_stage_schedules import recomputed, transitions

# A log-spaced schedule like the reference run's: 0, 1, 2, 4, ..., 512, then every 64 to 4096.
STEPS = np.array([0] + [2**i for i in range(10)] + list(range(576, 4097, 64)))
U = np.log10(1 + STEPS)


def near(found: int, where: int, steps: np.ndarray = STEPS, *, within: int = 1) -> bool:
    return abs(int(np.searchsorted(steps, found)) - int(np.searchsorted(steps, where))) <= within


@pytest.mark.parametrize(("slopes", "kind"), [((10.0, 40.0), "LLC accelerates"), ((40.0, 10.0), "LLC slows")])
def test_a_rise_that_changes_its_rate_is_a_boundary(slopes: tuple[float, float], kind: str) -> None:
    """An LLC that rises all along, per decade of steps at one rate to step 1024 and at four times (a quarter of) it
    after, with noise of half a unit: in at least 18 of 20 draws two rising stages with the boundary named after the
    change and within one checkpoint of 1024 (the old rule, which merged stretches of one sign, found one stage)."""
    knot = np.log10(1025)
    clean = np.where(knot > U, slopes[0] * U, slopes[0] * knot + slopes[1] * (U - knot))
    found = 0
    for seed in range(20):
        stages = llc_stages(STEPS, clean + np.random.default_rng(seed).normal(0, 0.5, len(STEPS)), 0.5)
        assert all(s.trend == "rising" for s in stages)
        found += [s.boundary for s in stages[1:]] == [kind] and near(stages[1].start_step, 1024)
    assert found >= 18, f"{found} of 20 draws found {kind!r} at step 1024"


def test_a_loss_drop_that_speeds_up_then_slows() -> None:
    """A loss that falls slowly to step 256, fast to 1024, slowly again: the drop speeds up and slows, each boundary
    within one checkpoint of where it was built, and every stage a drop (a slow drop twice as fast as the plateau
    ratio allows is no plateau), in at least 18 of 20 draws (a miss cuts one more short stretch out of the noise)."""
    knots = [U[0], np.log10(257), np.log10(1025), U[-1]]
    clean = np.interp(U, knots, [5.0, 4.4, 2.6, 2.2])
    found = 0
    for seed in range(20):
        stages = loss_stages(STEPS, clean + np.random.default_rng(seed).normal(0, 0.01, len(STEPS)), sigma=0.01)
        found += (
            [s.trend for s in stages] == ["drop", "drop", "drop"]
            and [s.boundary for s in stages[1:]] == ["loss drop speeds up", "loss drop slows"]
            and near(stages[1].start_step, 256)
            and near(stages[2].start_step, 1024)
        )
    assert found >= 18, f"{found} of 20 draws found the drop speeding up at 256 and slowing at 1024"


@pytest.mark.parametrize(("n_points", "draws"), [(14, 400), (30, 200)])
@pytest.mark.parametrize("trend", [0.0, 10.0])
def test_noise_alone_on_a_steady_trend_makes_no_boundary(n_points: int, draws: int, trend: float) -> None:
    """A flat or steadily rising (falling, for the loss) curve with noise of the stated spread: at most 5% of the
    draws get any boundary, on the LLC's rule and the loss's (measured: 0.5% to 3.5% at 14 to 67 points,
    docs/stages.md)."""
    steps = STEPS[np.linspace(0, len(STEPS) - 1, n_points).astype(int)]
    u = np.log10(1 + steps)
    rng = np.random.default_rng(7)
    llc = sum(len(llc_stages(steps, 5 + trend * u + rng.normal(0, 1.0, n_points), 1.0)) != 1 for _ in range(draws))
    loss = sum(len(loss_stages(steps, 5 - trend * u + rng.normal(0, 1.0, n_points), sigma=1.0)) != 1 for _ in range(draws))
    assert llc <= 0.05 * draws and loss <= 0.05 * draws, (llc, loss, draws)


def test_a_count_of_heads_starts_and_stops_rising_but_one_head_is_noise() -> None:
    steps = np.arange(0, 2000, 100)
    count = np.where(steps < 1000, 0.0, np.minimum((steps - 900) // 100, 4)).astype(float)  # 0, then 1..4 by 1300
    stages, sigma = count_stages(steps, count, basis="heads_induction")
    assert sigma == 0.5
    assert [s.boundary for s in stages[1:]][:1] == ["number of induction heads starts rising"]
    assert near(stages[1].start_step, 900, steps)
    one = np.where(steps < 1000, 0.0, 1.0)
    assert len(count_stages(steps, one, basis="heads_induction")[0]) == 1


def _stage(index: int, step: int, kind: str, evidence: float = float("nan"), low: int = -1, high: int = -1) -> Stage:
    return Stage(index, step, step + 1, "rising", 0.0, 0.0, 0.0, 1.0, kind, evidence, low, high)


def test_boundaries_within_one_checkpoint_are_one_listing_its_curves() -> None:
    grid = np.arange(0, 1000, 100)
    stages = {
        "llc": [_stage(0, 0, "start"), _stage(1, 400, "LLC accelerates")],
        "copy_loss": [_stage(0, 0, "start"), _stage(1, 300, "copy loss drop speeds up"), _stage(2, 800, "copy loss drop slows")],
        "heads_induction": [_stage(0, 0, "start"), _stage(1, 500, "number of induction heads starts rising")],
    }
    groups = merge_boundaries(stages, grid, merge=1)
    assert [[(s.basis, s.step) for s in g] for g in groups] == [
        [("copy_loss", 300), ("llc", 400)],
        [("heads_induction", 500)],
        [("copy_loss", 800)],
    ]
    assert len(merge_boundaries(stages, grid, merge=2)) == 2
    assert len(merge_boundaries(stages, grid, merge=0)) == 4


def test_a_merged_group_keeps_its_best_supported_boundary_not_the_earliest() -> None:
    """A faint bend of the loss one checkpoint before the copy loss's strong one, which the count of heads places at
    the same checkpoint: the group stands at the copy loss's step, with its uncertainty; the earliest would be the
    loss's. Between two boundaries alone, the larger likelihood ratio wins."""
    group = (
        Support("loss", "loss drop slows", 300, 12.0, 300, 300),
        Support("copy_loss", "copy loss drop speeds up", 400, 90.0, 400, 500),
        Support("heads_induction", "number of induction heads starts rising", 500, 20.0, 400, 500),
    )
    assert best_supported(group).step == 400  # 400 is held by 90 + 20, 500 by 90 + 20 too: ties to the larger own ratio
    assert best_supported(group[:1] + group[2:]).step == 500
    assert best_supported((Support("a", "x", 300, 5.0, 300, 300), Support("b", "y", 400, 50.0, 400, 400))).step == 400
    grid = np.arange(0, 1000, 100)
    stages = {
        "loss": [_stage(0, 0, "start"), _stage(1, 300, "loss drop slows", 12.0, 300, 300)],
        "copy_loss": [_stage(0, 0, "start"), _stage(1, 400, "copy loss drop speeds up", 90.0, 400, 500)],
    }
    steps = grid[:8]
    curves = {b: (steps, np.arange(8.0), rows) for b, rows in stages.items()}
    _, boundaries = run_stages_from(curves, [], StageRule(), primary="loss")
    # its interval spans its members' (the loss's at 300 reaching back to 200) to the copy loss's last, 500
    assert [(b.step, b.low, b.high, b.first, b.last) for b in boundaries] == [(400, 200, 500, 300, 400)]


def _scores(values: np.ndarray, steps: np.ndarray, label: str = "induction scores", scale: float = 0.3) -> HeadScores:
    return HeadScores(label, steps, values, scale)


def test_a_boundary_is_named_by_what_changes_across_it() -> None:
    """Five layer-1 heads whose induction scores rise from 0.03 to 0.18 in the stage a boundary opens, under the
    threshold of 0.3, and one previous-token head that rises by 0.05 (under a quarter of its threshold): the name gives
    the induction rise with its heads and their mean scores before and after; a stage where nothing moves says so."""
    steps = np.array([0, 100, 200, 300])
    induction = np.full((4, 2, 8), 0.02)
    rising = [0, 1, 3, 4, 7]
    induction[2:, 1, rising] = 0.03
    induction[3, 1, rising] = 0.18
    previous = np.full((4, 2, 8), 0.1)
    previous[3, 0, 2] = 0.15
    scores = [_scores(induction, steps), _scores(previous, steps, "previous-token scores")]
    assert boundary_name(200, 300, scores) == "induction scores rise in L1 H0, H1, H3, H4, H7: 0.03 -> 0.18"
    assert boundary_name(0, 100, scores) == NO_EVENT
    parts = name_changes(100, 300, scores)
    assert len(parts) == 1 and parts[0][0] == pytest.approx((0.18 - 0.02) / 0.3)
    # a head losing its type is a fall, named as such; the larger change (in units of its scale) comes first
    induction[3, 0, 5] = -0.5 + 0.02
    first, second = name_changes(200, 300, [_scores(induction, steps)])
    assert first[1] == "induction scores fall in L0 H5: 0.02 -> -0.48" and second[1].startswith("induction scores rise")


def test_the_heads_naming_is_left_to_the_changes() -> None:
    """The old naming by the heads that form is gone (only its tests used it); a head reaching a type is an event of
    its own (the Timeline's head-type lane)."""
    assert not hasattr(run_module, "name_boundary")


def test_a_missing_score_is_left_out_not_read_as_zero() -> None:
    """A head without a value at the stage's end (no ablation row there) is left out of the change, not read as a
    fall to zero; its last value before is used where it has one; a head with no value at all is skipped."""
    steps = np.array([0, 100, 200])
    effect = np.full((3, 1, 4), 0.02)
    effect[:, 0, 3] = [0.8, 0.8, np.nan]  # a large effect whose last row is missing: no fall to 0
    effect[:, 0, 2] = np.nan  # never measured
    effect[2, 0, 1] = 0.6  # a real rise
    effect[1, 0, 0] = np.nan  # missing in the middle: its last value before is used
    parts = name_changes(0, 200, [_scores(effect, steps, "ablation effects on the text", 0.8)])
    assert [t for _, t in parts] == ["ablation effects on the text rise in L0 H1: 0.02 -> 0.6"]
    assert name_changes(0, 100, [_scores(effect, steps, "ablation effects on the text", 0.8)]) == []


class _AblationStore:
    """The few members of `analysis.store.Store` that `ablation_scores` reads, over a frame with a missing row."""

    n_layers, n_heads = 1, 2

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    def has(self, lens) -> bool:
        return True

    def frame(self, lens, columns=None) -> pd.DataFrame:
        return self._frame


def test_ablation_scores_keep_a_missing_row_missing() -> None:
    rows = [(s, 0, h, 0.1 * (h + 1), 0.2, "mean") for s in (0, 100) for h in (0, 1) if (s, h) != (100, 1)]
    frame = pd.DataFrame(rows, columns=["step", "layer", "head", "text_increase", "probe_increase", "method"])
    text = ablation_scores(_AblationStore(frame))[0]
    assert text.label == "ablation effects on the text"
    assert text.values[0, 0].tolist() == pytest.approx([0.1, 0.2]) and text.values[1, 0, 0] == pytest.approx(0.1)
    assert np.isnan(text.values[1, 0, 1])  # not 0: a 0.2 -> 0 fall that never happened
    assert name_changes(0, 100, [text]) == []


def test_a_boundary_of_the_run_stands_on_two_curves_or_a_strong_one() -> None:
    """Two curves' boundaries stand whatever their ratios; one curve's only above `LONE_SUPPORT`, however many of its
    own bends the group holds."""
    assert stands((Support("llc", "a", 100, 12.0), Support("loss", "b", 100, 10.0)))
    assert not stands((Support("copy_loss", "a", 100, 40.0), Support("copy_loss", "b", 200, 60.0)))
    assert stands((Support("copy_loss", "a", 100, LONE_SUPPORT + 1),))
    assert not stands((Support("copy_loss", "a", 100, float("nan")),))


def test_noise_alone_makes_no_boundary_that_stands_alone() -> None:
    """Every boundary noise alone makes (the draws of the noise-only test, at 14 to 67 checkpoints) has a likelihood
    ratio under half of `LONE_SUPPORT`: a lone bend of noise would pass it only with its noise level underestimated by
    more than sqrt(2) (measured largest: docs/stages.md)."""
    rng = np.random.default_rng(11)
    largest = 0.0
    for n_points in (14, 30, 50, 67):
        steps = STEPS[np.linspace(0, len(STEPS) - 1, n_points).astype(int)]
        u = np.log10(1 + steps)
        for trend in (0.0, 10.0):
            for _ in range(100):
                for found in (
                    llc_stages(steps, 5 + trend * u + rng.normal(0, 1.0, n_points), 1.0),
                    loss_stages(steps, 5 - trend * u + rng.normal(0, 1.0, n_points), sigma=1.0),
                ):
                    largest = max([largest, *(s.evidence for s in found[1:])])
    assert 9.0 < largest < LONE_SUPPORT / 2, largest  # some noise boundary is found (the count can fail), none strong


def test_a_boundary_could_lie_from_the_checkpoint_before_and_a_group_spans_its_members() -> None:
    """A boundary placed to one checkpoint reads from the checkpoint before it (the change lies between them); a group
    spans every member's interval: induction-d128's boundary at 1,500 with a copy-loss member at 1,400."""
    grid = np.arange(0, 2000, 100)
    assert group_interval((Support("llc", "a", 700, 30.0, 700, 700),), grid) == (600, 700)
    assert group_interval((Support("llc", "a", 0, 30.0, 0, 0),), grid) == (0, 0)
    group = (
        Support("copy_loss", "a", 1400, 31.8, 1400, 1400),
        Support("llc", "b", 1400, 60.7, 1400, 1400),
        Support("copy_loss", "c", 1500, 50.0, 1500, 1500),
        Support("heads_induction", "d", 1500, 49.1, 1500, 1600),
    )
    assert best_supported(group).step == 1500
    assert group_interval(group, grid) == (1300, 1600)
    assert group_interval((Support("loss", "a", 900, 30.0),), grid) == (800, 900)  # no interval of its own


def test_the_run_stages_lie_between_the_merged_boundaries_with_their_names() -> None:
    """Two curves' boundaries two checkpoints apart stay two boundaries; one curve's bend stands only above
    `LONE_SUPPORT`, and one across which no head's score changes is that curve's, however strong, not the run's; the
    run's stages lie between the others, named by the change."""
    steps = np.arange(0, 1100, 100)
    strong = LONE_SUPPORT + 30
    llc = [_stage(0, 0, "start of training"), _stage(1, 400, "LLC accelerates", strong, 400, 400)]
    copy = [_stage(0, 0, "start of training"), _stage(1, 200, "copy loss drop begins", strong + 10, 100, 200)]
    loss = [
        _stage(0, 0, "start of training"),
        _stage(1, 800, "loss drop slows", LONE_SUPPORT - 10, 800, 800),  # weak, alone: left out though named
    ]
    curves = {"llc": (steps, np.arange(11.0), llc), "copy_loss": (steps, np.zeros(11), copy), "loss": (steps, np.zeros(11), loss)}
    induction = np.zeros((11, 2, 4))
    induction[3:, 1, 2] = 0.4  # rises between steps 200 and 300
    induction[9:, 0, 0] = 0.4  # rises between steps 800 and 900: would name the loss's weak bend at 800
    previous = np.zeros((11, 2, 4))
    previous[5:, 0, 1] = 0.5  # rises between steps 400 and 500
    scores = [_scores(induction, steps), _scores(previous, steps, "previous-token scores")]
    run, boundaries = run_stages_from(curves, scores, StageRule(), primary="llc")
    assert [(s.start_step, s.end_step) for s in run] == [(0, 200), (200, 400), (400, 1000)]
    assert run[1].boundary == "induction scores rise in L1 H2: 0 -> 0.4"
    assert run[2].boundary.startswith("previous-token scores rise in L0 H1: 0 -> 0.5")
    assert [b.support for b in boundaries] == [
        (Support("copy_loss", "copy loss drop begins", 200, strong + 10, 100, 200),),
        (Support("llc", "LLC accelerates", 400, strong, 400, 400),),
    ]
    # the copy loss's interval (100-200) as it was; the LLC's one checkpoint reaches back to the one before
    assert [(b.low, b.high) for b in boundaries] == [(100, 200), (300, 400)]
    assert run[1].start_value == 2.0 and run[1].end_value == 4.0
    # a strong bend of one curve across which no head's score changes is that curve's, not the run's
    loss = [_stage(0, 0, "start of training"), _stage(1, 700, "loss drop speeds up", strong + 20, 700, 700)]
    curves["loss"] = (steps, np.zeros(11), loss)
    induction[9:, 0, 0] = 0.0
    run, _ = run_stages_from(curves, scores, StageRule(), primary="llc")
    assert [(s.start_step, s.end_step) for s in run] == [(0, 200), (200, 400), (400, 1000)]


# --- the shipped stores, their stages made again from their own tables (tests/unit/test_stage_schedules.py) ---

SHIPPED = [p for p in SCHEDULED if transitions(p)]


@pytest.mark.parametrize("store_path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_a_shipped_run_shows_its_transition_on_the_timeline_and_in_the_report(store_path: Path, tmp_path: Path) -> None:
    """On every shipped run with a transition to check (tests/unit/test_stage_schedules.py), its stages made again
    from its own tables: the boundary named by the transition's rise nearest to it is an event of the Timeline, drawn
    as a dotted line (with its uncertainty band where it spans more than one checkpoint), and a row of
    `headwatch report`'s table with the checkpoints it could sit at."""
    from headwatch.dashboard.data import step_axis
    from headwatch.dashboard.figures.timeline import timeline
    from headwatch.report import write_report

    out = recomputed(store_path, "full", tmp_path)
    store = open_store(out)
    assert store.meta.stages is not None and store.meta.stages["primary"] == "run"
    rows = stage_rows(store)
    assert rows is not None
    ((name, reference),) = transitions(out).items()
    named = rows[(rows["stage"] > 0) & rows["boundary"].str.startswith(name)]
    hit = named.iloc[int(np.argmin(np.abs(named["start_step"].to_numpy() - reference)))]
    step, boundary = int(hit["start_step"]), str(hit["boundary"])
    assert any(e.step == step and boundary in e.label for e in stage_events(store))
    axis = step_axis(store, scale="log")
    figure = timeline(axis, None, "", rows, stage_events(store), run=store_path.name, basis="run")
    names = [s.name for s in figure.layout.shapes]
    assert f"stage {int(hit['stage']) + 1} begins: {boundary}" in names
    low, high = int(hit["low_step"]), int(hit["high_step"])
    band = f"stage {int(hit['stage']) + 1} boundary uncertainty: steps {low:,} to {high:,}"
    assert (band in names) == (high > low)
    text = write_report(out, tmp_path / "report").read_text()
    where = f"{low:,}" if low == high else f"{low:,}–{high:,}"
    assert f"| {step:,}–" in text and boundary in text and f"| {where} |" in text


# --- what names a boundary and what the stages read, where the store has the newer lenses' tables ---


def _copy(store: str, tmp_path: Path) -> Path:
    import shutil

    out = tmp_path / store
    shutil.copytree(SCHEDULED[0].parent / store, out)
    return out


def test_the_ablation_effect_names_a_boundary_where_the_store_has_it(tmp_path: Path, monkeypatch) -> None:
    """A store with ablation.parquet (the ablation lens's table, declared by its own module): a head whose loss
    increase when ablated rises from 0.01 to 0.9 nats after step 1,300 names the boundary there beside the induction
    scores' rise, each change in units of its scale (a type's threshold; the largest ablation effect); without the
    declaration (or the table) the names are the types' alone."""
    import sys
    import types as modules

    from headwatch.analysis.stages.run import (
        ABLATION_EFFECTS,
        NAMED_CHANGES,
        ablation_scores,
        boundary_name,
        name_changes,
        type_scores,
    )
    from headwatch.analysis.store.format import TableSpec, schema_of

    out = _copy("induction-d128", tmp_path)
    (out / "ablation.parquet").unlink(missing_ok=True)  # the store's own ablations: this test plants its own
    store = open_store(out)
    assert ablation_scores(store) == []  # no table
    spec = TableSpec(
        name="ablation",
        file="ablation.parquet",
        row="one row per (step, layer, head)",
        about="test",
        schema=schema_of(
            {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "method": pa.string()}
            | {c: pa.float64() for c in ABLATION_EFFECTS}
        ),
        docs={c: c for c in ("step", "layer", "head", "method", *ABLATION_EFFECTS)},
        sort=("step", "layer", "head"),
    )
    module = modules.ModuleType("headwatch.analysis.store.lenses.ablation")
    module.ABLATION = spec  # type: ignore[attr-defined]  # a stand-in module: its attributes are set here
    monkeypatch.setitem(sys.modules, "headwatch.analysis.store.lenses.ablation", module)
    steps = store.steps
    grid = [(int(s), a, b) for s in steps for a in range(store.n_layers) for b in range(store.n_heads)]
    effect = [0.9 if (s >= 1_400 and (a, b) == (1, 0)) else 0.01 for s, a, b in grid]
    table = pa.table(
        {
            "step": pa.array([g[0] for g in grid], pa.int64()),
            "layer": pa.array([g[1] for g in grid], pa.int32()),
            "head": pa.array([g[2] for g in grid], pa.int32()),
            "method": ["mean"] * len(grid),
            "text_increase": effect,
            "probe_increase": [0.0] * len(grid),
        }
    )
    pq.write_table(table, out / "ablation.parquet")
    scores = ablation_scores(open_store(out))
    assert [s.label for s in scores] == ["ablation effects on the text"]
    assert scores[0].scale == pytest.approx(0.9)
    name = boundary_name(1_300, 1_500, type_scores(store) + scores)
    # the types' changes across the stage (each in units of its threshold; the induction heads' rise the largest on
    # induction-d128) and the planted ablation effect, 0.01 -> 0.9 over its scale 0.9 (0.89 / 0.9 of it), largest first
    types = name_changes(1_300, 1_500, type_scores(store))
    assert types and types[0][1].startswith("induction scores rise in L1 H0") and types[0][0] > 0.89 / 0.9
    planted = (0.89 / 0.9, "ablation effects on the text rise in L1 H0: 0.01 -> 0.9")
    want = sorted([*types, planted], key=lambda part: -part[0])[:NAMED_CHANGES]
    assert planted in want and name == "; ".join(text for _, text in want)


def test_the_llc_is_read_under_the_training_distribution_where_stored(tmp_path: Path) -> None:
    """llc.parquet keyed by the distribution its SGLD loss was taken on (its ``data`` column): the stages read the
    rows under the run's training distribution (``train``) and name it; a shipped store without the column (the
    GPU-built induction-d512) reads its estimates, named as the held-out text, and one with it (induction-d128) its
    training distribution's."""
    from headwatch.analysis.stages import run as stages_run
    from headwatch.analysis.store.lenses.llc import LLC
    from headwatch.precompute.lenses.stages import add_stages

    shipped = open_store(SCHEDULED[0].parent / "induction-d512")
    at, named = stages_run.llc_source(shipped)
    assert at == {"layer": -1, "head": -1, "data": "text"} and named.startswith(stages_run.HELD_OUT + " (held-out split")
    rebuilt = SCHEDULED[0].parent / "induction-d128"
    assert "train" in set(pq.read_table(rebuilt / "llc.parquet", columns=["data"])["data"].to_pylist())
    at, named = stages_run.llc_source(open_store(rebuilt))
    assert at == {"layer": -1, "head": -1, "data": "train"} and named.startswith("the run's training distribution")

    out = _copy("induction-d512", tmp_path)
    llc = pq.read_table(out / "llc.parquet")
    assert "data" not in llc.column_names

    def under(name: str, table: pa.Table) -> pa.Table:
        return table.add_column(1, "data", pa.array([name] * table.num_rows)).select(LLC.schema.names)

    whole = pc.and_(pc.equal(llc["layer"], -1), pc.equal(llc["head"], -1))
    scaled = llc.set_column(llc.schema.get_field_index("llc"), "llc", pc.if_else(whole, pc.multiply(llc["llc"], 2.0), llc["llc"]))
    pq.write_table(pa.concat_tables([under("train", llc), under("text", scaled)]).cast(LLC.schema), out / "llc.parquet")
    (out / "llc_chains.parquet").unlink()
    found = add_stages(out)
    assert found.meta["llc"]["distribution"].startswith("the run's training distribution")
    whole_model = pq.read_table(SCHEDULED[0].parent / "induction-d512" / "llc.parquet").to_pandas().query("layer == -1")
    expected = dict(zip(whole_model["step"], whole_model["llc"], strict=True))
    np.testing.assert_allclose([s.start_value for s in found.llc], [expected[s.start_step] for s in found.llc])


def test_a_boundarys_uncertainty_is_a_band_on_the_timeline() -> None:
    from headwatch.dashboard.data import StepAxis
    from headwatch.dashboard.figures.timeline import boundary_band, timeline

    rows = pd.DataFrame(
        {
            "basis": ["run"] * 3,
            "stage": [0, 1, 2],
            "start_step": [0, 300, 700],
            "end_step": [300, 700, 1000],
            "trend": ["rising"] * 3,
            "boundary": ["start of training", "a", "b"],
            "low_step": [-1, 200, 700],
            "high_step": [-1, 400, 700],
        }
    )
    assert [boundary_band(r) for r in rows.itertuples(index=False)] == [None, (200, 400), None]
    steps = np.arange(0, 1100, 100)
    axis = StepAxis(x=steps.astype(float), steps=steps, dup_x=np.zeros(0), dup_text=(), title="step", log=False, range=(0, 1000))
    names = [s.name for s in timeline(axis, None, "", rows, [], run="r", basis="run").layout.shapes]
    assert names.count("stage 2 boundary uncertainty: steps 200 to 400") == 2  # the loss panel and the events' lanes
    assert not any("stage 3 boundary uncertainty" in n for n in names)
