"""Issue 17 through AppTest: the Heads page, clicks that open a head, exports, references, per-page statistics,
the animation's frame in the URL, head comparison. Every expected value is computed here from the store's tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.store import open_store
from tests.app.conftest import arr, chart, notices, open_page, view_link

HEADS = "pages/heads_table.py"
HEAD = "pages/head_explorer.py"
LAYERS = "pages/layer_view.py"
ARCH = "pages/architecture_heatmaps.py"
ANIM = "pages/animated_heatmap.py"
TRAJ = "pages/trajectory_map.py"


def _table(at, matrix: str | None = "qk") -> pd.DataFrame:
    """The Heads table (its rows of ``matrix``; None: every row)."""
    table = next(d.value for d in at.dataframe if d.proto.id.endswith("-heads_table"))
    return table if matrix is None else table[table["matrix"] == matrix].reset_index(drop=True)


def test_heads_table_has_every_head_at_the_chosen_step_sorted_by_rank(app_env):
    store = open_store(app_env)
    steps = store.steps.tolist()
    at = open_page(HEADS, {"stat": "stable_rank", "step": str(steps[5]), "since": str(steps[1])})
    assert not notices(at)
    table = _table(at)
    v = store.array("stable_rank")
    assert len(table) == store.n_layers * store.n_heads
    assert len(_table(at, None)) == store.n_layers * store.n_heads  # one kind of matrix at a time (matrix=...)
    for row in table.itertuples(index=False):
        assert row.value == pytest.approx(v[5, row.layer, row.head])
        assert row.change == pytest.approx(v[5, row.layer, row.head] - v[1, row.layer, row.head])
    assert table["rank"].tolist() == sorted(table["rank"].tolist())  # sorted by rank: 1 = the largest value
    assert table["value"].iloc[0] == pytest.approx(v[5].max())
    assert (table["value"].diff().dropna() <= 1e-12).all()
    # the random-head reference, computed here from analysis.rmt.references for the run's shape and init scale
    from headwatch.analysis.rmt.references import gaussian_references, init_sigma

    ref = gaussian_references(store.d_model, store.d_head, init_sigma(store.array("std")[0].ravel(), store.d_head))[0]
    ref = ref["stable_rank"]
    np.testing.assert_allclose(table["over reference"], table["value"] / ref.mean)
    assert (table["in 5-95% band"] == ((table["value"] >= ref.lo) & (table["value"] <= ref.hi))).all()
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
    expected = sorted(((v[-1, layer, h] - v[0, layer, h]) for layer in (1, 3) for h in range(store.n_heads)), reverse=True)
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
        explorer = open_page(HEAD, {"layer": "1", "head": str(head), "gap": "10", "panel": "leading"})
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
    table = _table(at, None)  # the rows as shown (every matrix kind): the selection indexes them
    layer, head = int(table.iloc[2]["layer"]), int(table.iloc[2]["head"])
    at.session_state["heads_table"] = {"selection": {"rows": [2], "columns": [], "cells": []}}
    at.run()  # the selection reruns the page, which switches to the head explorer
    assert not at.exception and at.title[0].value == "Head explorer"
    assert (at.session_state["layer"], at.session_state["head"]) == (layer, head)
    assert at.session_state["stat"] == "kurtosis" and steps[4] in at.session_state["step"]
    assert at.query_params["layer"] == str(layer)
    assert at.query_params["matrix"] == table.iloc[2]["matrix"]  # the row's kind of matrix goes with it


# --- a click on a heatmap cell or a head's line opens that head ------------------------------------------------


def _click(at, key: str, custom: list) -> None:
    """What Streamlit's Plotly component sends when the user clicks a point carrying ``custom``."""
    at.session_state[key] = {"selection": {"points": [{"customdata": custom}], "point_indices": [0], "box": [], "lasso": []}}
    at.run()


def test_a_heatmap_cell_click_opens_that_head_at_that_step(app_env):
    store = open_store(app_env)
    steps = store.steps.tolist()
    at = open_page(ARCH, {"stat": "kurtosis"})
    cells = chart(at, "architecture")["data"][1]  # the invisible cell markers carry [layer, head, step, value]
    custom = arr(cells["customdata"]).reshape(-1, 4)
    i = 5 * store.n_layers * store.n_heads + 2 * store.n_heads + 3  # row of step index 5, column L2 H3
    assert tuple(custom[i, :3]) == (2, 3, steps[5])
    assert custom[i, 3] == pytest.approx(store.array("kurtosis")[5, 2, 3])
    _click(at, "architecture", custom[i].tolist())
    assert not at.exception and at.title[0].value == "Head explorer"
    assert (at.session_state["layer"], at.session_state["head"]) == (2, 3)
    assert at.session_state["stat"] == "kurtosis" and steps[5] in at.session_state["step"]
    assert at.query_params["layer"] == "2" and at.query_params["stat"] == "kurtosis"
    assert at.query_params["panel"] == "statistic"  # on the tab of the statistic the click was on, drawn alone
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in at.get("plotly_chart")]
    assert "head_in_layer" in keys and "density_map" not in keys, keys


