"""The refined-LLC page and the refined LLC in the other views, through AppTest.

The store is the session's synthetic store copied and given a stand-in ``llc.parquet`` at three of its
checkpoints (`benchmarks.synthetic_store.add_synthetic_llc`): the heads of even layers rise over training,
those of odd layers fall (two shapes the clustering must separate), the whole-model row is known.
The figures' numbers are checked against
that table, read with pyarrow, not through the page's code.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic_store import SYNTHETIC_NEGATIVE, SYNTHETIC_RISING, add_synthetic_llc
from headwatch.analysis.llc.diagnostics import FLAGS
from tests.app.conftest import arr, chart, open_page, serve_only
from tests.conftest import SHIPPED_DATA

PAGE = "pages/refined_llc.py"


@pytest.fixture(scope="module")
def llc_store(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llc") / "tiny-run"
    shutil.copytree(store_path, path)
    return add_synthetic_llc(path)


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
        layer, head = int(arr(trace["customdata"])[0][0]), int(arr(trace["customdata"])[0][1])  # [layer, head, step]
        own = heads[(heads["layer"] == layer) & (heads["head"] == head)].sort_values("step")
        np.testing.assert_allclose(arr(trace["y"]), own["llc"].to_numpy())
        assert [int(c[2]) for c in arr(trace["customdata"])] == own["step"].tolist()  # only the estimated steps
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


def test_flagged_and_negative_estimates_are_marked_explained_and_counted(llc_env: Path) -> None:
    """The synthetic store's rising chains (`SYNTHETIC_RISING`) and negative estimate (`SYNTHETIC_NEGATIVE`),
    known by construction, against what the page draws and counts."""
    at = open_page(PAGE)
    assert not at.exception
    df = llc_table(llc_env)
    steps = sorted(df["step"].unique().tolist())
    curves = {(int(arr(t["customdata"])[0][0]), int(arr(t["customdata"])[0][1])): t for t in chart(at, "llc_heads")["data"]}
    layer, head, pos = SYNTHETIC_RISING
    rising = curves[(layer, head)]
    assert list(rising["marker"]["symbol"]) == ["circle"] * (len(steps) - 1) + ["triangle-up"]
    assert "still rising" in rising["text"][pos]
    spread = [c[3] for c in arr(rising["customdata"])]
    np.testing.assert_allclose(spread, df[(df["layer"] == layer) & (df["head"] == head)].sort_values("step")["llc_std"])
    layer, head, pos = SYNTHETIC_NEGATIVE
    assert "negative" in curves[(layer, head)]["text"][pos]
    assert any("1 head estimates are negative (L0 H0 at step" in w.value and "not a local minimum" in w.value for w in at.warning)
    counts = at.dataframe[0].value
    assert counts["step"].tolist() == steps
    n_estimates = df[df["step"] == steps[-1]].shape[0]  # heads and the whole model
    last = counts[counts["step"] == steps[-1]].iloc[0]
    assert last["still rising"] == 1 and last["converged"] == n_estimates - 1 and last["diverged"] == 0
    assert counts["negative"].tolist() == [1] + [0] * (len(steps) - 1)
    # issue 62: the negative estimate's flat chains do not make it converged
    first = counts[counts["step"] == steps[0]].iloc[0]
    assert first["converged"] == n_estimates - 1 and first["negative"] == 1
    assert list(counts.columns) == ["step", *FLAGS]
    n_all = len(df)
    assert any(m.value.startswith(f"{n_all} estimates (") and "1 negative" in m.value for m in at.markdown)
    layer, head, pos = SYNTHETIC_NEGATIVE
    assert curves[(layer, head)]["marker"]["symbol"][pos] == "square"


def test_the_chains_loss_traces_are_the_stored_ones(llc_env: Path) -> None:
    step = int(llc_table(llc_env)["step"].max())
    at = open_page(PAGE, {"trace": "L0H1", "trace_step": str(step)})
    assert not at.exception and at.query_params["trace"] == "L0H1"
    picker = next(s for s in at.selectbox if s.key == "trace")  # shown as every other view names a head
    assert picker.value == "L0H1" and "L0 H1" in picker.options and "L0H1" not in picker.options
    chains = pq.read_table(llc_env / "llc_chains.parquet").to_pandas()
    own = chains[(chains["step"] == step) & (chains["layer"] == 0) & (chains["head"] == 1)].sort_values("chain")
    drawn = chart(at, "llc_traces")["data"]
    for trace, stored in zip(drawn, own["trace"], strict=False):
        np.testing.assert_allclose(arr(trace["y"]), np.asarray(stored, dtype=np.float64), rtol=1e-6)
    init = llc_table(llc_env).query("step == @step and layer == 0 and head == 1")["init_loss"].iloc[0]
    assert arr(drawn[-1]["y"]).tolist() == [init, init] and "loss at w*" in drawn[-1]["name"]


def test_every_chart_has_its_data_as_csv(llc_env: Path) -> None:
    at = open_page(PAGE)
    charts = [c for c in at.get("plotly_chart") if c.proto.id.rsplit("-", 1)[-1].startswith("llc_")]
    buttons = [b for b in at.get("download_button") if "CSV" in b.proto.label]
    assert len(charts) == 4 and len(buttons) >= 4


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
    head = open_page("pages/head_explorer.py", {"stat": "llc", "layer": "0", "head": "1", "panel": "statistic"})
    assert not head.exception and head.selectbox(key="stat").value == "llc"
    table = open_page("pages/heads_table.py", {"stat": "llc", "step": str(int(df["step"].max()))})
    assert not table.exception and table.session_state["stat"] == "llc"
    traj = open_page("pages/trajectory_map.py")
    assert "refined LLC (SGLD; a subset of checkpoints)" in traj.selectbox(key="stat").options


def test_a_store_without_the_table_says_what_rerun_adds_it(app_env: Path) -> None:
    at = open_page(PAGE)
    assert not at.exception
    assert any("--lenses llc" in i.value for i in at.info)
    note = " ".join(i.value for i in at.info)
    assert f"--out {app_env.resolve()} --lenses llc" in note and "`headwatch plan " in note  # what it costs, for this store
    assert "removed" not in note  # a store of one's own: nothing of the shipped runs
    assert not at.get("plotly_chart") or all("llc_" not in e.proto.id for e in at.get("plotly_chart"))
    layers = open_page("pages/layer_view.py", {"stat": "llc"})
    assert not layers.exception and layers.selectbox(key="stat").value == "std"
    assert "refined LLC (SGLD; a subset of checkpoints)" not in layers.selectbox(key="stat").options


def test_the_heads_table_gives_each_estimates_spread_and_flag(llc_env: Path) -> None:
    df = llc_table(llc_env)
    steps = sorted(df["step"].unique().tolist())
    last = open_page("pages/heads_table.py", {"stat": "llc", "step": str(steps[-1]), "sort": "layer"})
    assert not last.exception
    table = last.dataframe[0].value
    own = df[(df["step"] == steps[-1]) & (df["layer"] >= 0)].sort_values(["layer", "head"])
    np.testing.assert_allclose(table.sort_values(["layer", "head"])["± chains"], own["llc_std"])
    layer, head, _ = SYNTHETIC_RISING
    flags = dict(zip(zip(table["layer"], table["head"], strict=True), table["flag"], strict=True))
    assert flags[(layer, head)] == "still rising"
    assert sum(f == "converged" for f in flags.values()) == len(flags) - 1
    first = open_page("pages/heads_table.py", {"stat": "llc", "step": str(steps[0])}).dataframe[0].value
    layer, head, _ = SYNTHETIC_NEGATIVE
    row = first[(first["layer"] == layer) & (first["head"] == head)].iloc[0]
    assert row["value"] < 0 and row["flag"] == "negative"  # issue 62: was "converged; negative"


def test_the_loss_overlays_the_heads_chart_and_the_stacked_charts_line_up(llc_env: Path) -> None:
    """Issue 25: the loss was drawn only on the whole-model chart below, whose x axis did not line up."""
    at = open_page(PAGE, {"loss": "1"})
    assert not at.exception and at.query_params["loss"] == "1"
    heads, model = chart(at, "llc_heads"), chart(at, "llc_model")
    on_right = [t for t in heads["data"] if t.get("yaxis") == "y2"]
    below = [t for t in model["data"] if t.get("yaxis") == "y2"]
    assert len(on_right) == 1 and len(below) == 1
    np.testing.assert_allclose(arr(on_right[0]["y"]), arr(below[0]["y"]))
    np.testing.assert_allclose(arr(on_right[0]["x"]), arr(below[0]["x"]))
    assert heads["layout"]["yaxis2"]["side"] == "right"
    # pixel-aligned: the same left and right margins, the same x range
    for side in ("l", "r"):
        assert heads["layout"]["margin"][side] == model["layout"]["margin"][side], side
    assert heads["layout"]["xaxis"]["range"] == model["layout"]["xaxis"]["range"]
    off = open_page(PAGE)
    assert not [t for t in chart(off, "llc_heads")["data"] if t.get("yaxis") == "y2"]
    assert chart(off, "llc_heads")["layout"]["margin"]["r"] == chart(off, "llc_model")["layout"]["margin"]["r"]


def test_the_settings_say_which_sampler_made_the_estimates(llc_env: Path) -> None:
    """The stand-in store's record predates the batched sampler (no ``implementation``): devinterp made it, version
    and all."""
    captions = " ".join(c.value for c in open_page(PAGE).caption)
    assert "devinterp 2.0.1 SGLD at 3 of the run's" in captions


@pytest.mark.parametrize("run", ["induction-d128", "induction-d64"])
def test_the_shipped_induction_runs_estimates_are_the_batched_samplers(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their meta.json says ``implementation: batched`` (and devinterp ``unknown``, written before the job left it
    out): the page names the batched sampler, and no devinterp version."""
    import json

    record = json.loads((SHIPPED_DATA / run / "meta.json").read_text())["llc"]
    assert record["implementation"] == "batched"
    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    at = open_page(PAGE, {"run": run})
    captions = " ".join(c.value for c in at.caption)
    assert "SGLD by the batched sampler" in captions and "devinterp unknown" not in captions
    assert not re.search(r"devinterp [0-9?]", captions)


