"""Exports (dashboard/export.py) and the small display helpers of issue 17, against the store's own tables."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from headwatch.analysis.store import open_store
from headwatch.dashboard import export
from headwatch.dashboard.data import step_axis
from headwatch.dashboard.figures.common import log_ticks
from headwatch.dashboard.figures.loss import loss_curve
from headwatch.dashboard.figures.points import picked_step
from headwatch.dashboard.labels import STATS
from headwatch.dashboard.views.architecture import figures as arch
from headwatch.dashboard.views.trajectories.data.maps import SPARK_CHARS, sparkline


@pytest.fixture(scope="module")
def store(store_path):
    return open_store(store_path)


def test_tidy_csv_has_one_row_per_point_equal_to_the_store(store, store_path):
    values = store.array("kl_gauss")
    frame = export.tidy(values, store.steps, run="tiny-run", statistic="kl_gauss", layers=[1, 3])
    back = pd.read_csv(io.BytesIO(export.to_csv(frame)))
    assert list(back.columns) == export.TIDY_COLUMNS
    assert len(back) == len(store.steps) * 2 * store.n_heads
    heads = pd.read_parquet(store_path / "heads.parquet")  # the store's table itself, not the reader's arrays
    heads = heads[heads["step"].isin(store.steps) & heads["layer"].isin([1, 3])]
    merged = back.merge(heads[["step", "layer", "head", "matrix", "kl_gauss"]], on=["step", "layer", "head", "matrix"])
    assert len(merged) == len(back)
    assert (merged["value"] == merged["kl_gauss"]).all()  # exact: written with 17 significant digits
    assert set(back["run"]) == {"tiny-run"} and set(back["statistic"]) == {"kl_gauss"} and back["k"].isna().all()


def test_chart_config_and_title_name_the_run_head_and_statistic():
    cfg = export.chart_config(export.safe_name("my run", "L4H5", "stable_rank"), "svg")
    assert cfg["toImageButtonOptions"]["filename"] == "my-run_L4H5_stable_rank"
    assert cfg["toImageButtonOptions"]["format"] == "svg"
    assert cfg["displaylogo"] is False
    assert export.chart_config("x", "bogus")["toImageButtonOptions"]["format"] == "png"
    fig = export.titled(go.Figure(layout=dict(margin=dict(t=36))), "run · layer 4, head 5 · r_s")
    assert fig.layout.title.text == "run · layer 4, head 5 · r_s" and fig.layout.margin.t > 36


def test_a_long_title_is_broken_into_lines_that_fit_the_chart_and_keeps_its_words():
    """The Timeline's title (117 characters) ran past the 720 px export and the chart's right edge; broken at
    spaces, no line is longer than `TITLE_CHARS`, the words are the same in the same order, a step and its number and
    a tag stay on one line, and the margin grows by a line."""
    title = "shakespeare-pythia-6x8 · layer 1, head 5"
    own = (
        "Loss over training, the run's stages (every curve's boundaries merged) shaded, and the run's events at "
        "step 1,400 <b>now</b>"
    )
    fig = export.titled(go.Figure(layout=dict(title=dict(text=own), margin=dict(t=36))), title)
    text = fig.layout.title.text
    lines = text.split("<br>")
    assert len(lines) >= 2 and all(len(line) <= export.TITLE_CHARS for line in lines), lines
    assert " ".join(lines).split() == f"{title} · {own}".split()
    assert any("step 1,400" in line for line in lines) and any("<b>now</b>" in line for line in lines)
    short = export.titled(go.Figure(layout=dict(margin=dict(t=36))), title)
    assert fig.layout.margin.t - short.layout.margin.t == 18 * (len(lines) - 1)


def test_animation_gif_has_a_frame_per_checkpoint_coloured_by_value(store):
    from PIL import Image

    values = store.array("std")
    steps = [int(s) for s in store.steps]
    lo, hi = float(values.min()), float(values.max())
    data = export.animation_gif(values, steps, title="tiny · σ", zmin=lo, zmax=hi, cell=10)
    img = Image.open(io.BytesIO(data))
    assert img.format == "GIF" and img.n_frames == len(steps)
    lut = export._lut(arch.style.HEATMAP_SCALE)
    for frame_i in (0, len(steps) - 1):
        img.seek(frame_i)
        rgb = np.asarray(img.convert("RGB"))
        for layer, head in ((0, 0), (3, 2)):
            px = rgb[28 + layer * 10 + 5, head * 10 + 5].astype(int)  # the middle of the cell, under the title band
            want = lut[round((values[frame_i, layer, head] - lo) / (hi - lo) * 255)].astype(int)
            assert np.abs(px - want).max() <= 12  # the GIF palette quantises a little


def test_sparkline_draws_the_trajectory_from_its_minimum_to_its_maximum():
    line = sparkline(np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]))
    assert line == f"0 {SPARK_CHARS} 7"
    assert len(sparkline(np.arange(100.0), width=20).split()[1]) == 20
    assert sparkline(np.array([np.nan, np.nan])) == "(no finite values)"


def test_log_ticks_are_labelled_in_full():
    ticks = log_ticks((np.log10(0.08), np.log10(3.0)))
    assert ticks["tickvals"] == pytest.approx([0.1, 0.2, 0.5, 1.0, 2.0])
    assert ticks["ticktext"] == ["0.1", "0.2", "0.5", "1", "2"]


def test_loss_curve_follows_the_log_time_axis():
    steps = np.array([0.0, 1, 2, 4, 1000])
    fig = loss_curve(steps, np.linspace(5, 2, 5), np.linspace(5, 2, 5), log_x=True)
    assert fig.layout.xaxis.type == "log" and list(fig.data[0].x) == [1, 2, 3, 5, 1001]
    assert list(fig.data[0].customdata) == [0, 1, 2, 4, 1000]  # hover still says the step
    assert loss_curve(steps, steps, steps).layout.xaxis.type in (None, "-", "linear")


def test_heatmap_cells_carry_layer_head_step_and_value(store):
    values = store.array("std")
    fig = arch.architecture_heatmap(step_axis(store), values, stat=STATS["std"])
    cells = fig.data[1]
    custom = np.asarray(cells.customdata)
    s, n_layers, n_heads = values.shape
    assert custom.shape == (s * n_layers * n_heads, 4)
    np.testing.assert_allclose(custom[:, 3], values.reshape(-1), rtol=1e-6)
    np.testing.assert_array_equal(custom[:, 2], np.repeat(store.steps, n_layers * n_heads))
    np.testing.assert_array_equal(np.asarray(cells.x), np.tile(np.arange(n_layers * n_heads), s))  # column i at i
    assert cells.xaxis == "x2" and fig.layout.xaxis2.overlaying == "x" and fig.layout.xaxis2.matches == "x"
    assert fig.layout.hoverdistance == -1
    event = {"selection": {"points": [{"customdata": custom[9].tolist()}]}}
    assert picked_step(event, store.steps.tolist()) == int(store.steps[0])


def test_streamlits_developer_items_are_hidden_in_the_served_config():
    import tomllib

    from tests.app.conftest import ROOT

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "viewer"
    assert "COPY --chown=user .streamlit ./.streamlit" in (ROOT / "Dockerfile").read_text()  # the image uses it


# --- the camera icon's format: chosen above the page's first chart, in the link, fonts readable on paper ---


def test_the_exported_figure_is_drawn_small_enough_that_its_fonts_read_on_paper():
    """At 1,600 px wide, 12-13 px ticks were 1/133 to 1/123 of the width (4 pt across a 6.5 in page); now at
    least 1/62 (8 pt)."""
    from headwatch.dashboard import style

    for height in (None, 260, 640):
        opts = export.chart_config("x", "png", height=height)["toImageButtonOptions"]
        assert 12 / opts["width"] >= 1 / 62 and export.TITLE_SIZE / opts["width"] >= 1 / 50
        assert opts["height"] == (height or style.HEIGHT)  # the chart's own proportions
        assert opts["width"] * opts["scale"] >= 2800  # a PNG sharp at print resolution (300 dpi at 9 in)
    assert export.chart_config("x", "svg")["toImageButtonOptions"]["scale"] == 1


def _camera(at, key: str) -> dict:
    """The camera button's options of the chart ``key`` (its Plotly config, beside the figure)."""
    import json

    el = next(e for e in at.get("plotly_chart") if e.proto.id.endswith(f"-{key}"))
    return json.loads(el.proto.config)["toImageButtonOptions"]


def test_the_image_format_is_a_url_parameter_above_the_first_chart(app_env):
    from tests.app.conftest import open_page, view_link

    at = open_page("pages/layer_view.py", {"img": "svg"})
    assert at.radio(key="img").value == "svg" and at.query_params["img"] == "svg"
    assert _camera(at, "layer_lines")["format"] == "svg"
    assert "img=svg" in view_link(at)  # the sidebar's "Link to this view"
    at.radio(key="img").set_value("png").run()
    assert at.query_params["img"] == "png"
    assert _camera(at, "layer_lines")["format"] == "png"


def test_a_bad_image_format_in_a_link_gives_a_notice(app_env):
    from tests.app.conftest import notices, open_page

    at = open_page("pages/layer_view.py", {"img": "jpeg" * 40})
    assert not at.exception
    text = " ".join(notices(at))
    assert "img=jpeg" in text and "allowed: png, svg" in text and len(text) < 400
    assert at.query_params["img"] == "png"
    assert _camera(at, "layer_lines")["format"] == "png"