@pytest.mark.parametrize(
    "page, key, custom, expected",
    [
        (LAYERS, "layer_lines", [1, 2, 0], (1, 2)),  # a head's line in the layer panel: [layer, head, step]
        (LAYERS, "layer_grid", [3, 1], (3, 1)),  # a line of the all-layers grid: [layer, head]
        (ANIM, "animation", [2, 0, 0, 0.5], (2, 0)),  # a cell of the animation: [layer, head, step, value]
        (HEAD, "head_in_layer", [0, 3], (0, 3)),  # another head of the layer, grey behind the chosen one
    ],
)
def test_a_click_on_a_head_opens_it_from_every_page(app_env, page, key, custom, expected):
    at = open_page(page, {"stat": "std", **({"panel": "statistic"} if page == HEAD else {})})  # the chart's tab
    _click(at, key, custom)
    assert not at.exception and at.title[0].value == "Head explorer"
    assert (at.session_state["layer"], at.session_state["head"]) == expected
    assert at.session_state["stat"] == "std"


def test_layer_view_lines_carry_their_head(app_env):
    at = open_page(LAYERS, {"layer": "2"})
    traces = chart(at, "layer_lines")["data"]
    for h in range(4):
        custom = np.asarray(traces[h]["customdata"])
        assert (custom[:, 0] == 2).all() and (custom[:, 1] == h).all()
    grid = chart(at, "layer_grid")["data"]
    lay3 = np.asarray(arr(grid[6]["customdata"])).reshape(-1, 2)  # layer 3's heads (two traces per panel)
    assert set(lay3[:, 0]) == {3} and set(lay3[:, 1]) == {0, 1, 2, 3}


# --- per-page statistics, the animation's frame, compared heads: links capture the view ---------------------


def test_a_statistic_chosen_on_one_page_never_switches_another_pages(app_env):
    at = open_page(HEAD, {"stat": "kurtosis", "panel": "statistic"})
    at.switch_page(TRAJ).run()
    assert at.session_state["stat"] == "kl_gauss"  # the trajectory map's own default, not the head explorer's
    at.selectbox(key="stat").set_value("std").run()
    at.switch_page(LAYERS).run()
    assert at.session_state["stat"] == "std"  # the layer view's default; nothing carried
    at.selectbox(key="stat").set_value("skew").run()
    at.switch_page(HEAD).run()
    assert at.session_state["stat"] == "kurtosis"  # each page remembers its own
    at.switch_page(TRAJ).run()
    assert at.session_state["stat"] == "std"
    assert at.query_params["stat"] == "std"


def test_the_animation_frame_round_trips_through_a_link(app_env):
    store = open_store(app_env)
    steps = store.steps.tolist()
    at = open_page(ANIM, {"stat": "kl_gauss", "step": str(steps[7])})
    spec = chart(at, "animation")
    assert spec["layout"]["title"]["text"].endswith(f"step {steps[7]:,}")
    np.testing.assert_allclose(arr(spec["data"][0]["z"]).reshape(4, 4), store.array("kl_gauss")[7], rtol=1e-6)
    assert "sliders" not in spec["layout"]  # the page's step control is the only one
    at.select_slider(key="step").set_value(steps[9]).run()
    link = view_link(at)
    assert f"step={steps[9]}" in link and at.query_params["step"] == str(steps[9])
    again = open_page(ANIM, {k: v for k, v in (p.split("=") for p in link.split("?")[1].split("&"))})
    assert again.session_state["step"] == steps[9] and again.session_state["stat"] == "kl_gauss"
    np.testing.assert_allclose(
        arr(chart(again, "animation")["data"][0]["z"]).reshape(4, 4), store.array("kl_gauss")[9], rtol=1e-6
    )


def test_head_explorer_overlays_heads_of_any_layer_from_the_url(app_env):
    store = open_store(app_env)
    query = {"layer": "0", "head": "1", "stat": "std", "cmp": ["L2H3", "L3H0"]}
    at = open_page(HEAD, dict(query, panel="statistic"))
    assert not notices(at)
    traces = {t["name"]: t for t in chart(at, "head_in_layer")["data"]}
    np.testing.assert_allclose(arr(traces["L2 H3"]["y"]), store.array("std")[:, 2, 3])
    np.testing.assert_allclose(arr(traces["L3 H0"]["y"]), store.array("std")[:, 3, 0])
    link = view_link(at)
    assert "cmp=L2H3&cmp=L3H0" in link  # the overlay is part of the link
    # and on the other panels over training (each in its tab): sigma and D_KL, stable rank and spectral entropy
    for panel, key, (top, bottom) in (
        ("weights", "density_slices", ("std", "kl_gauss")),
        ("spectrum", "spectrum_slices", ("stable_rank", "spectral_entropy")),
    ):
        at = open_page(HEAD, dict(query, panel=panel))
        assert not notices(at) and "cmp=L2H3&cmp=L3H0" in view_link(at)
        lines = [t for t in chart(at, key)["data"] if t.get("name") == "L2 H3"]
        assert [t["yaxis"] for t in lines] == ["y2", "y3"]
        np.testing.assert_allclose(arr(lines[0]["y"]), store.array(top)[:, 2, 3])
        np.testing.assert_allclose(arr(lines[1]["y"]), store.array(bottom)[:, 2, 3])
    bad = open_page(HEAD, {"cmp": "L9H9"})
    assert any("cmp" in n for n in notices(bad))


