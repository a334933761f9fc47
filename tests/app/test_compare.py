"""The Compare runs page through AppTest, on two stores made here that differ in depth (6 and 4 layers), heads,
checkpoint schedule and tokens per step. The relative-depth bins, the time alignment and the checkpoint each run
uses at a point of training are computed here from the store files with pandas, independently of
`analysis.findings.comparison`, and compared with what the page plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from benchmarks.synthetic_store import (
    add_synthetic_forward,
    add_synthetic_layer_matrices,
    add_synthetic_llc,
    write_synthetic_store,
)
from headwatch.analysis.findings import comparison as compare
from tests.app.conftest import arr, chart, notices, open_page, view_link

PAGE = "pages/compare_runs.py"
LLC_STEPS = [0, 40, 640]  # the deep run's refined LLC: a subset of its checkpoints
DEEP, SHALLOW = "deep-run", "shallow-run"
RUNS: dict[str, dict[str, Any]] = {
    # 6 layers x 4 heads, qk and ov, the forward lens, whole-layer matrices, 1,000 tokens per step
    DEEP: dict(
        n_layers=6, n_heads=4, steps=[0, 10, 20, 40, 80, 160, 320, 640], tokens_per_step=1000, matrices=("qk", "ov"), forward=True
    ),
    # 4 layers x 3 heads, qk only, no forward lens, 4,096 tokens per step, another schedule
    SHALLOW: dict(
        n_layers=4, n_heads=3, steps=[0, 5, 15, 50, 100, 250, 400], tokens_per_step=4096, matrices=("qk",), forward=False
    ),
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare") / "data"
    for i, (name, spec) in enumerate(RUNS.items()):
        write_synthetic_store(
            root / name,
            n_layers=spec["n_layers"],
            n_heads=spec["n_heads"],
            d_head=8,
            d_model=32,
            steps=spec["steps"],
            tokens_per_step=spec["tokens_per_step"],
            matrices=spec["matrices"],
            seed=3 + i,
            model_id=f"synthetic/{name}",
            overlaps=False,
        )
        if spec["forward"]:
            add_synthetic_forward(root / name, seed=i)
            add_synthetic_layer_matrices(root / name, seed=i)
            add_synthetic_llc(root / name, steps=LLC_STEPS)
    return root


@pytest.fixture()
def two_runs(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(data_dir))
    return data_dir


# --- the independent computation: plain pandas on the store files ---------------------------------------------------


def table(data_dir: Path, run: str, stat: str = "std", matrix: str = "qk") -> pd.DataFrame:
    """(step, layer, head, value) of one statistic, read from heads.parquet (attention.parquet for a forward one)."""
    if stat in ("entropy", "span", "prev_token", "induction", "sink", "entropy_std"):
        df = pd.read_parquet(data_dir / run / "attention.parquet")
    else:
        df = pd.read_parquet(data_dir / run / "heads.parquet")
        df = df[df["matrix"] == matrix]
    return df[["step", "layer", "head", stat]].rename(columns={stat: "value"})


def aligned(data_dir: Path, run: str, align: str) -> pd.Series:
    """step -> aligned time, from meta.json's checkpoint list (duplicates, which have no rows, left out)."""
    meta = json.loads((data_dir / run / "meta.json").read_text())
    rows = pd.DataFrame([c for c in meta["checkpoints"] if c.get("duplicate_of") is None])
    x = {
        "step": rows["step"].astype(float),
        "tokens": rows["tokens"].astype(float),
        "fraction": rows["step"] / rows["step"].max(),
    }[align]
    return pd.Series(x.to_numpy(), index=rows["step"].to_numpy())


def bin_of(n_layers: int, n_bins: int) -> pd.Series:
    """layer -> its bin: the interval [b/B, (b+1)/B) that holds layer / n_layers (pandas.cut, closed left)."""
    depth = pd.Series(np.arange(n_layers) / n_layers)
    return pd.cut(depth, bins=np.linspace(0, 1, n_bins + 1), right=False, labels=False).astype(int)


def traces(at, key: str, **match) -> list[dict]:
    return [t for t in chart(at, key)["data"] if all((t.get("meta") or {}).get(k) == v for k, v in match.items())]


