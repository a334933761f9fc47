"""Figure builders: valid plotly figures (they are built unvalidated, so checked here), fixed ranges, marks."""

from __future__ import annotations

import json
import shutil
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pytest

from benchmarks.synthetic_store import add_synthetic_forward, add_synthetic_llc
from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.stats.crossings import level_crossings
from headwatch.analysis.stats.density import density_curves, density_extent, density_grid
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.attention import ATTENTION, EVAL_LOSS, LAYER_DIVERGENCE
from headwatch.dashboard.data import fixed_range, step_axis
from headwatch.dashboard.figures import points
from headwatch.dashboard.figures.common import figure, layout, overlay_loss
from headwatch.dashboard.figures.loss import loss_curve
from headwatch.dashboard.labels import STATS
from headwatch.dashboard.style import step_colours
from headwatch.dashboard.views.animation import figures as anim
from headwatch.dashboard.views.architecture import figures as arch
from headwatch.dashboard.views.head.figures import density as density
from headwatch.dashboard.views.head.figures import lines as head
from headwatch.dashboard.views.head.figures import spectrum as spectrum
from headwatch.dashboard.views.layers import figures as layers
from headwatch.dashboard.views.lenses import figures as fwd
from headwatch.dashboard.views.trajectories import figures as trajectory
from tests.app.conftest import arr


