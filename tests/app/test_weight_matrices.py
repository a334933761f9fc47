"""The Weight matrices page through AppTest: its three views, URL parameters (good and bad), and a store
without the layer table."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.synthetic_store import add_synthetic_layer_matrices
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.layers import LAYERS
from tests.app.conftest import arr, chart, notices, open_page, serve_only, view_link

PAGE = "pages/weight_matrices.py"


@pytest.fixture(scope="module")
def layered_store(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layered") / "tiny-run"
    shutil.copytree(store_path, path)
    return add_synthetic_layer_matrices(path)


@pytest.fixture()
def layered_env(layered_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return serve_only(layered_store, tmp_path, monkeypatch)


def test_three_views_with_fixed_axes_and_units(layered_env):
    at = open_page(PAGE)
    assert not notices(at) and not at.error
    store = open_store(layered_env)
    table = store.frame(LAYERS)
    steps = sorted(table["step"].unique().tolist())
    anim = chart(at, "sv_animation")
    assert [f["name"] for f in anim["frames"]] == [str(s) for s in steps]
    assert "layout" not in anim["frames"][0] or "xaxis" not in anim["frames"][0]["layout"]  # axes fixed over the run
    x_range = anim["layout"]["xaxis"]["range"]
    y_range = anim["layout"]["yaxis"]["range"]
    sv_all = np.concatenate(table[(table.role == "attn_qkv") & (table.layer == 0)]["sv"].to_list())
    assert x_range[0] == 0 and x_range[1] >= sv_all.max()
    for f in anim["frames"]:  # every frame's histogram and law fit the fixed y range
        assert arr(f["data"][0]["y"]).max() <= y_range[1] and arr(f["data"][1]["y"]).max() <= y_range[1]
    # the opening frame (the last step by default) is that step's histogram, a density over the fixed bins
    last = table[(table.role == "attn_qkv") & (table.layer == 0) & (table.step == steps[-1])].iloc[0]
    bars = chart(at, "sv_animation")["data"][0]
    width = arr(bars["x"])[1] - arr(bars["x"])[0]
    assert np.sum(arr(bars["y"])) * width == pytest.approx(1.0, rel=1e-6)
    assert len(last["sv"]) == min(last["rows"], last["cols"])
    depth = chart(at, "sv_depth")
    assert [t["name"] for t in depth["data"]] == [f"layer {i}" for i in range(store.n_layers)] + ["Marchenko-Pastur"]
    frob = chart(at, "frob_lines")
    got = arr(frob["data"][1]["y"])
    want = table[(table.role == "attn_qkv") & (table.layer == 1)].sort_values("step")["frob_norm"].to_numpy()
    np.testing.assert_allclose(got, want)
    for fig in (anim, depth, frob):  # every axis titled, with its unit
        for ax in ("xaxis", "yaxis"):
            title = fig["layout"][ax]["title"]["text"]
            assert title and ("(" in title or title.startswith("training step")), (ax, title)  # steps are the unit
    assert len(at.caption) >= 3


def test_url_parameters_choose_role_layer_and_opening_step(layered_env):
    steps = sorted(open_store(layered_env).frame(LAYERS)["step"].unique().tolist())
    at = open_page(PAGE, {"role": "mlp_out", "layer": "2", "step": str(steps[3])})
    assert not notices(at)
    assert (at.session_state["role"], at.session_state["layer"], at.session_state["step"]) == ("mlp_out", 2, steps[3])
    anim = chart(at, "sv_animation")
    assert anim["layout"]["title"]["text"].endswith(f"step {steps[3]:,}")  # the frame shown (no Plotly slider)
    assert "layer 2 mlp_out" in anim["layout"]["title"]["text"]
    assert "mlp_out" in chart(at, "frob_lines")["layout"]["yaxis"]["title"]["text"]
    link = view_link(at)
    assert "role=mlp_out" in link and "layer=2" in link and f"step={steps[3]}" in link


def test_bad_parameters_fall_back_with_a_notice(layered_env):
    at = open_page(PAGE, {"role": "mlp_gate", "layer": "99", "step": "7"})
    text = " ".join(notices(at))
    assert "role=mlp_gate" in text and "layer=99" in text and "step=7" in text
    assert at.session_state["role"] == "attn_qkv" and at.session_state["layer"] == 0
    assert at.query_params["role"] == "attn_qkv"  # the URL is repaired


def test_store_without_layer_table_says_how_to_add_it(app_env):
    at = open_page(PAGE)
    assert not at.error
    text = " ".join(i.value for i in at.info)
    assert "--matrices layers" in text
    assert not at.get("plotly_chart") or all("sv_animation" not in c.proto.id for c in at.get("plotly_chart"))


def test_builders_make_figures_plotly_validates():
    import plotly.graph_objects as go
    import scipy.integrate

    from headwatch.dashboard.views.weights import figures as figs

    rng = np.random.default_rng(0)
    sv = [np.linalg.svd(rng.standard_normal((40, 120)) * s, compute_uv=False) for s in (0.02, 0.03, 0.05)]
    std = [0.02, 0.03, 0.05]
    anim = figs.sv_animation(sv, std, steps=[0, 10, 100], start=1, rows=40, cols=120, title="layer 0 mlp_in")
    depth = figs.sv_depth(sv, std, layers=[0, 1, 2], rows=40, cols=120, x_max=2.0, title="mlp_in")
    for fig in (anim, depth):
        go.Figure(fig.to_dict())  # full validation
    # the law drawn in s is a density: it integrates to 1 (scipy), with its edge at sqrt(n) std (1 + sqrt(m/n))
    total, _ = scipy.integrate.quad(
        lambda s: figs.mp_sv_density(np.array([s]), rows=40, cols=120, std=0.03)[0],
        0,
        1,
        limit=200,
        points=[0.03 * np.sqrt(120) * (1 - np.sqrt(1 / 3)), 0.03 * np.sqrt(120) * (1 + np.sqrt(1 / 3))],
    )
    assert total == pytest.approx(1.0, abs=1e-6)
    edge = 0.03 * np.sqrt(120) * (1 + np.sqrt(1 / 3))
    assert figs.mp_sv_density(np.array([edge * 1.001]), rows=40, cols=120, std=0.03)[0] == 0


def test_frobenius_builder_validates(layered_store):
    import plotly.graph_objects as go

    from headwatch.dashboard.data import step_axis
    from headwatch.dashboard.views.weights import figures as figs

    store = open_store(layered_store)
    axis = step_axis(store)
    frob = np.abs(np.random.default_rng(1).normal(size=(len(store.steps), 4))) + 1
    for log_y in (False, True):
        go.Figure(figs.frob_lines(axis, axis.steps, frob, layers=[0, 1, 2, 3], role="mlp_in", log_y=log_y).to_dict())


def test_every_chart_has_its_data_as_csv_and_the_norms_take_the_loss(layered_env):
    at = open_page("pages/weight_matrices.py", {"loss": "1"})
    charts = at.get("plotly_chart")
    buttons = [b for b in at.get("download_button") if "CSV" in b.proto.label]
    assert len(charts) == 5 and len(buttons) == len(charts)  # four panels and the sidebar loss curve
    frob = chart(at, "frob_lines")
    assert frob["layout"]["title"]["text"]  # titled for export: run, role
    store = open_store(layered_env)
    if store.meta.training and store.meta.training.get("losses"):  # a loss curve to overlay
        assert [t for t in frob["data"] if t.get("yaxis") == "y99"]
