"""Issue 17 through AppTest: the Heads page, clicks that open a head, exports, references, per-page statistics,
the animation's frame in the URL, head comparison. Every expected value is computed here from the store's tables."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from analysis.store import open_store
from tests.app.conftest import arr, chart, notices, open_page

HEADS = "pages/heads_table.py"
HEAD = "pages/head_explorer.py"
LAYERS = "pages/layer_view.py"
ARCH = "pages/architecture_heatmaps.py"
ANIM = "pages/animated_heatmap.py"
TRAJ = "pages/trajectory_map.py"


def _table(at) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if d.proto.id.endswith("-heads_table"))


def test_heads_table_has_every_head_at_the_chosen_step_sorted_by_rank(app_env):
    store = open_store(app_env)
    steps = store.steps.tolist()
    at = open_page(HEADS, {"stat": "stable_rank", "step": str(steps[5]), "since": str(steps[1])})
    assert not notices(at)
    table = _table(at)
    v = store.array("stable_rank")
    assert len(table) == store.n_layers * store.n_heads
    for row in table.itertuples(index=False):
        assert row.value == pytest.approx(v[5, row.layer, row.head])
        assert row.change == pytest.approx(v[5, row.layer, row.head] - v[1, row.layer, row.head])
    assert table["rank"].tolist() == sorted(table["rank"].tolist())  # sorted by rank: 1 = the largest value
    assert table["value"].iloc[0] == pytest.approx(v[5].max())
    assert (table["value"].diff().dropna() <= 1e-12).all()
    # links open the head with the page's statistic and step
    first = table.iloc[0]
    assert first["open"].startswith(f"head?run={app_env.name}&layer={first['layer']}&head={first['head']}&stat=stable_rank")
    assert f"step={steps[5]}" in first["open"]


def test_heads_table_sorts_filters_and_is_in_the_url(app_env):
    store = open_store(app_env)
    at = open_page(HEADS, {"stat": "std", "sort": "change", "desc": "1", "layers": ["1", "3"]})
    table = _table(at)
    assert set(table["layer"]) == {1, 3} and len(table) == 2 * store.n_heads
    v = store.array("std")
    expected = sorted(((v[-1, l, h] - v[0, l, h]) for l in (1, 3) for h in range(store.n_heads)), reverse=True)
    np.testing.assert_allclose(table["change"].to_numpy(), expected)
    at.selectbox(key="sort").set_value("layer").run()
    assert at.query_params["sort"] == "layer" and at.query_params["desc"] == "1"
    assert _table(at)["layer"].tolist()[0] == 3


def test_heads_table_counts_approaches_like_the_head_explorer(app_env):
    store = open_store(app_env)
    at = open_page(HEADS, {"gap": "10", "layers": ["1"]})
    table = _table(at)
    approaches = at.dataframe[1].value  # the model-wide list, under the heads table
    for head in range(store.n_heads):
        explorer = open_page(HEAD, {"layer": "1", "head": str(head), "gap": "10"})
        verdicts = explorer.dataframe[0].value["verdict"].tolist()
        row = table[table["head"] == head].iloc[0]
        assert row["approaches"] == len(verdicts)
        assert row["crossings"] == verdicts.count("crossing") and row["repulsions"] == verdicts.count("repulsion")
        assert (approaches[(approaches["layer"] == 1) & (approaches["head"] == head)]["verdict"].tolist()) == verdicts
    assert any("Swap score" in c.value for c in at.caption)


def test_heads_table_row_opens_the_head_in_the_head_explorer(app_env):
    store = open_store(app_env)
    steps = store.steps.tolist()
    at = open_page(HEADS, {"stat": "kurtosis", "step": str(steps[4])})
    table = _table(at)
    layer, head = int(table.iloc[2]["layer"]), int(table.iloc[2]["head"])
    at.session_state["heads_table"] = {"selection": {"rows": [2], "columns": [], "cells": []}}
    at.run()  # the selection reruns the page, which switches to the head explorer
    assert not at.exception and at.title[0].value == "Head explorer"
    assert (at.session_state["layer"], at.session_state["head"]) == (layer, head)
    assert at.session_state["stat"] == "kurtosis" and steps[4] in at.session_state["step"]
    assert at.query_params["layer"] == str(layer)