@pytest.fixture(scope="module")
def store(store_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("figures") / "tiny-run"
    shutil.copytree(store_path, path)
    return open_store(add_synthetic_llc(add_synthetic_forward(path)))  # with forward-lens and rLLC tables: every statistic draws


def head_figures(store, axis, idx):
    hist = store.array("hist_z")[:, 1, 2].astype(np.float64)
    mu, sigma = store.array("mean")[:, 1, 2], store.array("std")[:, 1, 2]
    lo, hi = density_extent(hist, mu, sigma)
    w = np.linspace(lo, hi, 50)
    wc, pc = density_curves(hist, mu, sigma)
    lam = store.array("sv")[:, 1, 2].astype(np.float64) ** 2
    cols = step_colours(len(idx))
    labels = [f"step {store.steps[i]}" for i in idx]
    xs = [axis.x[i] for i in idx]
    return [
        density.density_map(axis, w, density_grid(hist, mu, sigma, w), chosen_x=xs, colours=cols),
        density.density_slices(
            wc[idx],
            pc[idx],
            labels=labels,
            colours=cols,
            axis=axis,
            chosen_idx=idx,
            sigma=sigma,
            kl=store.array("kl_gauss")[:, 1, 2],
            stats=(STATS["std"], STATS["kl_gauss"]),
            w_range=(lo, hi),
            p_range=density.log_density_range(pc),
        ),
        spectrum.spectrum_map(axis, lam, chosen_x=xs, colours=cols),
        spectrum.spectrum_slices(
            lam[idx],
            labels=labels,
            colours=cols,
            axis=axis,
            chosen_idx=idx,
            stable_rank=store.array("stable_rank")[:, 1, 2],
            entropy=store.array("spectral_entropy")[:, 1, 2],
            stats=(STATS["stable_rank"], STATS["spectral_entropy"]),
            lam_range=fixed_range(lam, log=True),
        ),
        spectrum.leading_lambdas(axis, lam[:, :4], chosen_x=xs, colours=cols, log_y=True),
        spectrum.level_crossings(
            axis, lam, level_crossings(lam, store.overlaps(1, 2), gap_threshold=0.1), chosen_x=xs, colours=cols, log_y=True
        ),
        head.head_in_layer(axis, store.array("std")[:, 1], head=2, stat=STATS["std"], y_range=(0, 1), chosen_x=xs, colours=cols),
    ]


def all_figures(store) -> list[go.Figure]:
    figs = []
    for scale in ("linear", "log", "index"):
        axis = step_axis(store, scale=scale)
        figs += head_figures(store, axis, [0, 3, len(store.steps) - 1])
        v = stat_values(store, "lambda", k=1)
        figs += [
            layers.layer_lines(axis, v[:, 0], layer=0, stat=STATS["lambda"], k=1, y_range=fixed_range(v, log=True), log_y=True),
            layers.layer_grid(axis, v, stat=STATS["lambda"], k=1, y_range=fixed_range(v), highlight=1),
            arch.architecture_heatmap(axis, v, stat=STATS["lambda"], k=1, log_colour=True),
            arch.architecture_heatmap(axis, store.array("skew"), stat=STATS["skew"], signed=True),
            arch.layer_means(axis, v, stat=STATS["lambda"], k=1, y_range=fixed_range(v.mean(2))),
        ]
    steps = [int(s) for s in store.steps]
    figs.append(anim.animation(store.array("std"), steps=steps, start=2, stat=STATS["std"], log_colour=True))
    figs.append(anim.animation(store.array("skew"), steps=steps, start=0, stat=STATS["skew"], signed=True))
    n = store.n_layers * store.n_heads
    rng = np.random.default_rng(0)
    layer = np.repeat(np.arange(store.n_layers), store.n_heads)
    head = np.tile(np.arange(store.n_heads), store.n_layers)
    figs.append(
        trajectory.trajectory_map(
            rng.normal(size=n), rng.normal(size=n), layer, head, rng.integers(0, n, (n, 3)), n_layers=store.n_layers, highlight=5
        )
    )
    figs.append(loss_curve(np.arange(5.0), np.linspace(5, 2, 5), np.array([np.nan, 4, np.nan, 3, np.nan])))
    axis = step_axis(store)  # the forward lens's figures and the loss overlay
    steps = [int(x) for x in store.steps]
    figs += [
        fwd.layer_bands(axis, store.dense(ATTENTION, "entropy"), stat=STATS["entropy"], reference=5.0, reference_label="uniform"),
        fwd.divergence_animation(store.dense(LAYER_DIVERGENCE, "jsd"), steps=steps, start=2),
        overlay_loss(
            fwd.head_type_heatmap(axis, store.dense(ATTENTION, "induction"), stat=STATS["induction"], baseline=0.02),
            axis,
            store.dense(EVAL_LOSS, "loss"),
            "eval loss",
        ),
        overlay_loss(
            layers.layer_lines(axis, store.array("std")[:, 0], layer=0, stat=STATS["std"], y_range=(0.0, 1.0)),
            axis,
            store.dense(EVAL_LOSS, "loss"),
            "eval loss",
        ),
    ]
    return figs


def walk(obj: Any, key: str):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                yield v
            yield from walk(v, key)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from walk(v, key)


def test_every_builder_makes_a_figure_plotly_validates(store):
    for fig in all_figures(store):
        spec = fig.to_dict()
        go.Figure(spec)  # full validation: raises ValueError on any invalid property
        for scale in walk(spec, "colorscale"):
            assert not isinstance(scale, str), f"named colour scale {scale!r} reaches plotly.js unresolved"
        for ax_name, ax in spec["layout"].items():
            if ax_name.startswith(("xaxis", "yaxis")) and "title" in ax and ax["title"].get("text"):
                assert ax.get("range") is not None or ax.get("type") == "category", ax_name


def test_slices_keep_their_axes_whatever_steps_are_chosen(store):
    axis = step_axis(store)
    a = head_figures(store, axis, [0, 1])
    b = head_figures(store, axis, [5, 8, 11])
    for fa, fb in zip(a, b, strict=True):
        la, lb = fa.to_dict()["layout"], fb.to_dict()["layout"]
        for name in la:
            if name.startswith(("xaxis", "yaxis")):
                assert la[name].get("range") == lb[name].get("range"), name
        za, zb = list(walk(fa.to_dict()["data"], "zmin")), list(walk(fb.to_dict()["data"], "zmin"))
        assert za == zb


def test_head_in_layer_mean_is_the_mean_over_heads(store):
    axis = step_axis(store)
    values = store.array("kurtosis")[:, 2]
    fig = head.head_in_layer(axis, values, head=1, stat=STATS["kurtosis"], y_range=(0, 20))
    mean = next(t for t in fig.data if t.name == "layer mean")
    assert np.allclose(mean.y, values.sum(axis=1) / values.shape[1])
    assert mean.line.dash == "dash" and mean.line.color == "#d62728"


@pytest.mark.parametrize("n_layers", [2, 16, 24, 36, 48])
def test_layer_boundaries_drawn_for_any_number_of_layers(store, n_layers):
    n_heads, s = 5, len(store.steps)
    values = np.random.default_rng(n_layers).uniform(1, 2, (s, n_layers, n_heads))
    fig = arch.architecture_heatmap(step_axis(store), values, stat=STATS["std"])
    lines = [sh for sh in fig.layout.shapes if sh.line.color == "white"]
    assert sorted(sh.x0 for sh in lines) == [b * n_heads - 0.5 for b in range(1, n_layers)]
    heat = fig.data[0]
    assert len(heat.x) == n_layers * n_heads and heat.x[n_heads] == "L1 H0"
    assert np.array_equal(np.asarray(heat.z, dtype=np.float32), values.reshape(s, -1).astype(np.float32))  # sent as float32


def test_figures_send_float32_unless_a_shown_value_would_change():
    """What the browser gets (plotly's JSON): a float64 heatmap as float32, its values the float32 of the data, the
    frames' too; a list of floats likewise, written short; whole numbers float32 would round (tokens seen), values
    below float32's range (a Gaussian's far tail, drawn on a log axis) and customdata exactly."""
    rng = np.random.default_rng(0)
    z = rng.uniform(0, 1, (60, 50))
    tokens = np.arange(1, 301, dtype=np.float64) * 2_049_003.0 * 1000  # above 2^24: float32 would round them
    steps = np.arange(300, dtype=np.float64) * 1000
    small = [0.1 * i for i in range(20)]
    tail = np.exp(-0.5 * np.linspace(0, 15, 300) ** 2)  # down to 1e-49: 0 in float32, so not drawn on a log axis
    fig = figure(
        [
            dict(type="heatmap", z=z, customdata=z),
            dict(type="scatter", x=tokens, y=small),
            dict(type="scatter", x=steps, y=rng.uniform(0, 1, 300)),
            dict(type="scatter", x=steps, y=tail),
        ],
        layout(),
        frames=[dict(name="0", data=[dict(type="heatmap", z=z)])],
    )
    sent = fig.to_json()  # as st.plotly_chart serialises it (plotly's base64 arrays)
    heat, tok, step, gauss = fig.data
    assert heat.z.dtype == np.float32 and np.array_equal(heat.z, z.astype(np.float32))
    assert json.loads(sent)["frames"][0]["data"][0]["z"]["dtype"] == "f4"
    assert heat.customdata.dtype == np.float64 and np.array_equal(heat.customdata, z)  # hover-only: every digit
    assert tok.x.dtype == np.float64 and np.array_equal(tok.x, tokens)
    assert np.array_equal(np.asarray(tok.y, dtype=np.float32), np.asarray(small, dtype=np.float32))
    assert '"y":[0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0,1.1,1.2,1.3,1.4,1.5,1.6,1.7,1.8,1.9]' in sent.replace(" ", "")
    assert step.x.dtype == np.float32 and np.array_equal(step.x, steps)  # whole numbers float32 holds exactly
    assert gauss.y.dtype == np.float64 and np.array_equal(gauss.y, tail)


def test_animation_has_a_frame_per_checkpoint_and_a_fixed_colour_scale(store):
    values = store.array("std")
    steps = [int(s) for s in store.steps]
    fig = anim.animation(values, steps=steps, start=4, stat=STATS["std"])
    spec = go.Figure(fig.to_dict()).to_dict()  # through validation, as the browser would get it
    frames = spec["frames"]
    assert [f["name"] for f in frames] == [str(s) for s in steps]
    assert "sliders" not in spec["layout"]  # one step control: the page's, in the URL
    assert spec["layout"]["title"]["text"] == f"step {steps[4]:,}"
    heat = spec["data"][0]
    assert np.allclose(arr(heat["z"]).reshape(values[4].shape), values[4], rtol=1e-6)
    assert heat["zmin"] == pytest.approx(values.min()) and heat["zmax"] == pytest.approx(values.max())
    assert all("zmin" not in f["data"][0] for f in frames)  # frames change data, never the colour scale
    assert np.allclose(arr(frames[7]["data"][1]["x"]), values[7].mean(axis=1))  # right: mean over the heads of each layer
    assert np.allclose(arr(frames[7]["data"][2]["y"]), values[7].mean(axis=0))  # bottom: mean over layers per head
    cells = arr(frames[7]["data"][3]["customdata"]).reshape(-1, 4)  # the click targets: [layer, head, step, value]
    n_layers, n_heads = values.shape[1:]
    assert np.array_equal(cells[:, 0], np.repeat(np.arange(n_layers), n_heads))
    assert np.array_equal(cells[:, 1], np.tile(np.arange(n_heads), n_layers))
    assert (cells[:, 2] == steps[7]).all() and np.allclose(cells[:, 3], values[7].ravel(), rtol=1e-6)
    play, pause = spec["layout"]["updatemenus"][0]["buttons"]
    assert (play["label"], pause["label"]) == ("▶ Play", "❚❚ Pause")
    assert play["args"][0] == [str(s) for s in steps[4:]]  # plays on from the opening step
    assert play["args"][1]["fromcurrent"] is True


def test_layer_grid_shares_axes_and_draws_every_layer(store):
    v = store.array("std")
    fig = layers.layer_grid(step_axis(store), v, stat=STATS["std"], y_range=(0.0, 1.0), highlight=2)
    assert len(fig.data) == 2 * store.n_layers
    spec = fig.to_dict()["layout"]
    ranges = {tuple(ax["range"]) for name, ax in spec.items() if name.startswith("yaxis")}
    assert ranges == {(0.0, 1.0)}
    heads = fig.data[2]  # layer 1's heads, joined with gaps
    assert np.count_nonzero(np.isnan(np.asarray(heads.y, dtype=float))) == store.n_heads


def test_trajectory_map_draws_each_knn_edge_once(store):
    x = np.array([0.0, 1.0, 2.0, 3.0])
    nb = np.array([[1], [0], [3], [2]])  # two mutual pairs -> two edges
    fig = trajectory.trajectory_map(x, x, np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]), nb, n_layers=2)
    edges = np.asarray(fig.data[0].x, dtype=float)
    assert np.count_nonzero(np.isnan(edges)) == 2
    assert list(fig.data[1].customdata[3])[:2] == [1, 1]  # [layer, head, step (none: a trajectory)]


