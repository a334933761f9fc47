"""What the Heads view computes before it draws (`views.heads.data`), against values worked out by hand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.findings.held_types import HeadTypes
from headwatch.analysis.store import ForwardInfo
from headwatch.dashboard.views.heads import data as heads

STEPS = np.array([0, 10, 20])


def _kinds() -> HeadTypes:
    """Four heads (2 layers x 2 heads) at three steps: L0 H0 previous-token from step 10 on, L0 H1 induction from step
    20 and sink from step 10, L1 H0 induction at step 10 only (none at the end), L1 H1 nothing."""
    held = {name: np.zeros((3, 2, 2), dtype=bool) for name in ("previous_token", "induction", "sink")}
    held["previous_token"][1:, 0, 0] = True
    held["induction"][2, 0, 1] = True
    held["sink"][1:, 0, 1] = True
    held["induction"][1, 1, 0] = True
    emergence = {name: np.full((2, 2), -1, dtype=np.int64) for name in held}
    emergence["previous_token"][0, 0] = 10
    emergence["induction"][0, 1] = 20
    emergence["sink"][0, 1] = 10
    return HeadTypes(steps=STEPS, held=held, emergence=emergence, rules={})


def _table() -> pd.DataFrame:
    return pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "value": [0.5, np.nan, -0.2, 1.0]})


def _options(**changes: Any) -> heads.Options:
    """Every head of every layer at step 20, by layer, with ``changes``."""
    base = heads.Options(
        stat="induction",
        k=None,
        step=20,
        since=0,
        matrix=None,
        layers=[],
        picked_types=[],
        sort="layer",
        desc=False,
        gap_pct=None,
        kinds=_kinds(),
    )
    return replace(base, **changes)


def test_a_link_names_the_head_its_statistic_and_steps_and_opens_the_statistics_tab() -> None:
    link = heads.head_link("run-a", 1, 3, "lambda", 2, [0, 50], "ov")
    assert link == "head?run=run-a&layer=1&head=3&stat=lambda&k=2&matrix=ov&step=0&step=50&panel=statistic"
    assert heads.head_link(None, 0, 0, "llc", None, [7]) == "head?run=&layer=0&head=0&stat=llc&step=7&panel=statistic"


def test_the_emerged_column_is_the_earliest_emergence_among_the_picked_types() -> None:
    kinds = _kinds()
    every = heads.emerged_steps(kinds, [])
    assert every.dtype == "Int64"
    assert every.tolist() == [10, 10, pd.NA, pd.NA]  # L0 H1: sink at 10 before induction at 20
    assert heads.emerged_steps(kinds, ["induction"]).tolist() == [pd.NA, 20, pd.NA, pd.NA]
    typed = heads.with_types(_table(), kinds, at=1, picked=[])
    assert typed["type"].tolist() == ["previous_token", "sink", "induction", ""]
    assert list(typed.columns) == ["layer", "head", "value", "type", "emerged"]


def test_the_rows_keep_the_picked_types_and_layers_in_the_chosen_order() -> None:
    table = _table()
    # at step 20 L0 H0 holds previous-token, L0 H1 induction and sink
    picked = heads.shown_rows(table, _options(picked_types=["induction"]), at=2)
    assert picked[["layer", "head"]].values.tolist() == [[0, 1]]
    assert picked.index.tolist() == [0]
    by_value = heads.shown_rows(table, _options(sort="value", desc=True), at=2)
    assert by_value["value"].tolist()[:3] == [1.0, 0.5, -0.2] and np.isnan(by_value["value"].iloc[3])  # NaN last
    layer_one = heads.shown_rows(table, _options(layers=[1], kinds=None, sort="emerged"), at=2)
    assert layer_one[["layer", "head"]].values.tolist() == [[1, 0], [1, 1]] and "type" not in layer_one.columns


def test_the_rllc_flags_say_where_there_is_no_estimate_and_where_it_is_negative() -> None:
    spread = np.arange(12, dtype=np.float64).reshape(3, 2, 2)
    flags = np.full((3, 2, 2), "ok", dtype=object)
    flags[1, 1, 1] = "diverged"
    got = heads.with_llc_columns(_table(), spread, flags, at=1)
    assert got["± chains"].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert got["flag"].tolist() == ["ok", "no estimate", "negative", "diverged"]  # negative whatever the chains say
    bare = heads.with_llc_columns(_table(), spread, None, at=0)
    assert bare["flag"].tolist() == ["no diagnostics", "no estimate", "negative", "no diagnostics"]
    assert "flag" not in _table().columns  # the caller's table is left as it was


def test_a_row_opens_at_most_eight_steps_among_them_the_one_shown() -> None:
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000])
    opened = heads.open_steps(steps, 3)
    assert opened == sorted(opened) and len(opened) <= 8 and 3 in opened and opened[-1] == 1000
    assert heads.open_steps(np.array([0, 5]), 5) == [0, 5]
    rows = heads.with_links(_table().iloc[:2], _options(), run="r", steps=[0, 20])
    assert rows["open"].tolist() == [
        "head?run=r&layer=0&head=0&stat=induction&step=0&step=20&panel=statistic",
        "head?run=r&layer=0&head=1&stat=induction&step=0&step=20&panel=statistic",
    ]


def test_the_approaches_are_counted_by_verdict_and_link_to_their_closest_step() -> None:
    approaches = pd.DataFrame(
        {"layer": [0, 0, 1], "head": [1, 1, 0], "step": [10, 20, 10], "verdict": ["crossing", "repulsion", "crossing"]}
    )
    sentence = heads.approaches_sentence(approaches, n_heads=4, gap_pct=5)
    assert sentence == "**3 approaches in 2 of 4 heads** at 5%: 2 crossings, 1 repulsions, 0 unresolved."
    linked = heads.with_approach_links(
        approaches, _options(stat="lambda", k=1, matrix="qk"), run="r", steps=[0, 10, 30], gap_pct=5
    )
    assert (
        linked["open"].iloc[1]
        == "head?run=r&layer=0&head=1&stat=lambda&k=1&matrix=qk&step=0&step=20&step=30&panel=statistic&gap=5"
    )
    assert "open" not in approaches.columns


def test_a_forward_statistic_is_divided_by_uniform_attentions_score() -> None:
    info = ForwardInfo(
        lenses=("attention",),
        n_sequences=2,
        seq_len=4,
        seed=0,
        text="t",
        text_sha256="",
        tokens_sha256="",
        tokenizer="bytes",
        induction_repeat=3,
        induction_sequences=1,
        induction_seed=0,
    )
    # query i of 4 spreads 1/i over i keys: entropy log2 i; the induction score is the mean of 1/(R + k), k = 1..R-1
    assert heads.uniform_baseline(info, "entropy") == pytest.approx(np.mean(np.log2([1, 2, 3, 4])))
    assert heads.uniform_baseline(info, "induction") == pytest.approx((1 / 4 + 1 / 5) / 2)
    assert heads.uniform_baseline(info, "stable_rank") is None
    assert heads.uniform_baseline(None, "entropy") is None