def link(**params) -> dict:
    """A link to the two runs (on a linear time axis unless ``xscale`` is given: the page opens on a log one)."""
    return {"runs": [DEEP, SHALLOW], "xscale": "linear", **params}


# --- (a) depth bins and alignment ------------------------------------------------------------------------------------


@pytest.mark.parametrize("align", ["step", "tokens", "fraction"])
@pytest.mark.parametrize("n_bins", [3, 4])
def test_depth_bin_means_and_alignment_match_pandas(two_runs, align, n_bins):
    at = open_page(PAGE, link(stat="std", matrix="qk", align=align, nbins=str(n_bins)))
    assert not notices(at) and not at.warning
    for run, spec in RUNS.items():
        df = table(two_runs, run)
        df["bin"] = df["layer"].map(bin_of(spec["n_layers"], n_bins))
        want = df.groupby(["bin", "step"])["value"].agg(mean="mean", sd=lambda v: v.std(ddof=0))
        x_of = aligned(two_runs, run, align)
        drawn = traces(at, "compare_bands", run=run, kind="mean")
        assert sorted(t["meta"]["bin"] for t in drawn) == sorted(want.index.get_level_values("bin").unique())
        for t in drawn:
            exp = want.loc[t["meta"]["bin"]]
            assert np.allclose(arr(t["y"]), exp["mean"].to_numpy())
            assert np.allclose(arr(t["x"]), x_of.loc[exp.index].to_numpy())  # its own checkpoints, aligned
            assert np.allclose(arr(t["customdata"])[:, 1], exp["sd"].to_numpy())  # the band's sd, in the hover
            assert t["mode"] == "lines+markers"
    assert at.query_params["align"] == align and at.query_params["nbins"] == str(n_bins)


def test_a_six_layer_and_a_four_layer_model_fill_four_bins_as_expected(two_runs):
    at = open_page(PAGE, link(nbins="4"))
    bins = {t["meta"]["bin"]: t["meta"]["layers"] for t in traces(at, "compare_bands", run=DEEP, kind="mean")}
    assert bins == {0: [0, 1], 1: [2], 2: [3, 4], 3: [5]}  # 0, 1/6 | 2/6 | 3/6, 4/6 | 5/6
    bins = {t["meta"]["bin"]: t["meta"]["layers"] for t in traces(at, "compare_bands", run=SHALLOW, kind="mean")}
    assert bins == {0: [0], 1: [1], 2: [2], 3: [3]}
    at = open_page(PAGE, link(nbins="8"))  # the shallow model leaves every other bin empty: no trace, no error
    assert sorted(t["meta"]["bin"] for t in traces(at, "compare_bands", run=SHALLOW, kind="mean")) == [0, 2, 4, 6]
    assert not at.exception


def test_log_time_axis_plots_one_step_more(two_runs):
    at = open_page(PAGE, link(align="tokens", xscale="log"))
    for run, spec in RUNS.items():
        t = traces(at, "compare_bands", run=run, kind="mean", bin=0)[0]
        want = aligned(two_runs, run, "tokens").to_numpy() + spec["tokens_per_step"]
        assert np.allclose(arr(t["x"]), want)
    assert chart(at, "compare_bands")["layout"]["xaxis"]["type"] == "log"


def test_the_page_opens_on_a_log_time_axis(two_runs):
    """Under fraction alignment a linear axis put the first checkpoints (0 to 128 of 1,536) on top of each other."""
    at = open_page(PAGE, {"runs": [DEEP, SHALLOW]})
    assert at.query_params["xscale"] == "log" and at.query_params["align"] == "fraction"
    assert chart(at, "compare_bands")["layout"]["xaxis"]["type"] == "log"


# --- (b) one bin's heads, run by run ---------------------------------------------------------------------------------


