"""The forward-lens page and the forward statistics in the other views, through AppTest and one real browser.

The store is the session's synthetic store copied and given stand-in forward tables
(`benchmarks.synthetic_store.add_synthetic_forward`); the figures' numbers are checked
against the store's own tables read with pyarrow, not through the page's code.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic_store import add_synthetic_forward
from tests.app.conftest import arr, chart, open_page, serve_only

LENSES = "pages/forward_lenses.py"
TABS = {  # the page's tabs (URL panel, the first the default) and the charts each draws
    "layers": ["bands_entropy", "bands_span"],
    "divergence": ["divergence"],
    "types": ["type_prev_token", "type_induction", "type_sink", "type_current_token"],
    "losses": ["probe_loss"],
}


@pytest.fixture(scope="module")
def forward_store(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("forward") / "tiny-run"
    shutil.copytree(store_path, path)
    return add_synthetic_forward(path)


@pytest.fixture()
def forward_env(forward_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return serve_only(forward_store, tmp_path, monkeypatch)


def table(store: Path, name: str):
    return pq.read_table(store / name).to_pandas()


def per_head(store: Path, column: str) -> np.ndarray:
    df = table(store, "attention.parquet")
    steps = sorted(df["step"].unique())
    n_layers, n_heads = df["layer"].max() + 1, df["head"].max() + 1
    out = np.full((len(steps), n_layers, n_heads), np.nan)
    for row in df.itertuples():
        out[steps.index(row.step), row.layer, row.head] = getattr(row, column)
    return out


def test_the_page_shows_bands_divergence_and_head_types(forward_env: Path) -> None:
    at = open_page(LENSES)  # the layers' tab, the default
    assert not at.error
    entropy = per_head(forward_env, "entropy")
    bands = chart(at, "bands_entropy")["data"]
    means = [t for t in bands if t.get("name", "").startswith("L")]
    assert len(means) == entropy.shape[1]
    for layer, trace in enumerate(means):
        np.testing.assert_allclose(arr(trace["y"]), entropy[:, layer].mean(axis=1), rtol=1e-6)  # sent as float32
    lo = arr(bands[1]["y"])  # layer 0's band, lower edge
    np.testing.assert_allclose(lo, entropy[:, 0].min(axis=1), rtol=1e-6)
    jsd = table(forward_env, "layer_divergence.parquet")
    last = jsd[jsd["step"] == jsd["step"].max()].sort_values(["layer_a", "layer_b"])
    at = open_page(LENSES, {"panel": "divergence"})
    assert not at.error
    fig = chart(at, "divergence")
    n = int(np.sqrt(len(last)))
    np.testing.assert_allclose(np.asarray(arr(fig["data"][0]["z"])).reshape(n, n), last["jsd"].to_numpy().reshape(n, n))
    assert len(fig["frames"]) == len(jsd["step"].unique())
    prev = per_head(forward_env, "prev_token")
    at = open_page(LENSES, {"panel": "types"})
    assert not at.error
    z = np.asarray(arr(chart(at, "type_prev_token")["data"][0]["z"]))
    np.testing.assert_allclose(z.reshape(prev.shape[1] * prev.shape[2], -1), prev.reshape(len(prev), -1).T)
    assert chart(at, "type_induction") and chart(at, "type_sink")
    losses = table(forward_env, "eval_loss.parquet").sort_values("step")
    at = open_page(LENSES, {"panel": "losses"})
    assert not at.error
    fig = chart(at, "probe_loss")
    by_name = {t["name"]: arr(t["y"]) for t in fig["data"]}
    np.testing.assert_allclose(by_name["loss on the probe's second copy, nats per token"], losses["probe_copy_loss"])
    np.testing.assert_allclose(by_name["loss on the evaluation text, nats per token"], losses["loss"])
    assert fig["layout"]["yaxis"]["title"]["text"] == "loss (nats per token)"


def test_the_step_and_loss_overlay_are_in_the_url_and_a_bad_step_falls_back(forward_env: Path) -> None:
    steps = sorted(table(forward_env, "eval_loss.parquet")["step"])
    at = open_page(LENSES, {"step": str(steps[2]), "loss": "1", "panel": "divergence"})
    layout = chart(at, "divergence")["layout"]
    assert "sliders" not in layout  # one step control: the page's, in the URL
    assert str(layout["title"]["text"]).endswith(f"step {steps[2]:,}") or f"step {steps[2]:,}<" in str(layout["title"]["text"])
    assert at.query_params["step"] == str(steps[2]) and at.query_params["loss"] == "1"
    at = open_page(LENSES, {"step": str(steps[2]), "loss": "1"})  # the layers' tab, the default
    overlay = [t for t in chart(at, "bands_span")["data"] if t.get("yaxis") == "y99"]
    loss = table(forward_env, "eval_loss.parquet").sort_values("step")["loss"].to_numpy()
    assert len(overlay) == 1 and np.allclose(arr(overlay[0]["y"]), loss)
    assert at.query_params["step"] == str(steps[2]) and at.query_params["loss"] == "1"
    bad = open_page(LENSES, {"step": "999999999", "panel": "divergence"})  # not a checkpoint: the default view, no error
    assert not bad.error and not bad.exception and bad.query_params.get("step") != "999999999"  # the URL is repaired
    assert f"step {steps[-1]:,}" in str(chart(bad, "divergence")["layout"]["title"]["text"])


def test_forward_statistics_are_offered_in_the_other_views(forward_env: Path) -> None:
    entropy = per_head(forward_env, "induction")
    at = open_page("pages/layer_view.py", {"stat": "induction", "layer": "1"})
    first = chart(at, "layer_lines")["data"][0]
    np.testing.assert_allclose(arr(first["y"]), entropy[:, 1, 0])
    arch = open_page("pages/architecture_heatmaps.py", {"stat": "prev_token"})
    prev = per_head(forward_env, "prev_token")
    np.testing.assert_allclose(
        np.asarray(arr(chart(arch, "architecture")["data"][0]["z"])).reshape(len(prev), -1), prev.reshape(len(prev), -1)
    )
    anim = open_page("pages/animated_heatmap.py", {"stat": "span"})
    assert not anim.exception and anim.selectbox(key="stat").value == "span"
    head = open_page("pages/head_explorer.py", {"stat": "sink", "layer": "2", "head": "1", "panel": "statistic"})
    assert head.selectbox(key="stat").value == "sink"
    traj = open_page("pages/trajectory_map.py")
    assert "attention entropy H (forward)" in traj.selectbox(key="stat").options


def test_the_loss_overlays_the_head_explorers_and_layer_views_time_axes(forward_env: Path) -> None:
    loss = table(forward_env, "eval_loss.parquet").sort_values("step")["loss"].to_numpy()
    for panel, key in (
        ("leading", "leading"),
        ("statistic", "head_in_layer"),
        ("weights", "density_map"),
        ("spectrum", "spectrum_map"),
    ):
        at = open_page("pages/head_explorer.py", {"loss": "1", "layer": "1", "head": "2", "panel": panel})  # the chart's tab
        overlay = [t for t in chart(at, key)["data"] if t.get("yaxis") == "y99"]
        assert len(overlay) == 1 and np.allclose(arr(overlay[0]["y"]), loss), key
    layers = open_page("pages/layer_view.py", {"loss": "1"})
    assert [t for t in chart(layers, "layer_lines")["data"] if t.get("yaxis") == "y99"]
    grid = chart(layers, "layer_grid")
    panels = [k for k in grid["layout"] if k.startswith("xaxis")]
    on_grid = [t for t in grid["data"] if str(t.get("yaxis", "")).startswith("y1") and len(str(t.get("yaxis"))) >= 4]
    assert len(on_grid) == len(panels)  # one loss curve per panel, each on its panel's own right axis
    assert all(np.allclose(arr(t["y"]), loss) for t in on_grid)
    off = open_page("pages/layer_view.py", {"loss": "0"})
    assert not [t for t in chart(off, "layer_lines")["data"] if t.get("yaxis") == "y99"]


def test_a_store_without_the_lens_says_what_rerun_adds_it(app_env: Path) -> None:
    at = open_page(LENSES, {"step": "0"})
    assert any("--lenses attention" in i.value for i in at.info)
    assert not at.get("plotly_chart") or all("divergence" not in e.proto.id for e in at.get("plotly_chart"))
    # a link to a forward statistic on such a store opens the default statistic, without an error
    layers = open_page("pages/layer_view.py", {"stat": "entropy"})
    assert layers.selectbox(key="stat").value == "std" and not layers.exception
    assert not any("(forward)" in o for o in layers.selectbox(key="stat").options)


@pytest.mark.browser
def test_the_page_opens_by_link_in_a_browser(forward_store: Path, tmp_path_factory: pytest.TempPathFactory, chromium) -> None:
    from tests.app.test_browser import _errors, _serve

    steps = sorted(table(forward_store, "eval_loss.parquet")["step"])
    server = _serve(forward_store, tmp_path_factory)
    base = next(server)
    try:
        page = chromium.new_page(viewport={"width": 1400, "height": 2400})
        try:
            page.goto(f"{base}/lenses?step={steps[3]}&loss=1&panel=divergence")  # the divergence tab
            page.wait_for_function(
                "document.querySelectorAll('[data-testid=\"stPlotlyChart\"] .main-svg').length >= 6", timeout=90_000
            )
            page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=90_000)
            assert page.locator("h1").first.inner_text().strip() == "Forward lenses"
            assert not _errors(page)
            assert f"step={steps[3]}" in page.url and "loss=1" in page.url
            assert page.get_by_text(f"step {steps[3]:,}").count() >= 1  # the divergence heatmap opens at that step
        finally:
            page.close()
    finally:
        server.close()


def test_a_store_from_before_the_probe_loss_says_how_to_add_it(
    forward_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old" / forward_store.name
    shutil.copytree(forward_store, old)
    losses = pq.read_table(old / "eval_loss.parquet")
    pq.write_table(losses.drop_columns(["probe_copy_loss"]), old / "eval_loss.parquet")  # as written before it existed
    attention = pq.read_table(old / "attention.parquet")
    pq.write_table(attention.drop_columns(["current_token"]), old / "attention.parquet")  # so is the current-token score
    (tmp_path / "env").mkdir()
    serve_only(old, tmp_path / "env", monkeypatch)
    at = open_page(LENSES, {"panel": "types"})
    assert not at.exception and chart(at, "type_induction")
    assert all(not e.proto.id.endswith("type_current_token") for e in at.get("plotly_chart"))
    assert any("current-token score" in i.value and "--lenses attention" in i.value for i in at.info)
    at = open_page(LENSES, {"panel": "losses"})  # the tab of the probe's loss
    assert not at.exception
    assert any("probe_copy_loss" in i.value and "--lenses attention" in i.value for i in at.info)
    assert all(not e.proto.id.endswith("probe_loss") for e in at.get("plotly_chart"))


def test_every_forward_chart_has_its_data_as_csv(forward_env: Path) -> None:
    drawn = 0
    for panel, keys in TABS.items():  # one tab at a time: its charts and the sidebar loss curve
        at = open_page(LENSES, {"panel": panel})
        charts = at.get("plotly_chart")
        buttons = [b for b in at.get("download_button") if "CSV" in b.proto.label]
        assert len(charts) == len(keys) + 1 and len(buttons) == len(charts), panel
        assert sorted(e.proto.id.rsplit("-", 1)[-1] for e in charts) == sorted([*keys, "loss_curve"]), panel
        drawn += len(charts) - 1
    assert drawn == 8  # eight panels in all


def test_the_heads_page_lists_a_forward_statistic_once_per_head(forward_env: Path) -> None:
    at = open_page(
        "pages/heads_table.py", {"stat": "induction", "step": str(sorted(table(forward_env, "attention.parquet")["step"])[-1])}
    )
    assert not at.exception and at.session_state["stat"] == "induction"
    shown = next(d.value for d in at.dataframe if d.proto.id.endswith("-heads_table"))
    rows = table(forward_env, "attention.parquet")
    last = rows[rows["step"] == rows["step"].max()]
    assert len(shown) == len(last)  # one row per head, not one per matrix kind
    merged = shown.merge(last, on=["layer", "head"])
    assert np.allclose(merged["value"], merged["induction"])


def test_the_heads_page_does_not_offer_forward_statistics_without_the_lens(app_env: Path) -> None:
    at = open_page("pages/heads_table.py", {"stat": "induction"})
    assert not at.exception and at.session_state["stat"] != "induction"
    from headwatch.dashboard.labels import STATS

    offered = at.selectbox(key="stat").options
    assert STATS["stable_rank"].label in offered and STATS["induction"].label not in offered
