"""Boundaries where a curve's rate changes, the behavioural curves, the run's merged boundaries and their names
(analysis/stages/curve.py, analysis/stages/run.py), on synthetic curves with known breakpoints and on the shipped stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.findings.events import stage_events, stage_rows
from headwatch.analysis.stages.curve import Stage, StageRule, llc_stages, loss_stages
from headwatch.analysis.stages.run import NO_EVENT, Support, count_stages, merge_boundaries, name_boundary, run_stages_from
from headwatch.analysis.store import open_store

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data"
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


def _stage(index: int, step: int, kind: str) -> Stage:
    return Stage(index, step, step + 1, "rising", 0.0, 0.0, 0.0, 1.0, kind)


def test_boundaries_within_two_checkpoints_are_one_listing_its_curves() -> None:
    grid = np.arange(0, 1000, 100)
    stages = {
        "llc": [_stage(0, 0, "start"), _stage(1, 400, "LLC accelerates")],
        "copy_loss": [_stage(0, 0, "start"), _stage(1, 300, "copy loss drop speeds up"), _stage(2, 800, "copy loss drop slows")],
        "heads_induction": [_stage(0, 0, "start"), _stage(1, 500, "number of induction heads starts rising")],
    }
    groups = merge_boundaries(stages, grid, merge=2)
    assert [[(s.basis, s.step) for s in g] for g in groups] == [
        [("copy_loss", 300), ("llc", 400), ("heads_induction", 500)],
        [("copy_loss", 800)],
    ]
    # three checkpoints apart: two boundaries; with merge=0 every step its own
    assert (
        len(
            merge_boundaries(
                {"a": [_stage(0, 0, ""), _stage(1, 300, "x")], "b": [_stage(0, 0, ""), _stage(1, 600, "y")]}, grid, merge=2
            )
        )
        == 2
    )
    assert len(merge_boundaries(stages, grid, merge=0)) == 4


def test_a_boundary_is_named_after_the_heads_that_form_in_the_stage_it_opens() -> None:
    emergence = [
        ("previous_token", 0, 5, 1250),
        ("induction", 1, 6, 1400),
        ("induction", 1, 0, 1400),
        ("induction", 1, 1, 1500),
        ("previous_token", 0, 2, 2600),
    ]
    assert name_boundary(1250, 1500, emergence) == "induction heads form (L1 H0, L1 H6, L1 H1)"
    assert name_boundary(1200, 1500, emergence) == "induction heads form (L1 H0, L1 H6, L1 H1); previous-token heads form (L0 H5)"
    assert name_boundary(1500, 2500, emergence) == NO_EVENT
    many = [("previous_token", 0, h, 100 + h) for h in range(8)]
    assert name_boundary(0, 200, many) == "previous-token heads form (L0 H0, L0 H1, L0 H2, L0 H3, L0 H4, L0 H5, 2 more)"


def test_the_run_stages_lie_between_the_merged_boundaries_with_their_names() -> None:
    steps = np.array([0, 100, 200, 300, 400, 500, 600])
    llc = [_stage(0, 0, "start of training"), _stage(1, 300, "LLC accelerates")]
    copy = [_stage(0, 0, "start of training"), _stage(1, 200, "copy loss drop begins")]
    curves = {"llc": (steps, np.arange(7.0), llc), "copy_loss": (steps, np.zeros(7), copy)}
    run, boundaries = run_stages_from(curves, [("induction", 1, 2, 300)], StageRule(), primary="llc")
    assert [(s.start_step, s.end_step) for s in run] == [(0, 200), (200, 600)]
    assert run[1].boundary == "induction heads form (L1 H2)" and boundaries[0].support == (
        Support("copy_loss", "copy loss drop begins", 200),
        Support("llc", "LLC accelerates", 300),
    )
    assert run[1].start_value == 2.0 and run[1].end_value == 6.0


# --- the shipped stores: the done-when of the issue "Stages that find the transitions" ---


def _copy_loss_window(store_path: Path) -> tuple[int, int]:
    """The checkpoints, one either side, of the window in which the probe's copy loss falls from 90% to 10% of its
    drop (from its highest value before its lowest to its lowest), from eval_loss.parquet alone."""
    frame = pd.read_parquet(store_path / "eval_loss.parquet").sort_values("step")
    steps, copy = frame["step"].to_numpy(), frame["probe_copy_loss"].to_numpy()
    low = int(np.argmin(copy))
    high = int(np.argmax(copy[: low + 1]))
    top, bottom = copy[high], copy[low]
    start = high + int(np.argmax(copy[high:] <= bottom + 0.9 * (top - bottom)))
    end = start + int(np.argmax(copy[start:] <= bottom + 0.1 * (top - bottom)))
    return int(steps[max(start - 1, 0)]), int(steps[min(end + 1, len(steps) - 1)])


def _count_window(store_path: Path, kind: str) -> tuple[int, int]:
    """The checkpoints, one either side, of the window in which the number of heads holding ``kind`` rises from 10%
    to 90% of its last value (head_types.parquet ``holds``)."""
    types = pd.read_parquet(store_path / "head_types.parquet")
    steps = np.sort(types["step"].unique())
    count = types[types["holds"] & (types["type"] == kind)].groupby("step").size().reindex(steps, fill_value=0).to_numpy()
    start = int(np.argmax(count >= 0.1 * count[-1]))
    end = int(np.argmax(count >= 0.9 * count[-1]))
    return int(steps[max(start - 1, 0)]), int(steps[min(end + 1, len(steps) - 1)])


def _forming(store_path: Path) -> tuple[str, tuple[int, int]] | None:
    """What the done-when asks of a shipped run: induction heads where one forms, else previous-token heads on the
    plain-text runs; None for a run with neither (induction-d64)."""
    emergence = pd.read_parquet(store_path / "head_emergence.parquet")
    formed = set(emergence.loc[emergence["emergence_step"].notna(), "type"])
    if "induction" in formed:
        return "induction heads form (", _copy_loss_window(store_path)
    if store_path.name.startswith("shakespeare"):
        return "previous-token heads form (", _count_window(store_path, "previous_token")
    return None


SHIPPED = sorted(p for p in DATA.iterdir() if (p / "meta.json").exists() and _forming(p) is not None)


def test_the_runs_checked_are_those_where_heads_form() -> None:
    """The runs the done-when names: four where an induction head forms (d64 forms none), the two plain-text runs."""
    assert [p.name for p in SHIPPED] == [
        "induction-d128",
        "induction-d128-seed2",
        "induction-d256",
        "induction-d512",
        "shakespeare-pythia-6x8",
        "shakespeare-pythia-6x8-seed2",
    ]


@pytest.mark.parametrize("store_path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_a_shipped_run_shows_a_boundary_where_its_heads_form(store_path: Path, tmp_path: Path) -> None:
    """On every shipped run where an induction head forms, a boundary of the run inside the window where the probe's
    copy loss falls from 90% to 10% of its drop (one checkpoint either side), named after the induction heads; on the
    plain-text runs, one inside the window where their previous-token heads form. The Timeline (its events and its
    figure's boundary lines) and `headwatch report` both show it."""
    from headwatch.dashboard.data import step_axis
    from headwatch.dashboard.figures.timeline import timeline
    from headwatch.report import write_report

    asked = _forming(store_path)
    assert asked is not None
    name, (lo, hi) = asked
    store = open_store(store_path)
    assert store.meta.stages is not None and store.meta.stages["primary"] == "run"
    rows = stage_rows(store)
    assert rows is not None
    hits = rows[(rows["stage"] > 0) & rows["start_step"].between(lo, hi) & rows["boundary"].str.contains(name, regex=False)]
    assert len(hits), f"no boundary named {name!r} in steps {lo}..{hi}: {rows[['start_step', 'boundary']].to_string()}"
    step, boundary = int(hits["start_step"].iloc[0]), str(hits["boundary"].iloc[0])
    assert any(e.step == step and boundary in e.label for e in stage_events(store))
    axis = step_axis(store, scale="log")
    figure = timeline(axis, None, "", rows, stage_events(store), run=store_path.name, basis="run")
    assert any(
        s.name == f"stage {int(hits['stage'].iloc[0]) + 1} begins: {boundary}" and s.x0 == axis.at(step)
        for s in figure.layout.shapes
    )
    text = write_report(store_path, tmp_path / "out").read_text()
    assert f"| {step:,}–" in text and boundary in text