def test_bin_panel_draws_the_bins_heads_of_each_run_on_shared_axes(two_runs):
    at = open_page(PAGE, link(stat="kl_gauss", align="fraction", nbins="4", bin="2"))
    for run, spec in RUNS.items():
        layers = [int(layer) for layer, b in bin_of(spec["n_layers"], 4).items() if b == 2]
        drawn = traces(at, "compare_bin", run=run, kind="heads")
        assert [t["meta"]["layer"] for t in drawn] == layers
        df = table(two_runs, run, "kl_gauss")
        x_of = aligned(two_runs, run, "fraction")
        for t in drawn:
            y = arr(t["y"]).reshape(spec["n_heads"], -1)[:, :-1]  # heads joined by NaN gaps
            x = arr(t["x"]).reshape(spec["n_heads"], -1)[:, :-1]
            want = df[df["layer"] == t["meta"]["layer"]].pivot(index="head", columns="step", values="value")
            assert np.allclose(y, want.to_numpy())
            assert np.allclose(x, np.tile(x_of.loc[want.columns].to_numpy(), (spec["n_heads"], 1)))
    layout = chart(at, "compare_bin")["layout"]
    assert layout["xaxis2"]["matches"] == "x" and layout["yaxis2"]["matches"] == "y"


# --- (c) the distribution at a point: each run's last checkpoint at or before it ---------------------------------


@pytest.mark.parametrize("align, point", [("step", "50"), ("step", "320"), ("fraction", "0.5"), ("tokens", "61440")])
def test_point_uses_each_runs_last_checkpoint_at_or_before_it(two_runs, align, point):
    at = open_page(PAGE, link(stat="std", align=align, point=point))
    assert not notices(at)
    captions = " ".join(c.value for c in at.caption)
    for run in RUNS:
        x_of = aligned(two_runs, run, align)
        step = int(x_of[x_of <= float(point)].index.max())
        (t,) = traces(at, "compare_dist", run=run, kind="ecdf")
        assert t["meta"]["step"] == step and f"step {step:,}" in t["name"]
        df = table(two_runs, run)
        assert np.allclose(arr(t["x"]), np.sort(df[df["step"] == step]["value"].to_numpy()))
        assert f"{run}: step {step:,}" in captions  # the page says which checkpoint of each run it used


def test_a_point_before_a_runs_first_checkpoint_leaves_it_out_and_says_so(two_runs, tmp_path, monkeypatch):
    late = write_synthetic_store(
        tmp_path / "late-run",
        n_layers=2,
        n_heads=2,
        d_head=8,
        d_model=32,
        steps=[100, 200, 400],
        overlaps=False,
        duplicate=False,
        matrices=("qk",),
    )
    monkeypatch.setenv("HEADWATCH_STORE", str(late))
    at = open_page(PAGE, {"runs": [DEEP, "late-run"], "align": "step", "point": "40"})
    assert [t["meta"]["run"] for t in traces(at, "compare_dist", kind="ecdf")] == [DEEP]
    assert "late-run: no checkpoint at or before this point" in " ".join(c.value for c in at.caption)


# --- URL state and notices --------------------------------------------------------------------------------------


def test_a_comparison_is_a_link(two_runs):
    query = link(stat="stable_rank", matrix="qk", align="tokens", nbins="3", bin="1", point="61440")
    at = open_page(PAGE, query)
    assert not notices(at)
    assert at.multiselect(key="runs").value == [DEEP, SHALLOW]
    for key, value in query.items():
        assert at.query_params[key] == value, key
    share = view_link(at)
    assert f"runs={DEEP}&runs={SHALLOW}" in share and "align=tokens" in share and "point=61440" in share


def test_a_missing_run_is_named_and_the_others_are_shown(two_runs):
    at = open_page(PAGE, {"runs": [DEEP, "no-such-run"], "stat": "std"})
    text = " ".join(notices(at))
    assert "runs=no-such-run" in text and "pick it from the list" in text
    assert [t["meta"]["run"] for t in traces(at, "compare_bands", kind="mean", bin=0)] == [DEEP]
    assert not at.exception


def test_only_unknown_runs_fall_back_to_the_default_pair(two_runs):
    at = open_page(PAGE, {"runs": ["nope", "nada"]})
    text = " ".join(notices(at))
    assert "`runs=nope`, `runs=nada` not valid here" in text and "showing the default runs." in text
    assert at.multiselect(key="runs").value == [DEEP, SHALLOW]  # the sidebar's run and the next one


