"""The refined-LLC page and the refined LLC in the other views, through AppTest.

The store is the session's synthetic store copied and given a stand-in ``llc.parquet`` at three of its
checkpoints: the heads of even layers rise over training, those of odd layers fall (two shapes the
clustering must separate), the whole-model row is known. The figures' numbers are checked against
that table, read with pyarrow, not through the page's code.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.app.conftest import arr, chart, open_page, serve_only

PAGE = "pages/refined_llc.py"


def add_stand_in_llc(path: Path) -> Path:
    """Write llc.parquet at the first, middle and last checkpoint and the meta.json ``llc`` record."""
    meta = json.loads((path / "meta.json").read_text())
    steps = sorted(c["step"] for c in meta["checkpoints"] if c.get("duplicate_of") is None)
    chosen = [steps[0], steps[len(steps) // 2], steps[-1]]
    n_layers, n_heads = meta["model"]["n_layers"], meta["model"]["n_heads"]
    rows = []
    for i, step in enumerate(chosen):
        rows.append((step, -1, -1, 40.0 + 5 * i, 0.5, 2.0 - 0.3 * i))
        for layer in range(n_layers):
            for head in range(n_heads):
                trend = i if layer % 2 == 0 else 2 - i  # even layers rise, odd layers fall
                rows.append((step, layer, head, 0.2 + 0.3 * trend + 0.01 * head, 0.05, 2.0 - 0.3 * i))
    cols = list(zip(*rows))
    table = pa.table({"step": pa.array(cols[0], pa.int64()), "layer": pa.array(cols[1], pa.int32()),
                      "head": pa.array(cols[2], pa.int32()), "llc": pa.array(cols[3], pa.float64()),
                      "llc_std": pa.array(cols[4], pa.float64()), "init_loss": pa.array(cols[5], pa.float64()),
                      "params": pa.array([100] * len(rows), pa.int64())})
    pq.write_table(table, path / "llc.parquet")
    meta["llc"] = {"sampler": {"lr": 0.001, "n_beta": 30.0, "localization": 300.0, "chains": 2, "draws": 8,
                               "batch_size": 1, "burnin": 0, "seed": 0, "sequences": 8},
                   "evaluation": {"text": "stand-in", "sequences": 8, "seq_len": 16}, "devinterp": "2.0.1",
                   "steps": chosen, "seconds": {}}
    (path / "meta.json").write_text(json.dumps(meta))
    return path


@pytest.fixture(scope="module")
def llc_store(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llc") / "tiny-run"
    shutil.copytree(store_path, path)
    return add_stand_in_llc(path)


@pytest.fixture()
def llc_env(llc_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return serve_only(llc_store, tmp_path, monkeypatch)


def llc_table(store: Path):
    return pq.read_table(store / "llc.parquet").to_pandas()


def test_the_page_shows_every_head_the_whole_model_and_the_clusters(llc_env: Path) -> None:
    at = open_page(PAGE)
    assert not at.exception and not at.error
    df = llc_table(llc_env)
    heads = df[df["layer"] >= 0]
    n_layers, n_heads = heads["layer"].max() + 1, heads["head"].max() + 1
    curves = chart(at, "llc_heads")["data"]
    assert len(curves) == n_layers * n_heads
    for trace in curves:
        layer, head = int(arr(trace["customdata"])[0][1]), int(arr(trace["customdata"])[0][2])
        own = heads[(heads["layer"] == layer) & (heads["head"] == head)].sort_values("step")
        np.testing.assert_allclose(arr(trace["y"]), own["llc"].to_numpy())
        assert [int(c[0]) for c in arr(trace["customdata"])] == own["step"].tolist()  # only the estimated steps
        assert trace["name"] == f"L{layer}"  # coloured by layer by default
    model = chart(at, "llc_model")["data"]
    whole = df[df["layer"] == -1].sort_values("step")
    np.testing.assert_allclose(arr(model[0]["y"]), whole["llc"].to_numpy())
    np.testing.assert_allclose(arr(model[0]["error_y"]["array"]), whole["llc_std"].to_numpy())
    grid = np.asarray(arr(chart(at, "llc_clusters")["data"][0]["z"])).reshape(n_layers, n_heads)
    # k = 4 on two shapes: whatever the split, no cluster mixes a rising (even) and a falling (odd) layer
    for c in np.unique(grid):
        assert len({layer % 2 for layer in np.where(grid == c)[0]}) == 1


def test_two_clusters_are_the_two_shapes_and_the_view_is_in_the_url(llc_env: Path) -> None:
    at = open_page(PAGE, {"k": "2", "colour": "cluster", "norm": "zscore"})
    assert not at.exception
    assert at.query_params["k"] == "2" and at.query_params["colour"] == "cluster"
    grid = np.asarray(arr(chart(at, "llc_clusters")["data"][0]["z"]))
    n_heads = llc_table(llc_env)["head"].max() + 1
    grid = grid.reshape(-1, n_heads)
    assert np.all(grid[0::2] == 0) and np.all(grid[1::2] == 1)  # cluster 1: layer 0's shape, first seen
    names = {t["name"] for t in chart(at, "llc_heads")["data"]}
    assert names == {"cluster 1", "cluster 2"}
    bad = open_page(PAGE, {"k": "99", "colour": "nope"})
    assert not bad.exception and bad.session_state["k"] == 4 and bad.session_state["colour"] == "layer"


def test_every_chart_has_its_data_as_csv(llc_env: Path) -> None:
    at = open_page(PAGE)
    charts = [c for c in at.get("plotly_chart") if c.proto.id.rsplit("-", 1)[-1].startswith("llc_")]
    buttons = [b for b in at.get("download_button") if "CSV" in b.proto.label]
    assert len(charts) == 3 and len(buttons) >= 3


def test_the_refined_llc_is_offered_by_the_statistic_pickers_and_drawn_as_markers(llc_env: Path) -> None:
    df = llc_table(llc_env)
    at = open_page("pages/layer_view.py", {"stat": "llc", "layer": "1"})
    assert not at.exception and at.session_state["stat"] == "llc"
    first = chart(at, "layer_lines")["data"][0]  # head 0 of layer 1, over every checkpoint
    y = arr(first["y"])
    own = df[(df["layer"] == 1) & (df["head"] == 0)].sort_values("step")["llc"].to_numpy()
    np.testing.assert_allclose(y[np.isfinite(y)], own)
    assert np.isfinite(y).sum() == 3 and first["mode"] == "markers"  # no line through the checkpoints between
    arch = open_page("pages/architecture_heatmaps.py", {"stat": "llc"})
    assert not arch.exception
    head = open_page("pages/head_explorer.py", {"stat": "llc", "layer": "0", "head": "1"})
    assert not head.exception and head.selectbox(key="stat").value == "llc"
    table = open_page("pages/heads_table.py", {"stat": "llc", "step": str(int(df["step"].max()))})
    assert not table.exception and table.session_state["stat"] == "llc"
    traj = open_page("pages/trajectory_map.py")
    assert "refined LLC (SGLD; a subset of checkpoints)" in traj.selectbox(key="stat").options


def test_a_store_without_the_table_says_what_rerun_adds_it(app_env: Path) -> None:
    at = open_page(PAGE)
    assert not at.exception
    assert any("--lenses llc" in i.value for i in at.info)
    assert not at.get("plotly_chart") or all("llc_" not in e.proto.id for e in at.get("plotly_chart"))
    layers = open_page("pages/layer_view.py", {"stat": "llc"})
    assert not layers.exception and layers.selectbox(key="stat").value == "std"
    assert "refined LLC (SGLD; a subset of checkpoints)" not in layers.selectbox(key="stat").options
