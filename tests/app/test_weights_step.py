"""The Weight matrices page shows one step everywhere, and the tail exponent alpha over training (issue 25).

Through AppTest on the test store given synthetic layer matrices (real SVDs of weights that grow spikes).
Before: the caption's alpha and spike count were always the last checkpoint's while the chart opened at
another step; alpha was drawn nowhere and the page did not say how it is fitted; the histogram carried
Plotly's own step slider beside the page's, and only the page's reached the link, the caption and the
depth panel. Now the page's step control is the only one (Plotly's slider is gone, as on the Animation
page): it sets the histogram's frame, the caption and the depth panel. Expected numbers come from the
store's layers.parquet read here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.synthetic_store import add_synthetic_layer_matrices
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.layers import LAYERS
from tests.app.conftest import arr, chart, open_page, serve_only

PAGE = "pages/weight_matrices.py"


@pytest.fixture(scope="module")
def layered_store(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layered-step") / "tiny-run"
    shutil.copytree(store_path, path)
    return add_synthetic_layer_matrices(path)


@pytest.fixture()
def layered_env(layered_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return serve_only(layered_store, tmp_path, monkeypatch)


def _caption(at) -> str:
    return " ".join(c.value for c in at.caption)


def test_the_caption_gives_alpha_and_spikes_at_the_step_shown(layered_env):
    table = open_store(layered_env).frame(LAYERS)
    steps = sorted(table["step"].unique().tolist())
    rows = table[(table.role == "mlp_in") & (table.layer == 1)].set_index("step")
    at = open_page(PAGE, {"role": "mlp_in", "layer": "1", "step": str(steps[2])})
    want = rows.loc[steps[2]]
    assert (
        int(want["mp_spikes"]) != int(rows.loc[steps[-1]]["mp_spikes"])
        or f"{want['alpha']:.2f}" != f"{rows.loc[steps[-1]]['alpha']:.2f}"
    )  # the two steps read differently
    text = _caption(at)
    assert f"At step {steps[2]:,}: {int(want['mp_spikes'])} values above" in text, text
    assert f"alpha = {want['alpha']:.2f}" in text, text
    assert f"At step {steps[-1]:,}:" not in text


def test_the_page_step_is_the_only_step_control(layered_env):
    steps = sorted(open_store(layered_env).frame(LAYERS)["step"].unique().tolist())
    at = open_page(PAGE, {"role": "mlp_in", "layer": "1", "step": str(steps[3])})
    anim = chart(at, "sv_animation")
    assert "sliders" not in anim["layout"] or not anim["layout"]["sliders"]  # no second step control
    assert anim["layout"]["title"]["text"].endswith(f"step {steps[3]:,}")
    assert f"step {steps[3]:,}" in chart(at, "sv_depth")["layout"]["title"]["text"]
    at.select_slider(key="step").set_value(steps[5]).run()
    assert chart(at, "sv_animation")["layout"]["title"]["text"].endswith(f"step {steps[5]:,}")
    assert f"step {steps[5]:,}" in chart(at, "sv_depth")["layout"]["title"]["text"]
    assert f"At step {steps[5]:,}:" in _caption(at) and at.query_params["step"] == str(steps[5])


def test_alpha_over_training_per_layer_and_how_it_is_fitted(layered_env):
    table = open_store(layered_env).frame(LAYERS)
    at = open_page(PAGE, {"role": "mlp_out"})
    fig = chart(at, "alpha_lines")
    lines = [t for t in fig["data"] if str(t.get("name", "")).startswith("layer ")]
    layers = sorted(table["layer"].unique().tolist())
    assert [t["name"] for t in lines] == [f"layer {i}" for i in layers]
    for i, t in zip(layers, lines, strict=True):
        want = table[(table.role == "mlp_out") & (table.layer == i)].sort_values("step")["alpha"].to_numpy()
        np.testing.assert_allclose(arr(t["y"]), want)
    assert "α" in fig["layout"]["yaxis"]["title"]["text"] and "mlp_out" in fig["layout"]["title"]["text"]
    text = _caption(at)
    assert "maximum-likelihood" in text and "Kolmogorov-Smirnov" in text and "x_min" in text, text