def test_a_run_the_link_repeats_is_shown_once_with_a_notice(two_runs):
    at = open_page(PAGE, {"runs": [DEEP, DEEP, SHALLOW]})
    assert at.multiselect(key="runs").value == [DEEP, SHALLOW]
    assert at.query_params["runs"] == [DEEP, SHALLOW]  # the link is repaired
    assert f"The link repeats `runs={DEEP}` (2 times): each is shown once." in " ".join(notices(at)), notices(at)
    at = open_page(PAGE, {"runs": [DEEP, DEEP]})  # one run twice is one run: the page asks for a second
    assert at.multiselect(key="runs").value == [DEEP] and "repeats" in " ".join(notices(at))
    assert "Choose two or more runs" in " ".join(i.value for i in at.info)


def test_the_run_picker_shows_the_runs_in_the_order_the_link_lists_them(two_runs):
    """One order: a run picked again takes its place in the run picker's list, as in the link and the charts, rather
    than going to the end of the picker while the link sorts it back."""
    at = open_page(PAGE, {"runs": [SHALLOW, DEEP]})  # a link in another order opens as before: in the list's order
    assert at.multiselect(key="runs").value == [DEEP, SHALLOW] and at.query_params["runs"] == [DEEP, SHALLOW]
    at.multiselect(key="runs").unselect(DEEP).run()
    at.multiselect(key="runs").select(DEEP).run()  # clicked last
    assert not at.exception
    assert at.multiselect(key="runs").value == [DEEP, SHALLOW]
    assert at.query_params["runs"] == [DEEP, SHALLOW] and f"runs={DEEP}&runs={SHALLOW}" in view_link(at)
    assert [t["meta"]["run"] for t in traces(at, "compare_bands", kind="mean", bin=0)] == [DEEP, SHALLOW]


def test_a_run_without_the_forward_lens_is_named_and_the_others_are_shown(two_runs):
    at = open_page(PAGE, link(stat="entropy"))
    (warning,) = [w.value for w in at.warning if SHALLOW in w.value]
    assert "no forward-lens tables" in warning and "--lenses attention" in warning
    drawn = {t["meta"]["run"] for t in traces(at, "compare_bands", kind="mean")}
    assert drawn == {DEEP}
    df = table(two_runs, DEEP, "entropy")
    (t,) = traces(at, "compare_bands", run=DEEP, kind="mean", bin=3)
    assert np.allclose(arr(t["y"]), df[df["layer"] == 5].groupby("step")["value"].mean().to_numpy())
    assert "(not in every run)" in " ".join(at.selectbox(key="stat").options)


def test_the_refined_llc_is_compared_at_its_own_steps_and_a_run_without_it_is_named(two_runs):
    at = open_page(PAGE, link(stat="llc"))
    (warning,) = [w.value for w in at.warning if SHALLOW in w.value]
    assert "no refined LLC" in warning and "--lenses llc" in warning
    assert not [r for r in at.radio if r.key == "matrix"]  # per head whatever the matrix: no matrix choice
    (t,) = traces(at, "compare_bands", run=DEEP, kind="mean", bin=3)
    df = pd.read_parquet(two_runs / DEEP / "llc.parquet")
    want = df[df["layer"] == 5].groupby("step")["llc"].mean()
    y, steps = arr(t["y"]), RUNS[DEEP]["steps"]
    assert [s for s, v in zip(steps, y, strict=True) if np.isfinite(v)] == LLC_STEPS  # drawn where estimated, nowhere else
    assert np.allclose([v for v in y if np.isfinite(v)], want.loc[LLC_STEPS].to_numpy())
    # how far the estimates can be trusted, counted from the stored chains (the synthetic store: one head still
    # rising at the last step, one negative estimate at the first; the rest converged)
    n = int((df["layer"] >= 0).sum())
    (trust,) = [c.value for c in at.caption if "Refined-LLC estimates are sampled" in c.value]
    # (issue 62: the negative one is flagged negative, not converged)
    assert f"**{DEEP}** (refined LLC on held-out text): {n} estimates, {n - 2} converged (1 negative, 1 still rising)" in trust


