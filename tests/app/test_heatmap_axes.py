"""The heatmaps' head axis names heads, not only layers, so a cell reads without hovering.

Before, the head axis of the Architecture heatmap and of the Forward lenses' head-type heatmaps had one
tick per layer (``L0``, ``L1``, ...): a cell's head index could only be found by hovering.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.conftest import DIMS, chart, open_page
from tests.app.test_forward_page import LENSES, forward_env, forward_store  # noqa: F401 (fixtures)

ARCH = "pages/architecture_heatmaps.py"
EVERY_HEAD = [f"L{layer} H{head}" for layer in range(DIMS["n_layers"]) for head in range(DIMS["n_heads"])]


def test_the_architecture_heatmap_labels_every_head(app_env: Path) -> None:
    axis = chart(open_page(ARCH), "architecture")["layout"]["xaxis"]
    assert axis["tickvals"] == EVERY_HEAD and axis["ticktext"] == EVERY_HEAD


def test_the_head_type_heatmaps_label_every_head(forward_env: Path) -> None:  # noqa: F811
    at = open_page(LENSES, {"panel": "types"})  # the head types' tab
    for name in ("prev_token", "induction", "sink"):
        axis = chart(at, f"type_{name}")["layout"]["yaxis"]
        assert axis["tickvals"] == EVERY_HEAD and axis["ticktext"] == EVERY_HEAD


@pytest.mark.parametrize(("n_layers", "n_heads"), [(6, 8), (12, 12), (36, 40), (80, 64)])
def test_a_large_model_labels_a_subset_of_heads_that_name_their_head(n_layers: int, n_heads: int) -> None:
    from headwatch.dashboard.figures.heads_axis import head_ticks

    vals, text = head_ticks(n_layers, n_heads, max_labels=64)
    assert 0 < len(vals) <= 64 and vals == text
    every = {f"L{layer} H{head}" for layer in range(n_layers) for head in range(n_heads)}
    assert set(vals) <= every
    if n_layers * n_heads <= 64:
        assert len(vals) == n_layers * n_heads
    else:  # evenly spread: each labelled layer shows its head 0
        assert "L0 H0" in vals


# --- the time axis: pages whose linear axis squeezes early training open on a log one ---


def test_the_heatmaps_open_on_a_log_time_axis_and_a_link_keeps_linear(app_env: Path) -> None:
    at = open_page(ARCH)
    assert at.query_params["xscale"] == "log"
    assert chart(at, "architecture")["layout"]["yaxis"]["type"] == "log"
    linear = open_page(ARCH, {"xscale": "linear"})
    assert chart(linear, "architecture")["layout"]["yaxis"]["type"] == "linear"
    assert open_page("pages/layer_view.py").query_params["xscale"] == "index"  # one unit per checkpoint


def test_the_head_type_heatmaps_open_on_a_log_time_axis(forward_env: Path) -> None:  # noqa: F811
    at = open_page(LENSES, {"panel": "types"})  # the head types' tab
    assert at.query_params["xscale"] == "log"
    assert chart(at, "type_induction")["layout"]["xaxis"]["type"] == "log"


def test_each_page_keeps_its_own_time_scale(app_env: Path) -> None:
    """Through the sidebar's page links (which open a page without the previous page's query string)."""
    at = open_page(ARCH)
    at.query_params.clear()
    at.switch_page("pages/layer_view.py").run()
    assert at.query_params["xscale"] == "index"
    at.query_params.clear()
    at.switch_page(ARCH).run()
    assert at.query_params["xscale"] == "log"
