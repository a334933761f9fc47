"""The same transitions on any checkpoint schedule (analysis/stages/run.py, docs/stages.md "On any schedule").

Every shipped store is thinned to three schedules (its own, every other checkpoint, and a Pythia-like one: log-spaced
to 512, then the checkpoint nearest each multiple of 500) by copying the tables the stages read into ``tmp_path``
with the other checkpoints' rows left out, and re-read by the commands a user runs on such a store,
``python -m headwatch.precompute.lenses.types STORE`` and ``python -m headwatch.precompute.lenses.stages STORE``
(their ``main``, in this process). The references are computed here from the thinned copy's raw tables alone:

- the induction transition: the first checkpoint of the probe copy loss's sharpest fall, the pair of neighbouring
  checkpoints between which eval_loss.parquet ``probe_copy_loss`` falls fastest per decade of steps
  (``log10(1 + step)``, the stage rule's axis);
- the previous-token transition, on the runs where no induction head forms: the first checkpoint of the largest rise,
  between neighbouring checkpoints, of the number of heads holding the previous-token type (head_types.parquet
  ``holds``), where that rise is at least 3 heads (what the count's own rule can tell from noise; induction-d64's
  previous-token heads form one at a time, so it has none).

The boundary of the run nearest the reference (on the schedule's own grid) must be named by that type's rise (its name
leads with it) and lie within one checkpoint of it: not any of several such boundaries. How often that would pass by
chance, per run and schedule, is the share of the grid's checkpoints where a reference would pass it (docs/stages.md).
The stages are few: at most one boundary per `PER_BOUNDARY` checkpoints of a schedule, and at most one stage per
`PER_STAGE_FULL` checkpoints of a run's own schedule.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data"
SHIPPED = sorted(p for p in DATA.iterdir() if (p / "meta.json").exists())
SCHEDULES = ("full", "every_other", "pythia")
# The tables the types and stages commands read; every other table is left out of a thinned copy.
READ = ("heads", "attention", "eval_loss", "llc", "llc_chains", "ablation")
COUNT_RISE = 3  # heads: a rise of the previous-token count that makes a transition
PER_BOUNDARY = 3  # checkpoints per boundary of the run, at least, on every schedule
PER_STAGE_FULL = 4  # checkpoints per stage of the run, at least, on a run's own schedule


def schedule(steps: list[int], kind: str) -> list[int]:
    """A run's checkpoints thinned: ``full`` (all), ``every_other`` (the first, third, ..., and the last), ``pythia``
    (every checkpoint up to 512, then the one nearest each multiple of 500, and the last)."""
    s = np.asarray(sorted(steps))
    if kind == "full":
        return s.tolist()
    if kind == "every_other":
        return sorted({*s[::2].tolist(), int(s[-1])})
    late = [int(s[np.argmin(np.abs(s - m))]) for m in range(1000, int(s[-1]) + 1, 500)]
    return sorted({*s[s <= 512].tolist(), *late, int(s[-1])})


def thinned(store: Path, keep: list[int], out: Path) -> Path:
    """A copy of ``store`` at the checkpoints ``keep``: meta.json's checkpoints and the rows of `READ` tables at those
    steps, without the records the commands write (types, stages) nor the tables they do not read."""
    out.mkdir(parents=True)
    meta = json.loads((store / "meta.json").read_text())
    meta["checkpoints"] = [c for c in meta["checkpoints"] if c["step"] in keep]
    for record in ("types", "stages", "essential"):
        meta.pop(record, None)
    (out / "meta.json").write_text(json.dumps(meta))
    for name in READ:
        path = store / f"{name}.parquet"
        if path.exists():
            table = pq.read_table(path)
            pq.write_table(table.filter(pc.is_in(table["step"], pa.array(keep, pa.int64()))), out / path.name)
    return out


def recomputed(store: Path, kind: str, tmp: Path) -> Path:
    """The thinned copy with its types and stages made by the user's commands."""
    from headwatch.precompute.lenses import stages, types

    steps = [c["step"] for c in json.loads((store / "meta.json").read_text())["checkpoints"]]
    out = thinned(store, schedule(steps, kind), tmp / f"{store.name}-{kind}")
    with contextlib.redirect_stdout(io.StringIO()):
        assert types.main([str(out)]) == 0
        assert stages.main([str(out)]) == 0
    return out