def test_picked_head_reads_a_click_on_the_map():
    def event(*custom):
        return {"selection": {"points": [{"customdata": c} for c in custom]}}

    assert points.picked_head(event([2, 3]), n_layers=4, n_heads=4) == (2, 3)
    assert points.picked_head(event({"0": 1, "1": 0}), n_layers=4, n_heads=4) == (1, 0)
    assert points.picked_head(event(None, [9, 9], [0, 2]), n_layers=4, n_heads=4) == (0, 2)
    assert points.picked_head({"selection": {"points": []}}, n_layers=4, n_heads=4) is None
    assert points.picked_head(None, n_layers=4, n_heads=4) is None


def test_every_click_target_writes_layer_head_step_in_that_order(store):
    """The one point format (`dashboard.figures.points`): the refined LLC's curves, the heatmap cells and the
    animation's cells all put layer, head and step first, and the readers take them back."""
    from headwatch.dashboard.views.llc import figures as llc

    axis = step_axis(store)
    e, n_layers, n_heads = 3, store.n_layers, store.n_heads
    idx = np.array([0, 2, 4])
    fig = llc.head_curves(
        axis,
        idx,
        np.ones((e, n_layers, n_heads)),
        stat=STATS["llc"],
        groups=np.zeros(n_layers * n_heads, dtype=int),
        group_names=["all"],
        colours=["#000"],
    )
    trace = fig.data[n_heads * 1 + 2]  # layer 1, head 2
    custom = np.asarray(trace.customdata)
    assert custom[:, 0].tolist() == [1] * e and custom[:, 1].tolist() == [2] * e
    assert custom[:, 2].tolist() == [int(axis.steps[i]) for i in idx]
    event = {"selection": {"points": [{"customdata": custom[1].tolist()}]}}
    assert points.picked_head(event, n_layers=n_layers, n_heads=n_heads) == (1, 2)
    assert points.picked_step(event, [int(s) for s in store.steps]) == int(axis.steps[idx[1]])
    values = np.arange(len(store.steps) * n_layers * n_heads, dtype=float).reshape(len(store.steps), n_layers, n_heads)
    forward = fwd.head_type_heatmap(axis, values / values.max(), stat=STATS["prev_token"])
    cells = next(t for t in forward.data if t.name == "cells")
    c = np.asarray(cells.customdata)
    row = int(np.flatnonzero((c[:, 0] == 1) & (c[:, 1] == 2) & (c[:, 2] == store.steps[3]))[0])
    assert c[row, 3] == pytest.approx(values[3, 1, 2] / values.max(), rel=1e-6)


@pytest.mark.parametrize("stat", list(STATS))
def test_every_statistic_draws_with_a_unit_and_finite_fixed_ranges(store, stat):
    values = stat_values(store, stat, k=2)
    assert values.shape == (len(store.steps), store.n_layers, store.n_heads)
    axis = step_axis(store)
    log = STATS[stat].positive
    fig = arch.architecture_heatmap(axis, values, stat=STATS[stat], k=2, log_colour=log)
    heat = fig.to_dict()["data"][0]
    assert np.isfinite([heat["zmin"], heat["zmax"]]).all() and heat["zmin"] < heat["zmax"]
    assert "(" in STATS[stat].title(2) and STATS[stat].unit  # every axis names its unit
    go.Figure(fig.to_dict())
