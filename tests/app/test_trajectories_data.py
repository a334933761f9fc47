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
from headwatch.analysis.significance import DECISION_WORDS
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.store.format import LLC
from headwatch.analysis.type_association import ASSOCIATION_STATS, Association
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
    assert set(table["heads per type"]) == {"induction 1, none 2, sink 1"}
    undecided = DECISION_WORDS["undecided"]  # p = 0.01 from 100 shuffles: its 99% interval reaches 0.052
    assert list(table["answer"]) == [
        f"{undecided}; within layers: {undecided}",
        "no association shown; within layers: no association shown",
        "one type only",
    ]
    assert by_stat == {"std": [found[(id(a), "std")], found[(id(b), "std")]], "kl_gauss": [found[(id(a), "kl_gauss")]]}

    said = association_reading(table, by_stat, run="a", stat="std", matrix="ov")
    assert said is not None and said.startswith("**σ of W_OV, run a:** the 3 trajectory clusters and the head types")
    assert "AMI = 0.500, permutation p = 0.01 " in said and said.endswith("Across the 2 runs below: not associated in every run.")
    assert association_reading(table, by_stat, run="a", stat="kl_gauss", matrix="qk") == (
        "**D_KL(P‖N(μ,σ)), run a:** one type only."
    )
    assert association_reading(table, by_stat, run="b", stat="kl_gauss", matrix="qk") is None


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