def sharpest_copy_fall(store: Path) -> int:
    """The first checkpoint of the probe copy loss's sharpest fall per decade of steps (module docstring)."""
    frame = pd.read_parquet(store / "eval_loss.parquet").sort_values("step")
    steps, copy = frame["step"].to_numpy(), frame["probe_copy_loss"].to_numpy()
    rate = np.diff(copy) / np.diff(np.log10(1.0 + steps))
    return int(steps[int(np.argmin(rate))])


def previous_token_rise(store: Path) -> int | None:
    """The first checkpoint of the largest rise of the previous-token count, None where it stays under
    `COUNT_RISE` heads (module docstring)."""
    types = pd.read_parquet(store / "head_types.parquet")
    steps = np.sort(types["step"].unique())
    held = types[types["holds"] & (types["type"] == "previous_token")]
    count = held.groupby("step").size().reindex(steps, fill_value=0).to_numpy()
    rise = np.diff(count)
    return int(steps[int(np.argmax(rise))]) if len(rise) and rise.max() >= COUNT_RISE else None


def transitions(store: Path) -> dict[str, int]:
    """The transitions checked on a thinned copy: the name a boundary leads with -> the reference step."""
    emergence = pd.read_parquet(store / "head_emergence.parquet")
    formed = set(emergence.loc[emergence["emergence_step"].notna(), "type"])
    if "induction" in formed:
        return {"induction scores rise": sharpest_copy_fall(store)}
    step = previous_token_rise(store) if "previous_token" in formed else None
    return {} if step is None else {"previous-token scores rise": step}


def run_rows(store: Path) -> pd.DataFrame:
    frame = pd.read_parquet(store / "stages.parquet")
    return frame[frame["basis"] == "run"].sort_values("stage").reset_index(drop=True)


def distance(grid: np.ndarray, a: int, b: int) -> int:
    """Checkpoints of ``grid`` between two of its steps."""
    return abs(int(np.searchsorted(grid, a)) - int(np.searchsorted(grid, b)))


def passes(grid: np.ndarray, bounds: pd.DataFrame, name: str, reference: int) -> bool:
    """Whether the boundary nearest ``reference`` (either of two equally near) is named by ``name`` and lies within
    one checkpoint of it."""
    far = np.array([distance(grid, int(s), reference) for s in bounds["start_step"]])
    nearest = bounds["boundary"].to_numpy()[far == far.min()]
    return bool(far.min() <= 1 and any(str(b).startswith(name) for b in nearest))


def test_the_runs_and_their_transitions() -> None:
    """Seven shipped runs; the four with induction heads check the induction transition, the two plain-text runs the
    previous-token one, induction-d64 (one previous-token head at a time, no induction head) none."""
    assert len(SHIPPED) == 7
    checked = {p.name: list(transitions(p)) for p in SHIPPED}
    assert checked == {
        "induction-d128": ["induction scores rise"],
        "induction-d128-seed2": ["induction scores rise"],
        "induction-d256": ["induction scores rise"],
        "induction-d512": ["induction scores rise"],
        "induction-d64": [],
        "shakespeare-pythia-6x8": ["previous-token scores rise"],
        "shakespeare-pythia-6x8-seed2": ["previous-token scores rise"],
    }


# Where the rule misses the transition, and why (a strict xfail: it fails the day the rule finds it). The CPU-rebuilt
# induction-d128-seed2 forms its induction head (L1 H2) slowly: its copy loss falls at 9 to 18 nats per decade at every
# checkpoint from 2,800 to 4,000, the steepest pairs within a few percent of each other (3,100 and 3,200), so the
# sharpest fall is no single step; the run's boundary named by the induction rise sits at the fall's onset, 2,800,
# four checkpoints before the reference on its own schedule and two on every other checkpoint.
SLOW = "a slow induction transition: the boundary at its onset (2,800), the reference 3,200"
MISSED = {("induction-d128-seed2", "full"): SLOW, ("induction-d128-seed2", "every_other"): SLOW}
CASES = [
    pytest.param(p, kind, id=f"{p.name}-{kind}", marks=[pytest.mark.xfail(strict=True, reason=MISSED[(p.name, kind)])])
    if (p.name, kind) in MISSED
    else pytest.param(p, kind, id=f"{p.name}-{kind}")
    for kind in SCHEDULES
    for p in SHIPPED
]