# --- references ------------------------------------------------------------------------------------------------


def test_head_explorer_draws_the_gaussian_and_the_random_head_bands(app_env):
    from headwatch.analysis.rmt.references import gaussian_references, init_sigma

    store = open_store(app_env)
    query = {"layer": "1", "head": "2", "step": ["0", "1000"], "stat": "kurtosis"}
    at = open_page(HEAD, query)  # the weights' tab, the default
    fig = chart(at, "density_slices")
    gauss = [t for t in fig["data"] if t.get("legendgroup") == "gauss"]
    assert len(gauss) == 2
    i = store.steps.tolist().index(1000)
    mu, sd = store.array("mean")[i, 1, 2], store.array("std")[i, 1, 2]
    x, y = arr(gauss[1]["x"]), arr(gauss[1]["y"])
    # x is sent as float32 (dashboard.figures.common), y as computed: 15 sd out, x's rounding moves the exact
    # density by |x - mu| |x| / sd^2 x 2^-24, about 1e-5 of itself
    np.testing.assert_allclose(y, np.exp(-0.5 * ((x - mu) / sd) ** 2) / (sd * np.sqrt(2 * np.pi)), rtol=1e-4)
    refs, _ = gaussian_references(store.d_model, store.d_head, init_sigma(store.array("std")[0].ravel(), store.d_head))
    rects = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    kl_band = next(r for r in rects if r["yref"] == "y3")
    assert (kl_band["y0"], kl_band["y1"]) == pytest.approx((refs["kl_gauss"].lo, refs["kl_gauss"].hi))
    stat = open_page(HEAD, dict(query, panel="statistic"))  # the statistic's band, in its tab
    band = next(s for s in chart(stat, "head_in_layer")["layout"]["shapes"] if s["type"] == "rect")
    assert (band["y0"], band["y1"]) == pytest.approx((refs["kurtosis"].lo, refs["kurtosis"].hi))
    # standardized z: the curves are p_z of z = (w - mu)/sigma against the standard normal
    at.toggle(key="zview").set_value(True).run()
    fig = chart(at, "density_slices")
    g = next(t for t in fig["data"] if t.get("legendgroup") == "gauss")
    np.testing.assert_allclose(arr(g["y"]), np.exp(-0.5 * arr(g["x"]) ** 2) / np.sqrt(2 * np.pi), rtol=1e-4)
    assert at.query_params["zview"] == "1"
    z0 = arr(fig["data"][0]["x"])
    assert np.nanmax(np.abs(z0)) < 12


def test_lab_opens_at_the_runs_shape_and_init_scale_and_reports_the_statistics(app_env):
    from headwatch.analysis.rmt.references import init_sigma

    store = open_store(app_env)
    at = open_page("pages/rmt_lab.py")
    sigma0 = init_sigma(store.array("std")[0].ravel(), store.d_head)
    assert at.session_state["dmodel"] == store.d_model and at.session_state["nheads"] == store.d_model // store.d_head
    assert at.session_state["sq"] == pytest.approx(sigma0, rel=1e-2)
    table = at.dataframe[0].value
    labels = table["statistic"].tolist()
    assert any("D_KL" in s for s in labels) and any("kurtosis" in s for s in labels)
    assert table["random heads, mean"].notna().all()


def test_the_heads_csv_names_its_columns_as_the_screen_does(app_env):
    """The screen's column labels (the table's column config as the browser receives it) are the CSV's names; no k
    column for a statistic without one (the Chromium test downloads the file itself: test_browser_types)."""
    import json

    from headwatch.dashboard.views.heads.data import screen_table

    store = open_store(app_env)
    at = open_page(HEADS, {"stat": "stable_rank"})
    shown = next(d for d in at.dataframe if d.proto.id.endswith("-heads_table"))
    labels = json.loads(shown.proto.columns)
    table = shown.value.assign(open="")
    csv = screen_table(table, labels, run="tiny-run", stat="stable_rank", k=None, matrix="qk", step=int(store.steps[-1]), since=0)
    on_screen = [labels[c]["label"] for c in shown.value.columns if c != "open"]
    assert list(csv.columns[: len(on_screen)]) == on_screen and "r_s" in on_screen and "÷ random head" in on_screen
    assert "value" not in csv.columns and "over reference" not in csv.columns and "k" not in csv.columns