def test_a_run_without_ov_is_named_and_the_others_are_shown(two_runs):
    at = open_page(PAGE, link(stat="std", matrix="ov"))
    (warning,) = [w.value for w in at.warning if SHALLOW in w.value]
    assert "no OV rows" in warning and "python -m headwatch.precompute" in warning
    (t,) = traces(at, "compare_bands", kind="mean", bin=0)
    df = table(two_runs, DEEP, "std", "ov")
    assert t["meta"]["run"] == DEEP
    assert np.allclose(arr(t["y"]), df[df["layer"].isin([0, 1])].groupby("step")["value"].mean().to_numpy())


def test_a_per_layer_statistic_bins_layers_and_names_a_run_without_them(two_runs):
    at = open_page(PAGE, link(stat="layer_frob_norm", role="mlp_out", nbins="4"))
    (warning,) = [w.value for w in at.warning if SHALLOW in w.value]
    assert "no whole-layer matrices" in warning and "--matrices layers" in warning
    df = pd.read_parquet(two_runs / DEEP / "layers.parquet")
    df = df[df["role"] == "mlp_out"]
    df["bin"] = df["layer"].map(bin_of(6, 4))
    drawn = traces(at, "compare_bands", kind="mean")
    assert {t["meta"]["run"] for t in drawn} == {DEEP} and len(drawn) == 4
    for t in drawn:
        want = df[df["bin"] == t["meta"]["bin"]].groupby("step")["frob_norm"].mean()
        assert np.allclose(arr(t["y"]), want.to_numpy())
    assert at.query_params["role"] == "mlp_out"


def test_bad_url_values_give_notices_never_an_exception(two_runs):
    at = open_page(PAGE, link(stat="bogus", matrix="xy", align="sideways", nbins="5", bin="9", point="abc"))
    text = " ".join(notices(at))
    for bad in ("stat=bogus", "matrix=xy", "align=sideways", "nbins=5", "bin=9", "point=abc"):
        assert bad in text, bad
    assert (at.session_state["stat"], at.session_state["align"], at.session_state["nbins"]) == ("std", "fraction", 4)
    assert at.session_state["point"] == 1.0  # the latest point both runs reached
    assert not at.exception and len(traces(at, "compare_bands", kind="mean")) == 8


def test_a_store_that_cannot_be_opened_is_named(two_runs, tmp_path, monkeypatch):
    broken = tmp_path / "broken-run"
    broken.mkdir()
    (broken / "meta.json").write_text("{}")
    monkeypatch.setenv("HEADWATCH_STORE", str(broken))
    at = open_page(PAGE, {"runs": ["broken-run", DEEP, SHALLOW]})
    assert any("broken-run" in w.value and "cannot be opened" in w.value for w in at.warning)
    assert {t["meta"]["run"] for t in traces(at, "compare_bands", kind="mean")} == {DEEP, SHALLOW}


def test_one_run_asks_for_another(two_runs):
    at = open_page(PAGE, {"runs": [SHALLOW]})
    assert any("two or more runs" in i.value for i in at.info)
    assert not at.exception


# --- the figures, on series the comparison layer makes ---------------------------------------------------------------


def test_compare_figures_are_valid_plotly(data_dir):
    """The builders skip plotly's validation (dashboard.figures.common.figure): validate their output here."""
    import plotly.graph_objects as go

    from headwatch.analysis.store import open_store
    from headwatch.dashboard.views.compare import figures as figs
    from headwatch.dashboard.views.compare.figures import depth as depth_figures

    series = []
    for run in RUNS:
        store = open_store(data_dir / run)
        series.append(
            compare.run_series(
                run,
                store.steps,
                store.array("std"),
                align="tokens",
                tokens=store.meta.tokens_at(store.steps),
                tokens_per_step=store.meta.tokens_per_step,
            )
        )
    for log in (False, True):
        built = [
            depth_figures.depth_bands(series, n_bins=8, stat_title="σ", x_title="tokens", log_x=log, log_y=log),
            depth_figures.bin_heads(series, b=1, n_bins=3, stat_title="σ", x_title="tokens", log_x=log, log_y=log),
            figs.distributions(series, [2, None], stat_title="σ", x_label="tokens", log_x=log),
            figs.losses([(s, np.linspace(5, 2, len(s.steps)), "loss") for s in series], x_title="tokens", log_x=log),
        ]
        for fig in built:
            go.Figure(fig.to_dict())  # raises ValueError on any invalid property


