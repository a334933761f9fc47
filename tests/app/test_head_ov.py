"""The head explorer with W_OV chosen says so everywhere and draws W_OV's own random-head reference (issue 25).

Through AppTest on the test store (which has W_QK and W_OV rows with their own dynamics) and, for the bands,
on the shipped run (whose W_O, W_V start at another scale than W_Q, W_K: sigma0 0.0287 against 0.0396). Before: the P(w)
axes read "w: entry of W_QK (raw units)", the grey bands of sigma and D_KL (and of the head-against-layer
panel) were W_QK's reference, and no chart title named the matrix, so an exported OV figure could not be
told from a QK one. The expected bands are computed here from `analysis.rmt.references` with the init
scale of the OV heads at step 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from headwatch.analysis.store import open_store
from tests.app.conftest import SHIPPED, arr, chart, open_page, serve_only

HEAD = "pages/head_explorer.py"
CHARTS = {  # the head explorer's tab (URL panel) -> its charts of the chosen matrix
    "weights": ("density_map", "density_slices"),
    "spectrum": ("spectrum_map", "spectrum_slices"),
    "leading": ("leading",),
    "statistic": ("head_in_layer",),
}


def _bands(fig: dict, yref: str) -> list[tuple[float, float]]:
    return [
        (s["y0"], s["y1"])
        for s in fig["layout"].get("shapes", [])
        if s.get("type") == "rect" and s.get("yref") == yref and s.get("xref", "").endswith("domain")
    ]


def _reference(store, matrix: str):
    from headwatch.analysis.rmt.references import gaussian_references, init_sigma

    return gaussian_references(
        store.d_model, store.d_head, init_sigma(store.array("std", matrix=matrix)[0].ravel(), store.d_head)
    )[0]


@pytest.mark.parametrize("matrix, name, other", [("ov", "W_OV", "W_QK"), ("qk", "W_QK", "W_OV")])
def test_every_chart_names_the_matrix_and_the_axes_follow_it(app_env, matrix, name, other):
    for panel, keys in CHARTS.items():  # each tab with its charts
        query = {"matrix": matrix, "layer": "1", "head": "2", "stat": "std", "both": "0", "panel": panel}  # the matrix alone
        at = open_page(HEAD, query)
        for key in keys:
            title = chart(at, key)["layout"]["title"]["text"]
            assert name in title and other not in title, (key, title)
        if panel == "weights":
            assert name in chart(at, "density_map")["layout"]["yaxis"]["title"]["text"]
            w_title = chart(at, "density_slices")["layout"]["xaxis"]["title"]["text"]
            assert w_title.replace("<br>", " ") == f"w: entry of {name} (raw units)"  # on two lines in the narrow chart
        # no caption speaks of the other matrix, but the panel that draws both (test_one_heads_qk_and_ov_share_one_chart)
        caption = " ".join(c.value for c in at.caption if "for both of its matrices" not in c.value)
        assert other not in caption.replace(f"{other} = ", ""), (panel, caption)


def test_the_grey_bands_are_the_ov_reference(tmp_path, monkeypatch):
    store = open_store(serve_only(SHIPPED, tmp_path, monkeypatch))
    ref_ov, ref_qk = _reference(store, "ov"), _reference(store, "qk")
    assert abs(ref_ov["std"].mean / ref_qk["std"].mean - 1) > 0.05  # the two references differ in this store
    query = {"matrix": "ov", "layer": "1", "head": "2", "stat": "std"}
    at = open_page(HEAD, query)  # the weights' tab, the default
    fig = chart(at, "density_slices")
    ((lo, hi),) = _bands(fig, "y2")  # sigma(t)
    assert (lo, hi) == pytest.approx((ref_ov["std"].lo, ref_ov["std"].hi))
    ((lo, hi),) = _bands(fig, "y3")  # D_KL(t): scale-free, the same draws
    assert (lo, hi) == pytest.approx((ref_ov["kl_gauss"].lo, ref_ov["kl_gauss"].hi))
    caption = " ".join(c.value for c in at.caption)
    assert "W_O,h, W_V,h" in caption, caption  # says what the reference is
    at = open_page(HEAD, dict(query, panel="statistic"))  # the statistic's tab
    ((lo, hi),) = _bands(chart(at, "head_in_layer"), "y")
    assert (lo, hi) == pytest.approx((ref_ov["std"].lo, ref_ov["std"].hi))
    caption = " ".join(c.value for c in at.caption)
    assert "W_O,h, W_V,h" in caption, caption  # says what the reference is


def test_one_heads_qk_and_ov_share_one_chart(app_env):
    """Issue 25: the matrix switched the whole page; both matrices of the chosen head now share one pair of axes."""
    at = open_page("pages/head_explorer.py", {"layer": "1", "head": "2", "stat": "std", "panel": "statistic"})
    fig = chart(at, "both_matrices")
    store = open_store(app_env)
    assert [t["name"] for t in fig["data"]] == ["W_QK", "W_OV"]
    for trace, matrix in zip(fig["data"], ("qk", "ov"), strict=True):
        want = store.array("std", matrix=matrix)[:, 1, 2]
        assert np.allclose(arr(trace["y"]), want, equal_nan=True)
        assert trace.get("xaxis", "x") == "x" and trace.get("yaxis", "y") == "y"  # shared axes
    lo, hi = fig["layout"]["yaxis"]["range"]
    both = np.r_[store.array("std", matrix="qk")[:, 1, 2], store.array("std", matrix="ov")[:, 1, 2]]
    assert lo <= np.nanmin(both) and np.nanmax(both) <= hi
