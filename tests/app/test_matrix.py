"""The matrix choice (URL ``matrix=qk|ov``) and the circuit statistics on every view page, through AppTest."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from headwatch.analysis.store import open_store
from tests.app.conftest import arr, chart, notices, open_page, view_link
from tests.app.test_pages import ANIM, ARCH, HEAD, LAYERS, TRAJ, VIEW_PAGES, data_of


@pytest.mark.parametrize("page", VIEW_PAGES)
def test_matrix_parameter_sets_the_choice_and_stays_in_the_url(app_env, page):
    at = open_page(page, {"matrix": "ov"})
    assert not notices(at)
    assert at.session_state["matrix"] == "ov" and at.query_params["matrix"] == "ov"
    assert at.radio(key="matrix").options == ["W_QK = W_Qᵀ W_K (where a head looks)", "W_OV = W_O,h W_V,h (what a head writes)"]
    assert "matrix=ov" in view_link(at)  # the share link carries it


def test_ov_draws_the_ov_rows(app_env):
    store = open_store(app_env)
    at = open_page(LAYERS, {"matrix": "ov", "layer": "1"})
    assert np.allclose(data_of(at, "layer_lines", 0, "y"), store.array("std", matrix="ov")[:, 1, 0])
    at.radio(key="matrix").set_value("qk").run()
    assert np.allclose(data_of(at, "layer_lines", 0, "y"), store.array("std", matrix="qk")[:, 1, 0])
    assert at.query_params["matrix"] == "qk"
    head = open_page(HEAD, {"matrix": "ov", "layer": "2", "head": "3", "panel": "statistic"})
    focus = chart(head, "head_in_layer")["data"][2]
    assert np.allclose(arr(focus["y"]), store.array("std", matrix="ov")[:, 2, 3])


def test_matrix_carries_over_to_another_page(app_env):
    at = open_page(ARCH, {"matrix": "ov"})
    for page in (ANIM, TRAJ, HEAD, LAYERS):
        at.switch_page(page).run()
        assert at.session_state["matrix"] == "ov", page


@pytest.mark.parametrize("stat", ["sym_frac", "eig_positivity", "rel_change"])
def test_circuit_statistics_are_selectable(app_env, stat):
    store = open_store(app_env)
    at = open_page(ARCH, {"matrix": "ov", "stat": stat})
    assert not notices(at) and not at.exception
    z = data_of(at, "architecture")
    want = store.array(stat, matrix="ov")
    assert np.allclose(np.sort(z[np.isfinite(z)]), np.sort(want[np.isfinite(want)]))


def test_a_qk_only_store_offers_qk_and_says_what_a_rerun_adds(app_env, tmp_path, monkeypatch):
    from benchmarks.synthetic_store import write_synthetic_store

    old = write_synthetic_store(
        tmp_path / "old-run", n_layers=2, n_heads=2, d_head=8, d_model=32, n_checkpoints=6, matrices=("qk",)
    )
    heads = pq.read_table(old / "heads.parquet")  # as schema version 2 wrote it: no circuit columns
    pq.write_table(heads.drop_columns(["sym_frac", "eig_positivity"]), old / "heads.parquet")
    monkeypatch.setenv("HEADWATCH_STORE", str(old))
    at = open_page(LAYERS, {"matrix": "ov"})
    assert at.radio(key="matrix").options == ["W_QK = W_Qᵀ W_K (where a head looks)"]
    assert at.session_state["matrix"] == "qk" and any("matrix=ov" in n for n in notices(at))
    assert any("adds W_OV" in c.value for c in at.caption)
    at.selectbox(key="stat").set_value("sym_frac").run()
    assert any("came with schema version 3" in i.value for i in at.info)
    assert not at.exception