# --- the joint trajectory map --------------------------------------------------------------------------------------

TRAJ = "pages/trajectory_map.py"


def _pca(x, settings):  # stands in for UMAP: deterministic, no numba compilation
    u, s, _ = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
    return u[:, :2] * s[:2]


def test_joint_trajectory_map_marks_both_runs(two_runs, monkeypatch):
    import headwatch.analysis.trajectories.maps as trajectories

    monkeypatch.setattr(trajectories, "umap_embed", _pca)
    at = open_page(TRAJ, {"run": DEEP, "joint": SHALLOW, "stat": "std", "norm": "zscore"})
    assert at.button and "computed here" in " ".join(i.value for i in at.info)
    at.button[0].click().run()
    assert not at.exception and not notices(at)
    drawn = traces(at, "trajectory_map", kind="heads")
    assert [t["meta"]["run"] for t in drawn] == [DEEP, SHALLOW]
    assert drawn[0]["marker"]["symbol"] != drawn[1]["marker"]["symbol"]
    for t, (run, spec) in zip(drawn, RUNS.items(), strict=True):
        cd = np.asarray(t["customdata"], dtype=float)  # [layer, head, step (null: none), run]
        assert (
            len(cd) == spec["n_layers"] * spec["n_heads"] and (cd[:, 3] == list(RUNS).index(run)).all()
        )  # the run after the step
        assert run in t["hovertemplate"] and "layer %{customdata[0]}" in t["hovertemplate"]
        depth = arr(t["marker"]["color"])
        assert np.allclose(depth, cd[:, 0] / spec["n_layers"])  # coloured by relative depth
    # the trajectories: the shallow run's 7 checkpoints (the fewest) as fractions of the run; the deep run's
    # last checkpoint at or before each; z-scored per head, then the stand-in's PCA (up to each axis's sign)
    grid = aligned(two_runs, SHALLOW, "fraction")
    deep_x = aligned(two_runs, DEEP, "fraction")
    pick = {SHALLOW: list(grid.index), DEEP: [int(deep_x[deep_x <= f].index.max()) for f in grid.to_numpy()]}
    rows = []
    for run in RUNS:
        wide = table(two_runs, run).pivot(index=["layer", "head"], columns="step", values="value")
        rows.append(wide[pick[run]].to_numpy())
    traj = np.concatenate(rows)
    z = (traj - traj.mean(axis=1, keepdims=True)) / traj.std(axis=1, keepdims=True)
    want = _pca(z, None)
    got = np.concatenate([np.stack([arr(t["x"]), arr(t["y"])], axis=1) for t in drawn])
    assert np.allclose(np.abs(got), np.abs(want), atol=1e-9)
    caption = " ".join(c.value for c in at.caption)
    assert "shallow-run, the run with the fewest (7)" in caption and "not interpolated" in caption
    assert at.query_params["joint"] in (SHALLOW, [SHALLOW])


def test_a_click_on_another_runs_head_opens_it_in_that_run(two_runs, monkeypatch):
    import headwatch.analysis.trajectories.maps as trajectories

    monkeypatch.setattr(trajectories, "umap_embed", _pca)
    at = open_page(TRAJ, {"run": DEEP, "joint": SHALLOW, "stat": "std"})
    if at.button:  # not yet computed in this process (the map is cached per server process)
        at.button[0].click().run()
    at.session_state["trajectory_map"] = {
        "selection": {"points": [{"customdata": [3, 2, None, 1]}], "point_indices": [0], "box": [], "lasso": []}
    }
    at.run()
    assert not at.exception and at.title[0].value == "Head explorer"
    assert (at.session_state["run"], at.session_state["layer"], at.session_state["head"]) == (SHALLOW, 3, 2)


