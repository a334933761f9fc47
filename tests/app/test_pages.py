"""Every page through Streamlit's AppTest against the test store: renders, reacts, follows and writes the URL."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headwatch.analysis.store import open_store
from headwatch.dashboard.navigation import PAGES
from tests.app.conftest import ROOT, arr, chart, notices, open_page, view_link

HEAD = "pages/head_explorer.py"
LAYERS = "pages/layer_view.py"
ARCH = "pages/architecture_heatmaps.py"
ANIM = "pages/animated_heatmap.py"
TRAJ = "pages/trajectory_map.py"
VIEW_PAGES = [HEAD, LAYERS, ARCH, ANIM, TRAJ]


def data_of(at, key: str, trace: int | str = 0, field: str = "z") -> np.ndarray:
    """A field of one trace (by index, or by name) of the chart with widget key ``key``."""
    traces = chart(at, key)["data"]
    t = traces[trace] if isinstance(trace, int) else next(t for t in traces if t.get("name") == trace)
    return arr(t[field])


@pytest.mark.parametrize("page", [None, *VIEW_PAGES])
def test_page_renders_with_captions_and_no_notice(app_env, page):
    at = open_page(page)
    charts = at.get("plotly_chart")
    if page is not None:
        assert len(charts) >= 2  # the page's figures plus the sidebar's loss curve
        assert len(at.caption) >= len(charts)  # one line saying what each plot shows
    assert not notices(at)
    assert not at.error
    assert "synthetic/tiny" in " ".join(m.value for m in at.markdown)


# --- a widget change changes the figure's data -------------------------------------------------------------------


def test_head_explorer_layer_head_and_steps_change_the_figures(app_env):
    at = open_page(HEAD)
    before = data_of(at, "density_map")
    at.selectbox(key="layer").set_value(2).run()
    at.selectbox(key="head").set_value(3).run()
    assert not at.exception
    assert not np.array_equal(before, data_of(at, "density_map"))
    store = open_store(app_env)
    stat = open_page(HEAD, {"panel": "statistic"})  # the statistic's tab: the widgets above the tabs change it alike
    stat.selectbox(key="layer").set_value(2).run()
    stat.selectbox(key="head").set_value(3).run()
    assert not stat.exception
    focus = chart(stat, "head_in_layer")["data"][2]
    assert np.allclose(arr(focus["y"]), store.array("std")[:, 2, 3])
    n_before = len(chart(at, "density_slices")["data"])
    at.multiselect(key="step").set_value([0, 1000]).run()
    slices = chart(at, "density_slices")["data"]
    assert len(slices) == n_before - 6  # 5 default steps -> 2 density curves (and 2 Gaussians of the same mu, sigma)
    assert [t["name"] for t in slices[:2]] == ["step 0", "step 1,000"]


def test_layer_view_statistic_and_layer_change_the_lines(app_env):
    at = open_page(LAYERS)
    before = data_of(at, "layer_lines", 0, "y")
    at.selectbox(key="stat").set_value("kl_gauss").run()
    kl = data_of(at, "layer_lines", 0, "y")
    assert not np.array_equal(before, kl)
    at.selectbox(key="layer").set_value(3).run()
    store = open_store(app_env)
    assert np.allclose(data_of(at, "layer_lines", 0, "y"), store.array("kl_gauss")[:, 3, 0])
    mean = chart(at, "layer_lines")["data"][-1]
    assert mean["name"] == "layer mean" and mean["line"]["dash"] == "dash"
    assert np.allclose(arr(mean["y"]), store.array("kl_gauss")[:, 3].mean(axis=1))


def test_architecture_lambda_k_slider_and_log_colour(app_env):
    at = open_page(ARCH, {"stat": "lambda"})
    store = open_store(app_env)
    sv = store.array("sv").astype(np.float64)
    assert np.allclose(data_of(at, "architecture"), (sv[..., 0] ** 2).reshape(len(store.steps), -1), rtol=1e-6)
    at.slider(key="k").set_value(5).run()
    assert np.allclose(data_of(at, "architecture"), (sv[..., 5] ** 2).reshape(len(store.steps), -1), rtol=1e-6)
    at.toggle(key="logc").set_value(True).run()
    assert np.allclose(data_of(at, "architecture"), np.log10(sv[..., 5] ** 2).reshape(len(store.steps), -1), rtol=1e-6)
    assert at.query_params["k"] == "5" and at.query_params["logc"] == "1"


def test_animation_opening_step_moves_the_first_frame(app_env):
    at = open_page(ANIM)
    store = open_store(app_env)
    std = store.array("std")
    assert np.allclose(data_of(at, "animation").reshape(std[0].shape), std[0], rtol=1e-6)
    at.select_slider(key="step").set_value(int(store.steps[6])).run()
    spec = chart(at, "animation")
    assert np.allclose(arr(spec["data"][0]["z"]).reshape(std[6].shape), std[6], rtol=1e-6)
    assert spec["layout"]["title"]["text"].endswith(f"step {int(store.steps[6]):,}")
    assert at.query_params["step"] == str(int(store.steps[6]))  # the frame shown is in the link
    assert len(spec["frames"]) == len(store.steps)


def test_trajectory_map_reads_the_stored_embedding(app_env):
    at = open_page(TRAJ)
    assert not at.button  # precomputed: nothing to compute, no wait
    xy = data_of(at, "trajectory_map", "heads", "x")
    at.selectbox(key="stat").set_value("spectral_entropy").run()
    assert not np.array_equal(xy, data_of(at, "trajectory_map", "heads", "x"))
    assert "precomputed" in " ".join(c.value for c in at.caption)


def test_trajectory_maps_without_their_record_are_said_to_lack_it(store_path, tmp_path, monkeypatch):
    """A store whose embeddings.parquet has no meta.json record (as the job wrote when a lens committed after the
    maps) is not said to have maps of 0 checkpoints: the page says the record is missing and how to remake it."""
    import shutil

    from tests.app.conftest import serve_only

    path = tmp_path / "no-record"
    shutil.copytree(store_path, path)
    meta = json.loads((path / "meta.json").read_text())
    del meta["embeddings"]
    (path / "meta.json").write_text(json.dumps(meta))
    serve_only(path, tmp_path, monkeypatch)
    at = open_page(TRAJ)
    captions = " ".join(c.value for c in at.caption)
    assert "no record of the checkpoints" in captions and "made from 0 checkpoints" not in captions
    assert "python -m headwatch.precompute.lenses.embeddings STORE" in captions
    assert at.button  # the map is computed here, on request


def test_trajectory_map_other_settings_compute_on_request(app_env, monkeypatch):
    import headwatch.analysis.trajectories.maps as trajectories

    def pca(x, settings):  # stands in for UMAP: same shapes, no numba compilation
        u, s, _ = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
        return u[:, :2] * s[:2]

    monkeypatch.setattr(trajectories, "umap_embed", pca)
    at = open_page(TRAJ, {"nn": "5", "norm": "global"})
    assert at.button and "no precomputed map" in at.info[0].value
    at.button[0].click().run()
    assert not at.exception
    assert "computed in this server" in " ".join(c.value for c in at.caption)
    assert len(data_of(at, "trajectory_map", "heads", "x")) == 16


# --- query parameters set the widgets; bad ones give a notice ----------------------------------------------------

GOOD = {  # page -> (query, the widgets' values) per link; the head explorer's per tab (URL panel), each with its own
    HEAD: [
        (
            {"layer": "2", "head": "3", "step": ["1", "1000"], "logp": "0"},  # the weights' tab, the default
            {"layer": 2, "head": 3, "step": [1, 1000], "logp": False},
        ),
        (
            {"layer": "2", "head": "3", "step": ["1", "1000"], "panel": "statistic", "stat": "kurtosis"},
            {"layer": 2, "head": 3, "step": [1, 1000], "panel": "statistic", "stat": "kurtosis"},
        ),
    ],
    LAYERS: [({"layer": "1", "stat": "lambda", "k": "7", "logy": "1"}, {"layer": 1, "stat": "lambda", "k": 7, "logy": True})],
    ARCH: [({"stat": "stable_rank", "logc": "1"}, {"stat": "stable_rank", "logc": True})],
    ANIM: [({"stat": "spectral_entropy", "step": "21000"}, {"stat": "spectral_entropy", "step": 21000})],
    TRAJ: [({"stat": "std", "layer": "3", "head": "1"}, {"stat": "std", "layer": 3, "head": 1})],
}


@pytest.mark.parametrize("page", VIEW_PAGES)
def test_query_parameters_set_the_widgets(app_env, page):
    for query, expected in GOOD[page]:
        at = open_page(page, dict(query, xscale="log"))
        assert not notices(at)
        for key, value in expected.items():
            assert at.session_state[key] == value, key
        assert at.session_state["xscale"] == "log"
        for key, value in query.items():  # the URL keeps them (it is what the browser shows)
            assert at.query_params[key] == value
        link = view_link(at)
        assert all(f"{k}={v}" in link for k, v in query.items() if not isinstance(v, list))


@pytest.mark.parametrize("page", VIEW_PAGES)
def test_invalid_parameters_fall_back_with_a_notice(app_env, page):
    tab = {"panel": "statistic"} if page == HEAD else {}  # the head explorer's statistic is drawn in its own tab
    at = open_page(
        page, {"layer": "99", "head": "x", "stat": "bogus", "step": "7", "k": "-1", "xscale": "sideways", "run": "nope", **tab}
    )
    text = " ".join(notices(at))
    assert "xscale=sideways" in text and "run=nope" in text and "stat=bogus" in text
    assert at.session_state["stat"] == ("kl_gauss" if page == TRAJ else "std")
    if page in (HEAD, LAYERS, TRAJ):
        assert "layer=99" in text and at.session_state["layer"] == 0
    if page in (HEAD, TRAJ):
        assert "head=x" in text and at.session_state["head"] == 0
    if page in (HEAD, ANIM):
        assert "step=7" in text
    assert at.query_params["stat"] != "bogus" and at.query_params.get("layer") != "99"  # the URL is repaired


def test_layer_and_head_carry_over_to_another_page(app_env):
    at = open_page(HEAD, {"layer": "2", "head": "1"})
    at.switch_page(LAYERS).run()
    assert at.session_state["layer"] == 2
    at.switch_page(TRAJ).run()
    assert (at.session_state["layer"], at.session_state["head"]) == (2, 1)


# --- the Overview -------------------------------------------------------------------------------------------------


def test_overview_links_to_every_page_of_the_navigation(app_env):
    at = open_page(None)
    every = [(link.proto.page, link.value, link.proto.icon) for link in at.get("page_link")]
    links = [link for link in every if link[1] != "Timeline of this run"]  # each run's card links to its timeline
    assert every[len(links) :] == [("timeline", "Timeline of this run", ":material/timeline:")]  # one run here
    assert links == [(p.url_path, p.title, p.icon) for p in PAGES if not p.default]  # the random-matrix lab too
    assert ("lab", "Random-matrix lab") in [(u, t) for u, t, _ in links]
    assert all(link.proto.query_string == f"run={app_env.name}" for link in at.get("page_link"))
    assert {p.file for p in PAGES} == {f"pages/{f.name}" for f in (ROOT / "pages").glob("*.py")}  # no page left out
    assert [p.default for p in PAGES].count(True) == 1


# --- the shared sidebar ------------------------------------------------------------------------------------------


def test_sidebar_model_card_flags_the_duplicate_and_draws_the_loss(app_env):
    at = open_page(HEAD)
    card = " ".join(m.value for m in at.sidebar.markdown)
    assert "4 layers × 4 heads" in card and "d_head 16" in card
    assert "1 duplicate checkpoint" in card and "3 = 0" in card
    loss = chart(at, "loss_curve")
    assert [t["name"] for t in loss["data"]] == ["train", "validation"]
    assert "1/√d_head" in " ".join(c.value for c in at.sidebar.caption)


def test_time_axis_log_and_tokens(app_env):
    at = open_page(HEAD, {"panel": "leading"})
    at.radio(key="xscale").set_value("log").run()
    layout = chart(at, "leading")["layout"]  # two stacked panels: the time axis is titled at the bottom
    assert layout["xaxis"]["type"] == layout["xaxis2"]["type"] == "log" and "+ 1" in layout["xaxis2"]["title"]["text"]
    assert arr(chart(at, "leading")["data"][0]["x"])[0] == 1.0  # step 0 sits at 1
    at.radio(key="xunit").set_value("tokens").run()
    assert "tokens" in chart(at, "leading")["layout"]["xaxis2"]["title"]["text"]
    assert at.query_params["xunit"] == "tokens"


def test_duplicate_checkpoint_is_marked_never_plotted(app_env):
    at = open_page(HEAD, {"xscale": "linear", "panel": "leading"})  # the mark at the duplicate's own step
    spec = chart(at, "leading")
    assert 3 not in arr(spec["data"][0]["customdata"]).tolist()  # step 3 repeats step 0: not a state
    dotted = [s for s in spec["layout"]["shapes"] if s["line"].get("dash") == "dot"]
    assert [s["x0"] for s in dotted] == [3.0, 3.0]  # in both panels
    assert [s["xref"] for s in dotted] == ["x", "x2"]


def test_no_store_and_broken_store_explain_themselves(tmp_path, monkeypatch):
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(tmp_path))
    for page in (None, HEAD, TRAJ):
        at = open_page(page)
        assert at.info and not at.get("plotly_chart")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.json").write_text(json.dumps({"schema_version": 1}))
    at = open_page(HEAD)
    assert any("lacks the required key" in e.value for e in at.error)


def test_switching_runs_keeps_valid_state_and_resets_the_rest(app_env, tmp_path, monkeypatch):
    from benchmarks.synthetic_store import write_synthetic_store

    data = tmp_path / "data"
    write_synthetic_store(
        data / "small-run", n_layers=2, n_heads=3, d_head=8, d_model=32, n_checkpoints=6, duplicate=False, training=False
    )
    monkeypatch.setenv("HEADWATCH_DATA", str(data))
    at = open_page(HEAD, {"layer": "3", "head": "2"})
    assert at.selectbox(key="run").options == ["tiny-run", "small-run"]  # $HEADWATCH_STORE first
    at.selectbox(key="run").set_value("small-run").run()
    assert not at.exception and not notices(at)
    assert at.session_state["layer"] == 0 and at.session_state["head"] == 2  # layer 3 does not exist there
    assert "2 layers × 3 heads" in " ".join(m.value for m in at.sidebar.markdown)
    assert "loss_curve" not in [e.proto.id.rsplit("-", 1)[-1] for e in at.get("plotly_chart")]  # no training record
    assert at.query_params["run"] == "small-run"


def test_trajectory_map_lists_the_neighbours_of_the_highlighted_head(app_env):
    import pandas as pd

    at = open_page(TRAJ, {"layer": "1", "head": "2"})
    table = pd.read_parquet(app_env / "embeddings.parquet")
    row = table[(table["statistic"] == "kl_gauss") & (table["layer"] == 1) & (table["head"] == 2)].iloc[0]
    expected = ", ".join(f"L{i // 4} H{i % 4}" for i in row["neighbors"])
    assert any(expected in m.value for m in at.markdown)


def test_head_explorer_draws_the_random_head_reference_and_it_can_be_hidden(app_env):
    from headwatch.analysis.rmt.nullmodel import free_mp_quantile

    at = open_page(HEAD, {"layer": "1", "head": "2", "step": ["0", "1000"], "panel": "spectrum"})
    fig = chart(at, "spectrum_slices")
    null = [t for t in fig["data"] if t.get("legendgroup") == "null"]
    assert len(null) == 2  # one per chosen step
    lam = [arr(t["y"]) for t in fig["data"][:2]]
    d_head = len(lam[0])
    x = free_mp_quantile(1 - (np.arange(d_head) + 0.5) / d_head, d_head / 64)
    np.testing.assert_allclose(arr(null[0]["y"]), lam[0].mean() * x, rtol=1e-6)
    at.toggle(key="null").set_value(False).run()
    assert not [t for t in chart(at, "spectrum_slices")["data"] if t.get("legendgroup") == "null"]
    assert at.query_params["null"] == "0"


def _markers(at, kind: str) -> np.ndarray:
    return data_of(at, "leading", kind, "x")


def test_head_explorer_marks_planted_crossings_and_repulsions(app_env):
    # the synthetic store swaps the directions of approaching levels for heads with even layer + head
    # (benchmarks/synthetic_store.add_synthetic_overlaps) and keeps them for the others
    odd = open_page(HEAD, {"layer": "0", "head": "1", "panel": "leading"})
    assert len(_markers(odd, "repulsion")) >= 1 and len(_markers(odd, "crossing")) == 0
    even = open_page(HEAD, {"layer": "1", "head": "1", "panel": "leading"})
    assert len(_markers(even, "crossing")) >= 1
    table = even.dataframe[0].value
    assert set(table["verdict"]) <= {"crossing", "repulsion", "unresolved"} and "crossing" in set(table["verdict"])
    store = open_store(app_env)
    assert set(table["step"]) <= set(store.steps.tolist())
    # the crossing markers sit at the table's crossing steps, between the two levels
    lam = store.array("sv")[:, 1, 1].astype(np.float64) ** 2
    crossing = table[table["verdict"] == "crossing"]
    t = [store.steps.tolist().index(s) for s in crossing["step"]]
    lvl = [int(x.split(",")[0].removeprefix("λ_")) for x in crossing["levels"]]
    np.testing.assert_allclose(
        data_of(even, "leading", "crossing", "y"), np.sqrt(lam[t, lvl] * lam[t, np.add(lvl, 1)]), rtol=1e-5
    )
    # the bottom panel: O_kk between consecutive checkpoints, from overlaps.parquet
    o_u, o_v = store.overlaps(1, 1)
    np.testing.assert_allclose(data_of(even, "leading", "λ_0 kept", "y"), o_u[:, 0, 0] * o_v[:, 0, 0], rtol=1e-6)
    # at 20% this head's levels are close from the first checkpoint on: no approach; the threshold is in the URL
    even.selectbox(key="gap").set_value(20).run()
    assert len(even.dataframe[0].value) == 0 and len(_markers(even, "crossing")) == 0
    assert even.query_params["gap"] == "20"


def test_head_explorer_without_overlaps_says_how_to_add_them(app_env, tmp_path, monkeypatch):
    from benchmarks.synthetic_store import write_synthetic_store

    old = write_synthetic_store(
        tmp_path / "old-run", n_layers=2, n_heads=2, d_head=8, d_model=32, n_checkpoints=6, overlaps=False
    )
    monkeypatch.setenv("HEADWATCH_STORE", str(old))
    at = open_page(HEAD, {"gap": "5", "panel": "leading"})
    assert any("no singular-vector overlaps" in i.value for i in at.info)
    names = [t["name"] for t in chart(at, "leading")["data"]]
    assert names == ["λ_0", "λ_1", "λ_2", "λ_3"]  # the plain leading-eigenvalue plot
    assert "gap" not in at.session_state and "gap" not in at.query_params  # no threshold to set without overlaps


def test_head_explorer_bad_gap_parameter_falls_back_with_a_notice(app_env):
    at = open_page(HEAD, {"gap": "7", "panel": "leading"})
    assert "gap=7" in " ".join(notices(at))  # not one of the offered thresholds: a notice, the default kept
    assert at.session_state["gap"] == 10


def test_mixed_checkpoint_is_left_out_until_shown(app_env, tmp_path, monkeypatch):
    """A checkpoint with another step's weight file (pythia issue 206) is flagged in the card, drawn as a
    dotted line, and becomes a plotted state only with the sidebar toggle (``mixed=1`` in the URL)."""
    from benchmarks.synthetic_store import write_synthetic_store

    path = write_synthetic_store(
        tmp_path / "mixed-run", n_layers=2, n_heads=2, d_head=4, d_model=16, n_checkpoints=6, duplicate=False, training=False
    )
    meta = json.loads((path / "meta.json").read_text())
    for c in meta["checkpoints"]:
        c["files"] = {"model-00001.safetensors": f"first{c['step']}", "model-00002.safetensors": f"second{c['step']}"}
    mixed, owner = meta["checkpoints"][2]["step"], meta["checkpoints"][-1]["step"]
    meta["checkpoints"][2]["files"]["model-00001.safetensors"] = f"first{owner}"
    (path / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setenv("HEADWATCH_STORE", str(path))
    at = open_page(HEAD, {"xscale": "linear", "panel": "leading"})  # the mark at the mixed checkpoint's own step
    card = " ".join(m.value for m in at.sidebar.markdown)
    assert f"step {mixed:,} mixes weights of two revisions" in card and f"step {owner:,}'s model-00001" in card
    spec = chart(at, "leading")
    assert mixed not in arr(spec["data"][0]["customdata"]).tolist()
    assert {s["x0"] for s in spec["layout"]["shapes"] if s["line"].get("dash") == "dot"} == {float(mixed)}
    at.toggle(key="mixed").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    assert mixed in arr(chart(at, "leading")["data"][0]["customdata"]).tolist()
    assert at.query_params["mixed"] == "1"
    at = open_page(HEAD, {"mixed": "1", "panel": "leading"})  # a link that shows them
    assert mixed in arr(chart(at, "leading")["data"][0]["customdata"]).tolist()
