"""What the Trajectory map computes before it draws (`views.trajectories.data`), against known values and direct
computations: the hover's sparklines and nearest trajectories, the association table's statistics, runs, rows and
answer, which runs can join a joint map, and the joint map's CSV."""

from __future__ import annotations

import shutil
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest

from benchmarks.synthetic_store import add_synthetic_forward
from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.store.lenses.llc import LLC
from headwatch.analysis.trajectories.significance import DECISION_WORDS
from headwatch.analysis.trajectories.type_association import ASSOCIATION_STATS, Association
from headwatch.dashboard.views.trajectories.data.association import (
    association_reading,
    association_runs,
    association_stats,
    association_table,
)
from headwatch.dashboard.views.trajectories.data.joint import joint_csv, joint_refusal
from headwatch.dashboard.views.trajectories.data.maps import SPARK_CHARS, nearest, sparklines
from tests.app.test_type_association_page import write_types


@pytest.fixture(scope="module")
def typed_path(store_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("typed") / "typed-run"
    shutil.copytree(store_path, path)
    write_types(path)
    return path


@pytest.fixture(scope="module")
def forward_path(store_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("forward") / "forward-run"
    shutil.copytree(store_path, path)
    return add_synthetic_forward(path)


def test_each_rows_sparkline_is_its_own_heads_trajectory() -> None:
    traj = np.zeros((5, 2, 3))  # (S, n_layers, n_heads): head (l, h) rises from 10 l + h by 0.5
    for layer in range(2):
        for head in range(3):
            traj[:, layer, head] = np.linspace(10 * layer + head, 10 * layer + head + 0.5, 5)
    layers, heads = np.array([1, 0, 1]), np.array([2, 0, 0])
    lines = sparklines(traj, layers, heads, label="σ")
    for line, layer, head in zip(lines, layers, heads, strict=True):
        first, bars, last = line.removeprefix("σ: ").split(" ")
        assert float(first) == 10 * layer + head and float(last) == 10 * layer + head + 0.5
        assert bars[0] == SPARK_CHARS[0] and bars[-1] == SPARK_CHARS[-1] and len(bars) == 5


def test_the_nearest_trajectories_are_named_by_layer_and_head() -> None:
    rows = pd.DataFrame({"neighbors": [np.array([i + 1, i - 1]) % 6 for i in range(6)]})  # 2 layers x 3 heads
    assert nearest(rows, layer=1, head=1, n_heads=3) == "L1 H2, L1 H0"
    assert nearest(rows, layer=0, head=0, n_heads=3) == "L0 H1, L1 H2"
    assert nearest(rows.iloc[:0], layer=0, head=0, n_heads=3) is None


def test_the_statistics_asked_add_the_one_mapped_and_the_refined_llc() -> None:
    plain = cast(Any, SimpleNamespace(has=lambda table: False))
    with_llc = cast(Any, SimpleNamespace(has=lambda table: table is LLC))
    assert association_stats(plain, "kl_gauss") == list(ASSOCIATION_STATS)
    assert association_stats(plain, "skew") == [*ASSOCIATION_STATS, "skew"]
    assert association_stats(plain, "entropy") == list(ASSOCIATION_STATS)  # forward: the types are decided from it
    assert association_stats(with_llc, "skew") == [*ASSOCIATION_STATS, "skew", "llc"]
    assert association_stats(with_llc, "llc") == [*ASSOCIATION_STATS, "llc"]


def test_the_runs_asked_are_this_one_and_the_others_with_head_types(store_path, typed_path) -> None:
    store, untyped, typed = open_store(store_path), open_store(store_path), open_store(typed_path)
    others: dict[str, Store | StoreError] = {"broken": StoreError("no meta.json"), "untyped": untyped, "typed": typed}
    assert association_runs("this", store, others) == [("this", store), ("typed", typed)]


def _association(ami: float, p: float, *, reason: str = "") -> Association:
    return Association(
        ami=ami, p_value=p, p_within_layers=p / 2, permutations=100, clusters=3, silhouette=0.25, types=3, heads=16, reason=reason
    )


def test_the_table_has_a_row_per_statistic_and_run_that_has_it(store_path) -> None:
    a, b = open_store(store_path), open_store(store_path)
    labels = np.array(["none", "sink", "none", "induction"])
    found = {
        (id(a), "std"): _association(0.5, 0.01),
        (id(b), "std"): _association(0.1, 0.5),
        (id(a), "kl_gauss"): _association(np.nan, np.nan, reason="one type only"),
    }
    asked: list[tuple[str, str]] = []

    def associate(store, statistic: str, *, matrix: str):
        asked.append((statistic, matrix))
        result = found.get((id(store), statistic)) if matrix == "qk" else None  # the W_OV pairs: tested, none here
        return None if result is None else (result, np.zeros(4, dtype=int), labels, 1000)

    table, by_stat = association_table([("a", a), ("b", b)], ["std", "kl_gauss", "llc"], matrix="qk", associate=associate)
    assert ("llc", "qk") not in asked  # a statistic the runs lack is not asked
    assert ("std", "ov") in asked  # the other matrix's study statistics are tested too, for Holm's count (issue 62)
    assert list(zip(table["statistic"], table["run"], strict=True)) == [("σ", "a"), ("σ", "b"), ("D_KL(P‖N(μ,σ))", "a")]
    assert list(table.columns[:3]) == ["statistic", "run", "recipe"]
    assert list(table["recipe"]) == ["this run", "the same recipe and the same seed (0): a copy, not a replicate", "this run"]
    assert set(table["heads per type"]) == {"induction 1, none 2, sink 1"}
    undecided = DECISION_WORDS["undecided"]  # p = 0.01 from 100 shuffles: its 99% interval reaches 0.052
    assert list(table["answer"]) == [
        f"{undecided}; within layers: {undecided}",
        "no association shown; within layers: no association shown",
        "one type only",
    ]
    assert {s: {r: t.association for r, t in runs.items()} for s, runs in by_stat.items()} == {
        "std": {"a": found[(id(a), "std")], "b": found[(id(b), "std")]},
        "kl_gauss": {"a": found[(id(a), "kl_gauss")]},
    }

    said = association_reading(table, by_stat, run="a", stat="std", matrix="ov", replicates=["b"])
    assert said is not None and said.startswith("**σ of W_OV, run a:** the 3 trajectory clusters and the head types")
    assert "AMI = 0.500, permutation p = 0.01 ± " in said
    # issue 62: replication read from the runs' corrected decisions, undecided here and no association shown in b
    assert said.endswith(
        "Replication, asked of this run's replicate `b` (the same recipe, another seed), read from each run's decision "
        "over heads after Holm's correction. No replication shown: σ of W_OV (no association shown in `b`). No "
        "association is shown to replicate."
    )
    alone = association_reading(table, by_stat, run="a", stat="std", matrix="ov", hint="HINT")
    assert alone is not None and alone.endswith(
        "Whether it replicates is not asked. HINT The table's other runs (b) are not replicates of this run (its "
        "`recipe` column says what each is): their rows are shown, not asked whether it replicates."
    )
    assert association_reading(table, by_stat, run="a", stat="kl_gauss", matrix="qk") == (
        "**D_KL(P‖N(μ,σ)), run a:** one type only."
    )
    assert association_reading(table, by_stat, run="b", stat="kl_gauss", matrix="qk") is None


def test_on_the_shipped_runs_replication_is_asked_of_the_second_seed_alone() -> None:
    """Issue 62 on induction-d128 with every shipped run in the table: the reading asks its replicate (named) and
    leaves the other sizes and the plain-text runs out of the verdict. Replication is read from each run's decision
    after Holm's correction (the table's own answer column; on the GPU-built stores sigma of W_QK showed no
    association in either seed and D_KL of W_QK none in seed 1234, Holm p 0.083, while seed 2 was undecided): each
    run's decisions computed here apart from the table (`tests.replication`), the verdict by issue 62's rule, the
    runs that decide it named, whatever the other runs say."""
    from headwatch.analysis.findings.association import store_association
    from headwatch.analysis.findings.replicates import replicates_of
    from tests import replication
    from tests.conftest import SHIPPED_DATA

    stores = {p.name: open_store(p) for p in sorted(SHIPPED_DATA.iterdir()) if (p / "meta.json").is_file()}
    this = stores.pop("induction-d128")
    runs = association_runs("induction-d128", this, cast(dict[str, Store | StoreError], stores))
    assert len(runs) == 7
    replicates = replicates_of(this, dict(runs[1:]))
    assert replicates == ["induction-d128-seed2"]
    table, by_stat = association_table(runs, ["kl_gauss", "std"], matrix="qk", associate=store_association)
    rows = table.set_index(["statistic", "run"])
    answer = rows["answer"]
    pairs = {"kl_gauss": "D_KL(P‖N(μ,σ))", "std": "σ"}
    decided = {run: replication.decisions(SHIPPED_DATA / run) for run in ("induction-d128", "induction-d128-seed2")}
    opening = {"associated": "associated", "not shown": "no association shown;", "undecided": "undecided"}
    for run, decisions in decided.items():
        for stat, label in pairs.items():
            decision = decisions[(stat, "qk")]
            assert decision is not None and answer[(label, run)].startswith(opening[decision]), (run, stat, answer[(label, run)])
        assert rows["Holm over"][(pairs["std"], run)] == f"{len(decisions)} statistics"
    assert rows["recipe"][("σ", "induction-d128-seed2")] == "the same recipe, seed 2"
    assert rows["recipe"][("σ", "induction-d64")].startswith("another recipe (model.d_mlp, model.d_model, model.n_heads")
    ours = (
        "Replication, asked of this run's replicate `induction-d128-seed2` (the same recipe, another seed), read from "
        "each run's decision over heads after Holm's correction."
    )
    why = {"not shown": "no association shown in", "undecided": "undecided in"}
    for stat in pairs:
        pair = (stat, "qk")
        said = association_reading(table, by_stat, run="induction-d128", stat=stat, matrix="qk", replicates=replicates)
        assert said is not None and ours in said
        own, theirs = decided["induction-d128"][pair], decided["induction-d128-seed2"][pair]
        verdict = replication.rule([own, theirs])
        name = replication.page_name(pair)
        assert replication.verdicts(said, {pair: name}) == {pair: verdict}, said
        if verdict in why:  # the runs that decide it, named
            who = (["this run"] if own == verdict else []) + (["`induction-d128-seed2`"] if theirs == verdict else [])
            assert f"{name} ({why[verdict]} {', '.join(who)})." in said, said
        assert "Across the" not in said and "The table's other runs (induction-d256, induction-d512, induction-d64, " in said


def test_a_run_joins_the_joint_map_only_with_what_the_map_needs(store_path, forward_path) -> None:
    store, forward = open_store(store_path), open_store(forward_path)

    def refusal(other, stat: str = "std", matrix: str = "qk", align: str = "fraction"):
        return joint_refusal(store, other, stat=stat, matrix=matrix, align=align)

    assert refusal(forward) is None and refusal(forward, align="tokens") is None
    assert refusal(StoreError("no meta.json")) == "unopened"
    assert refusal(open_store(store_path), stat="entropy") == "no forward lens"
    assert refusal(forward, stat="entropy") is None
    assert refusal(open_store(store_path), stat="llc") == "no statistic"
    assert refusal(forward, matrix="mlp") == "no matrix"


def test_the_joint_maps_csv_names_each_heads_run_type_and_cluster() -> None:
    rows = pd.DataFrame(
        {
            "run_index": [0, 0, 1],
            "layer": [0, 1, 0],
            "head": [1, 0, 0],
            "x": [0.1, 0.2, 0.3],
            "y": [1.0, 2.0, 3.0],
            "neighbors": [[1], [0], [0]],
            "same_steps": True,
        }
    )
    heads = pd.DataFrame({"run": ["a", "a", "b"], "type": ["sink", "none", "induction"], "cluster": [1, 0, 1]})
    csv = joint_csv(rows, heads, ["a", "b"], matrix="qk", stat="std")
    assert "neighbors" not in csv and "same_steps" not in csv
    assert list(csv["run"]) == ["a", "a", "b"] and list(csv["type"]) == ["sink", "none", "induction"]
    assert list(csv["joint_cluster"]) == [1, 0, 1] and set(csv["matrix"]) == {"qk"} and set(csv["statistic"]) == {"std"}