def test_trajectory_map_without_joint_runs_is_the_single_run_map(two_runs, monkeypatch):
    import headwatch.analysis.trajectories.maps as trajectories

    monkeypatch.setattr(trajectories, "umap_embed", _pca)
    at = open_page(TRAJ, {"run": DEEP, "stat": "std"})
    if at.button:
        at.button[0].click().run()
    spec = chart(at, "trajectory_map")
    assert [t.get("name") for t in spec["data"]][-2:] == ["heads", "highlighted head"]
    assert "joint" not in at.query_params


# --- in numbers: the statistic at the point and each run's loss ------------------------------------------------------


@pytest.mark.parametrize("align, point", [("fraction", "0.5"), ("step", "320")])
def test_the_summary_table_gives_each_runs_numbers_at_the_point_and_its_losses(two_runs, align, point):
    at = open_page(PAGE, link(stat="std", align=align, point=point))
    summary = next(d.value for d in at.dataframe if "step used" in d.value.columns)
    assert list(summary["run"]) == [DEEP, SHALLOW]
    for run in RUNS:
        row = summary[summary["run"] == run].iloc[0]
        x_of = aligned(two_runs, run, align)
        step = int(x_of[x_of <= float(point)].index.max())
        df = table(two_runs, run)
        v = df[df["step"] == step]["value"]
        assert row["step used"] == step
        assert row["mean over heads"] == pytest.approx(v.mean())
        assert row["median"] == pytest.approx(v.median())
        assert (row["smallest"], row["largest"]) == (pytest.approx(v.min()), pytest.approx(v.max()))
        loss_file = two_runs / run / "eval_loss.parquet"
        if loss_file.is_file():
            loss = pd.read_parquet(loss_file).sort_values("step")
            assert row["final loss"] == pytest.approx(loss["loss"].iloc[-1]) and row["final loss step"] == loss["step"].iloc[-1]
            low = loss.loc[loss["loss"].idxmin()]
            assert row["minimum loss"] == pytest.approx(low["loss"]) and row["minimum loss step"] == low["step"]
        else:  # the run's validation loss from run.json, or none
            meta = json.loads((two_runs / run / "meta.json").read_text())
            losses = [r for r in ((meta.get("training") or {}).get("losses") or []) if r.get("val_loss") is not None]
            if losses:
                assert row["final loss"] == pytest.approx(losses[-1]["val_loss"])
            else:
                assert np.isnan(row["final loss"])


def test_the_fraction_slider_says_which_step_of_each_run_it_means(two_runs):
    at = open_page(PAGE, link(stat="std", align="fraction", point="0.5"))
    slider = next(s for s in at.select_slider if s.key == "point")
    shown = slider.format_func(slider.value) if hasattr(slider, "format_func") else str(slider.value)
    for run in RUNS:
        x_of = aligned(two_runs, run, "fraction")
        step = int(x_of[x_of <= 0.5].index.max())
        assert f"{run}: step {step:,}" in shown, shown


# --- every caption of several runs gives each run's own figures ----------------------------------------------------


def test_the_type_counts_caption_gives_each_run_its_own_thresholds(monkeypatch):
    """On the shipped runs induction-d128 and shakespeare-pythia-6x8 the sink's entry threshold differs (0.371 and 0.3:
    max(0.3, 5 x the run's own uniform-attention null)); the caption once merged the runs' rules into one dictionary and
    gave the last run's to both. Each run's thresholds and exit levels are read here from its meta.json."""
    from tests.app.conftest import ROOT

    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(ROOT / "data"))
    shown = ["induction-d128", "shakespeare-pythia-6x8"]
    at = open_page(PAGE, {"runs": shown, "stat": "std"})
    caption = next(c.value for c in at.caption if "exit level" in c.value)
    parts = {}
    for run in shown:
        assert f"{run}: " in caption, caption
        parts[run] = caption.split(f"{run}: ", 1)[1].split(";")[0].split(". Aligned")[0]
        rules = json.loads((ROOT / "data" / run / "meta.json").read_text())["types"]["types"]
        for name, rule in rules.items():
            said = f"{name.replace('_', '-')} {rule['threshold']:.3g} (exit {rule['exit']:.3g})"
            assert said in parts[run], (run, said, parts[run])
    assert "sink 0.371 (exit 0.247)" in parts["induction-d128"] and "sink 0.3 (exit 0.2)" in parts["shakespeare-pythia-6x8"]