def test_the_shipped_plain_text_runs_say_their_estimates_were_removed_and_what_a_rerun_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    for run in ("shakespeare-pythia-6x8", "shakespeare-pythia-6x8-seed2"):
        assert not (SHIPPED_DATA / run / "llc.parquet").exists()
        at = open_page(PAGE, {"run": run})
        note = " ".join(i.value for i in at.info)
        assert "2 chains x 8 draws were removed" in note and "docs/reference-run.md" in note
        # the exact command that prices the rerun, with the store's recorded source and evaluation length
        assert f"`headwatch plan runs/{run} --out data/{run} --lenses llc --eval-length 256`" in note
        assert "scripts/reference-run.sh" in note


@pytest.fixture(scope="module")
def multi_store(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llc-data") / "tiny-run"
    shutil.copytree(store_path, path)
    return add_synthetic_llc(path, data=("train", "text", "repeats"))


def test_the_overlay_of_distributions_is_the_stored_curves_and_their_ratio(multi_store: Path) -> None:
    """`views.llc.data.distribution_curves` and `distribution_ratios` against the table read with pandas."""
    from headwatch.analysis.store import open_store
    from headwatch.dashboard.views.llc import data

    store = open_store(multi_store)
    assert data.distributions(store) == ["train", "text", "repeats"]
    df = llc_table(multi_store)
    for layer, head in [(-1, -1), (1, 2)]:
        curves = data.distribution_curves(store, layer=layer, head=head)
        own = df[(df["layer"] == layer) & (df["head"] == head)]
        assert list(dict.fromkeys(curves["data"])) == ["train", "text", "repeats"]
        for name in ("train", "text", "repeats"):
            want = own[own["data"] == name].sort_values("step")
            got = curves[curves["data"] == name]
            np.testing.assert_array_equal(got["step"], want["step"])
            np.testing.assert_array_equal(got["llc"], want["llc"])
        ratios = data.distribution_ratios(curves, "text")
        text = own[own["data"] == "text"].set_index("step")["llc"]
        for r in ratios.itertuples():
            assert r.ratio == pytest.approx(own[(own["data"] == r.data) & (own["step"] == r.step)]["llc"].iloc[0] / text[r.step])
        assert set(ratios["data"]) == {"train", "repeats"}
        # the figures pass plotly's validation (they are built unvalidated)
        import plotly.graph_objects as go

        from headwatch.dashboard.data import step_axis
        from headwatch.dashboard.views.llc import figures

        axis = step_axis(store)
        go.Figure(figures.distribution_curves(axis, curves, target="x").to_dict())
        go.Figure(figures.distribution_ratios(axis, ratios, target="x", reference="text").to_dict())


def test_the_page_overlays_each_distribution_and_shows_the_chosen_one(
    multi_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_only(multi_store, tmp_path, monkeypatch)
    df = llc_table(multi_store)
    whole = df[df["layer"] == -1]
    at = open_page(PAGE)
    assert not at.exception and not at.error
    assert at.session_state["data"] == "train"  # the training distribution first: the weight-refined LLC
    np.testing.assert_allclose(
        arr(chart(at, "llc_model")["data"][0]["y"]), whole[whole["data"] == "train"].sort_values("step")["llc"]
    )
    overlay = chart(at, "llc_data")["data"]
    assert [t["name"] for t in overlay] == ["on train", "on text", "on repeats"]
    for trace in overlay:
        name = trace["name"].removeprefix("on ")
        np.testing.assert_allclose(arr(trace["y"]), whole[whole["data"] == name].sort_values("step")["llc"])
    ratio = chart(at, "llc_data_ratio")["data"]
    assert [t["name"] for t in ratio] == ["on text / on train", "on repeats / on train"]
    text, train = (whole[whole["data"] == n].sort_values("step")["llc"].to_numpy() for n in ("text", "train"))
    np.testing.assert_allclose(arr(ratio[0]["y"]), text / train)
    # another distribution for the page, another reference for the ratio: both in the URL
    other = open_page(PAGE, {"data": "repeats", "data_ref": "text", "data_head": "L1H2"})
    assert not other.exception
    np.testing.assert_allclose(
        arr(chart(other, "llc_model")["data"][0]["y"]), whole[whole["data"] == "repeats"].sort_values("step")["llc"]
    )
    assert [t["name"] for t in chart(other, "llc_data_ratio")["data"]] == ["on train / on text", "on repeats / on text"]
    assert "the loss taken on **repeats**" in " ".join(c.value for c in other.caption)


# a shipped store whose estimates were all taken on held-out text (the GPU-built induction-d512, made before the
# distributions were named); induction-d128 holds four distributions
TEXT_ONLY = "induction-d512"


def test_a_shipped_store_says_it_holds_text_only_and_how_to_add_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "data" not in pq.read_schema(SHIPPED_DATA / TEXT_ONLY / "llc.parquet").names  # text alone, unnamed
    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    at = open_page(PAGE, {"run": TEXT_ONLY})
    assert not at.exception and not at.error
    note = " ".join(i.value for i in at.info)
    assert "under one distribution only, **text**" in note
    assert "--lenses llc --llc-data train,repeats,code --eval-length 64`" in note and "headwatch plan" in note
    assert "the loss taken on **text** (held-out text:" in " ".join(c.value for c in at.caption)


def test_the_heads_table_offers_each_distribution_as_a_column(
    multi_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_only(multi_store, tmp_path, monkeypatch)
    df = llc_table(multi_store)
    last = int(df["step"].max())
    table = open_page("pages/heads_table.py", {"stat": "llc", "step": str(last), "sort": "layer"}).dataframe[0].value
    table = table.sort_values(["layer", "head"])
    rows = df[(df["step"] == last) & (df["layer"] >= 0)]
    for column, name in (("value", "train"), ("on text", "text"), ("on repeats", "repeats")):
        want = rows[rows["data"] == name].sort_values(["layer", "head"])["llc"]
        np.testing.assert_allclose(table[column], want)


def test_the_timelines_rllc_rises_name_their_distribution(multi_store: Path, llc_store: Path) -> None:
    """Each distribution's rises, from its own rows (read with pandas); the link opens the page on it."""
    from headwatch.analysis.findings.events import rllc_rises
    from headwatch.analysis.store import open_store

    df = llc_table(multi_store)
    events = rllc_rises(open_store(multi_store))
    named = {e.label.split(" on ")[1].split(" rises")[0] for e in events}
    assert named == {"train", "text", "repeats"}
    for event in events:
        name = dict(event.query)["data"]
        assert f"refined LLC on {name} rises" in event.label and f"the SGLD loss taken on {name}" in event.detail
        layer, head = (int(v) for v in str(dict(event.query)["trace"])[1:].split("H"))
        own = df[(df["data"] == name) & (df["layer"] == layer) & (df["head"] == head)].set_index("step")["llc"]
        steps = sorted(own.index)
        before = steps[steps.index(event.step) - 1]
        assert float(event.label.rsplit(" ", 1)[1]) == pytest.approx(own[event.step] - own[before], rel=1e-2)
    # a store with one distribution: named in the label, no choice in the link
    one = rllc_rises(open_store(llc_store))
    assert one and all("on text rises" in e.label and "data" not in dict(e.query) for e in one)


def test_the_heads_tables_rllc_column_names_its_distribution(
    multi_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value column is the training distribution's where the store holds it (the other columns name theirs), and
    the caption says so; a shipped store's is held-out text."""
    serve_only(multi_store, tmp_path, monkeypatch)
    at = open_page("pages/heads_table.py", {"stat": "llc"})
    caption = " ".join(c.value for c in at.caption)
    assert "Its values are the refined LLC on the training distribution; each 'on …' column" in caption


def test_a_shipped_stores_heads_table_says_its_rllc_is_on_held_out_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    shipped = open_page("pages/heads_table.py", {"run": TEXT_ONLY, "stat": "llc"})
    assert not shipped.exception
    assert "Its values are the refined LLC on held-out text." in " ".join(c.value for c in shipped.caption)


def test_the_shipped_induction_d128s_heads_table_holds_each_distributions_estimates(monkeypatch: pytest.MonkeyPatch) -> None:
    """induction-d128 holds the refined LLC under four distributions at every checkpoint: at its last step the Heads
    table's value is the estimate on the training distribution and each 'on …' column another's, as llc.parquet (read
    with pandas) holds them."""
    import pandas as pd

    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    df = pd.read_parquet(SHIPPED_DATA / "induction-d128" / "llc.parquet")
    assert set(df["data"]) == {"train", "text", "repeats", "code"}
    last = int(df["step"].max())
    at = open_page("pages/heads_table.py", {"run": "induction-d128", "stat": "llc", "step": str(last), "sort": "layer"})
    assert not at.exception and not at.error
    assert "Its values are the refined LLC on the training distribution" in " ".join(c.value for c in at.caption)
    table = at.dataframe[0].value.sort_values(["layer", "head"])
    rows = df[(df["step"] == last) & (df["layer"] >= 0)]
    for column, name in (("value", "train"), ("on text", "text"), ("on repeats", "repeats"), ("on code", "code")):
        want = rows[rows["data"] == name].sort_values(["layer", "head"])["llc"]
        np.testing.assert_allclose(table[column], want, err_msg=column)


def test_the_trajectory_maps_rllc_clusters_name_their_distribution(
    multi_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Coloured by the refined-LLC clusters, the legend names the distribution clustered: train where held."""
    serve_only(multi_store, tmp_path, monkeypatch)
    at = open_page("pages/trajectory_map.py", {"colour": "llc_cluster"})
    assert not at.exception
    titles = {str(((t.get("legendgrouptitle") or {}).get("text")) or "") for t in chart(at, "trajectory_map")["data"]} | {
        str((((chart(at, "trajectory_map")["layout"].get("legend") or {}).get("title") or {}).get("text")) or "")
    }
    assert "refined-LLC cluster (on the training distribution)" in titles, titles