@pytest.mark.parametrize(("store_path", "kind"), CASES)
def test_the_transitions_are_found_on_every_schedule(store_path: Path, kind: str, tmp_path: Path) -> None:
    """On every shipped run and schedule, a boundary of the run named by the transition's rise and within one
    checkpoint of the schedule's grid of the transition (the copy loss's sharpest fall; the previous-token count's
    largest rise) is the boundary of the run nearest it; every boundary lies inside its own uncertainty, which
    reaches back at least to the checkpoint before it; the stages are few (module docstring)."""
    out = recomputed(store_path, kind, tmp_path)
    grid = np.sort(pd.read_parquet(out / "eval_loss.parquet")["step"].to_numpy())
    rows = run_rows(out)
    assert len(rows) >= 2 and len(rows) - 1 <= len(grid) / PER_BOUNDARY, (len(rows), len(grid))
    if kind == "full":
        assert len(rows) <= len(grid) / PER_STAGE_FULL, (len(rows), len(grid))
    bounds = rows[rows["stage"] > 0]
    assert (bounds["low_step"] <= bounds["start_step"]).all() and (bounds["start_step"] <= bounds["high_step"]).all()
    assert np.isin(bounds[["low_step", "high_step"]].to_numpy(), grid).all()
    before = grid[np.searchsorted(grid, bounds["start_step"].to_numpy()) - 1]
    assert (bounds["low_step"].to_numpy() <= before).all()
    for name, reference in transitions(out).items():
        assert passes(grid, bounds, name, reference), (
            f"{store_path.name} ({kind}, {len(grid)} checkpoints): the boundary nearest step {reference:,} is not one "
            f"named {name!r} within one checkpoint of it; boundaries: {rows[['start_step', 'boundary']].to_string()}"
        )


def _heads_text(heads: list[tuple[int, int]]) -> str:
    """``L1 H0, H1, L2 H3``: heads grouped by layer, as a boundary's name lists them."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in sorted(heads):
        by_layer.setdefault(layer, []).append(head)
    return ", ".join(f"L{layer} " + ", ".join(f"H{h}" for h in hs) for layer, hs in by_layer.items())


def test_the_seed2_first_copy_fall_is_named_by_the_induction_rise(tmp_path: Path) -> None:
    """induction-d128-seed2 forms its one induction head late (L1 H2 at step 3,250 on the GPU-built store); before it,
    several layer-1 heads' induction scores rise from near uniform attention without reaching the type's threshold
    while the copy loss makes its first fall (on the GPU-built store five heads, to 0.16-0.20 between steps 1,400 and
    2,200). A boundary of the run before the head forms is named by that rise, with the heads whose rise across its
    stage is at least half the largest (found here by a plain pass over head_types.parquet's induction scores, each
    head's last score at or before the stage's first and last step), not after the previous-token heads alone."""
    out = recomputed(DATA / "induction-d128-seed2", "full", tmp_path)
    rows = run_rows(out)
    emergence = pd.read_parquet(out / "head_emergence.parquet")
    formed = emergence[(emergence["type"] == "induction") & emergence["emergence_step"].notna()]["emergence_step"]
    first = int(formed.min())
    threshold = json.loads((out / "meta.json").read_text())["types"]["types"]["induction"]["threshold"]
    scores = pd.read_parquet(out / "head_types.parquet").query("type == 'induction'").sort_values("step")
    last = int(scores["step"].max())

    def at(step: int) -> dict[tuple[int, int], float]:
        upto = scores[scores["step"] <= step]
        return {(int(a), int(b)): float(g["score"].iloc[-1]) for (a, b), g in upto.groupby(["layer", "head"])}

    named = []
    starts = [int(x) for x in rows["start_step"]]
    for i, (start, boundary) in enumerate(zip(starts, rows["boundary"], strict=True)):
        if i == 0 or start >= first:
            continue
        end = starts[i + 1] if i + 1 < len(starts) else last
        before, after = at(start), at(end)
        rise = {h: after[h] - before[h] for h in before if h in after}
        largest = max(rise.values())
        if largest < 0.25 * threshold:  # too small a change to name a boundary
            continue
        heads = sorted(h for h, r in rise.items() if r >= 0.5 * largest)
        if len(heads) > 6:
            continue  # named with "N more": not the few heads this test is about
        part = f"induction scores rise in {_heads_text(heads)}: "
        if part in str(boundary):
            was, now = (float(v) for v in str(boundary).split(part)[1].split(";")[0].split(" -> "))
            named.append((start, heads, was, now))
    assert named, rows[["start_step", "boundary"]].to_string()
    start, heads, was, now = named[0]
    assert len(heads) >= 2 and all(layer == 1 for layer, _ in heads), named
    assert was < now < threshold, named  # under the type's threshold all along
