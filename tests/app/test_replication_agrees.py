"""Issue 62: whether an association replicates is one verdict, said alike by the Timeline's open-question paragraph,
the Trajectory map's reading and ``headwatch report``'s answer for the same stores.

Before, all three read replication as p < 0.05 uncorrected in every run while the tables beside them carried Holm's
decisions with their Monte Carlo error: induction-d128's report said D_KL of W_QK "holds" in both seeds while its
own row said no association is shown in seed 1234. The verdict expected here is computed apart from the sentences:
each run's decisions from `judge_associations` over the study's statistics it has (the decision itself is tested
against scipy in test_significance), then the rule written out in `tests.replication.rule`.

Two cases: the shipped induction-d128 with its replicate induction-d128-seed2, and two synthetic runs of one recipe
(seeds 1 and 2) whose head types are planted so that D_KL of W_QK is associated in one and undecided in the other.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwatch.analysis.findings.association import store_association
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.types import HEAD_TYPES, HEAD_TYPES_TABLE
from headwatch.analysis.trajectories.type_association import ASSOCIATION_PAIRS, has_statistic
from headwatch.cli import main
from headwatch.dashboard.labels import STATS
from tests import replication
from tests.app.conftest import DIMS, ROOT, open_page

TIMELINE, TRAJ = "pages/run_timeline.py", "pages/trajectory_map.py"
N_HEADS = DIMS["n_heads"]
# The planted runs' induction heads (layer, head): in "a" the two clusters of D_KL of W_QK exactly (AMI 1); "b" has
# L0 H3 untyped, which leaves its p over heads within its Monte Carlo error of 0.05 after Holm (found by trying
# each single head; the test checks it below, so a change in the clustering or the shuffles shows up there).
PLANTED = {"a": {(0, 2), (0, 3), (2, 3), (3, 0)}, "b": {(0, 2), (2, 3), (3, 0)}}


def _three_places(data: Path, run: str, replicate: str, on_map: list[tuple[str, str]], monkeypatch, out: Path):
    """The verdicts the Timeline and the report give every study statistic of ``run``, and the Trajectory map's
    reading gives each of ``on_map`` (one opening per statistic mapped)."""
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(data))
    store = open_store(data / run)
    pairs = [(s, m) for s, m in ASSOCIATION_PAIRS if has_statistic(store, s, m)]
    timeline = open_page(TIMELINE, {"run": run})
    paragraph = " ".join(m.value for m in timeline.markdown if "trajectory clusters were compared" in m.value)
    assert f"Replication, asked of this run's replicate `{replicate}` (the same recipe, another seed)" in paragraph
    mapped: dict[tuple[str, str], str] = {}
    for pair in on_map:
        stat, matrix = pair
        at = open_page(TRAJ, {"run": run, "stat": stat, "matrix": matrix})
        reading = " ".join(m.value for m in at.markdown if m.value.startswith(f"**{STATS[stat].short()}"))
        assert f"Replication, asked of this run's replicate `{replicate}` (the same recipe, another seed)" in reading
        mapped |= replication.verdicts(reading, {pair: replication.page_name(pair)})
    assert main(["report", str(data / run), "--out", str(out)]) == 0
    answer = (out / "report.md").read_text().split("**Answer.**", 1)[1].split("\n## ", 1)[0]
    assert f"Replication, asked of `{run}`'s replicate `{replicate}` (found beside it in " in answer
    report = replication.verdicts(answer, {p: replication.report_name(p) for p in pairs})
    return replication.verdicts(paragraph, {p: replication.page_name(p) for p in pairs}), mapped, report


def test_on_induction_d128_the_three_places_say_the_same_replication(tmp_path: Path, monkeypatch) -> None:
    """The shipped d128 and its second seed: every study statistic's verdict is the same on the Timeline, on the
    Trajectory map and in the report, and is the rule's over the two seeds' Holm decisions (computed here apart from
    the sentences), the refined LLC among them (both seeds hold it)."""
    data = ROOT / "data"
    runs = [data / "induction-d128", data / "induction-d128-seed2"]
    expected = replication.expected(runs)
    both = [(s, m) for s, m in ASSOCIATION_PAIRS if all(has_statistic(open_store(r), s, m) for r in runs)]
    assert sorted(expected) == sorted(both) and ("llc", "qk") in expected
    # the map opened once per statistic with a stored map (the rLLC has none here: the planted case covers "undecided")
    pairs = [("kl_gauss", "qk"), ("spectral_entropy", "ov"), ("stable_rank", "qk")]
    timeline, on_map, report = _three_places(data, "induction-d128", "induction-d128-seed2", pairs, monkeypatch, tmp_path)
    assert timeline == expected and report == expected
    assert on_map == {p: expected[p] for p in pairs}


def _write_planted_types(path: Path, induction: set[tuple[int, int]]) -> None:
    """head_types.parquet: ``induction`` heads hold the induction type at the last checkpoint, nothing else."""
    store = open_store(path)
    steps = [int(s) for s in store.steps]
    rows: dict[str, list[object]] = {c: [] for c in HEAD_TYPES_TABLE.schema.names}
    for step in steps:
        for layer in range(DIMS["n_layers"]):
            for head in range(N_HEADS):
                for name in HEAD_TYPES:
                    on = step == steps[-1] and name == "induction" and (layer, head) in induction
                    values = (step, layer, head, name, 0.5 if on else 0.01, 0.01, 50.0 if on else 1.0, on, on)
                    for c, v in zip(rows, values, strict=True):
                        rows[c].append(v)
    pq.write_table(HEAD_TYPES_TABLE.sorted(pa.table(rows, schema=HEAD_TYPES_TABLE.schema)), path / HEAD_TYPES_TABLE.file)


@pytest.fixture
def planted(store_path: Path, tmp_path: Path) -> Path:
    """Two copies of the synthetic store, one recipe with seeds 1 and 2, with the `PLANTED` head types."""
    data = tmp_path / "data"
    for seed, name in enumerate(PLANTED, start=1):
        shutil.copytree(store_path, data / name)
        _write_planted_types(data / name, PLANTED[name])
        meta = json.loads((data / name / "meta.json").read_text())
        meta["training"] |= {"seed": seed, "config": {"seed": seed, "optim": {"max_lr": 1e-3}}}
        (data / name / "meta.json").write_text(json.dumps(meta))
    return data


def test_associated_in_one_run_and_undecided_in_its_replicate_is_undecided_in_all_three_places(
    planted: Path, tmp_path: Path, monkeypatch
) -> None:
    """The planted pair: D_KL of W_QK associated in "a" (Holm p well below 0.05) and undecided in "b" (its Holm p's
    Monte Carlo interval holds 0.05). Its replication is undecided, and the Timeline, the Trajectory map and the
    report all say so; before, "b"'s uncorrected p < 0.05 made it "replicate" in all three."""
    pair = ("kl_gauss", "qk")
    a, b = open_store(planted / "a"), open_store(planted / "b")
    judged = {name: replication.judged_over_heads(store)[pair] for name, store in (("a", a), ("b", b))}
    assert judged["a"].decision == "associated" and judged["a"].high < 0.05
    assert judged["b"].decision == "undecided" and judged["b"].low < 0.05 <= judged["b"].high
    assert judged["b"].p < 0.05  # the uncorrected reading called it associated, so "replicates"
    clusters = store_association(a, "kl_gauss", matrix="qk")
    assert clusters is not None
    typed = np.array([(i // N_HEADS, i % N_HEADS) in PLANTED["a"] for i in range(len(clusters[1]))])
    assert len(set(zip(clusters[1], typed, strict=True))) == 2  # "a"'s types are its clusters exactly
    expected = replication.expected([planted / "a", planted / "b"])
    assert expected[pair] == "undecided"
    timeline, on_map, report = _three_places(planted, "a", "b", [pair], monkeypatch, tmp_path / "report")
    assert timeline == expected and report == expected
    assert on_map == {pair: "undecided"}
