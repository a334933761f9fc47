"""The random-matrix lab page: renders, follows its widgets and URL, refuses bad parameters visibly."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import arr, chart, notices, open_page

PAGE = "pages/rmt_lab.py"


def nonzero_singular_values(at) -> int:
    sv = arr(chart(at, "rmt_sv")["data"][0]["y"])
    return int((sv > 1e-8 * sv.max()).sum())


def test_lab_renders_three_panels_from_the_url(app_env) -> None:
    at = open_page(PAGE, {"dmodel": "256", "nheads": "4"})
    assert not notices(at)
    assert nonzero_singular_values(at) == 64  # d_head = 256 / 4: the cut
    law = chart(at, "rmt_law")
    assert law["data"][1]["name"].startswith("MP_c ⊠ MP_c, c = 0.25")
    entries = chart(at, "rmt_entries")
    centres, density = arr(entries["data"][0]["x"]), arr(entries["data"][0]["y"])
    assert abs(np.sum(density) * (centres[1] - centres[0]) - 1) < 0.01  # a normalised histogram
    captions = " ".join(c.value for c in at.caption)
    assert "predicted width" in captions and "√r" in captions


def test_widgets_change_the_draw(app_env) -> None:
    at = open_page(PAGE, {"dmodel": "256", "nheads": "4"})
    at.selectbox(key="nheads").set_value(16).run()
    assert not at.exception
    assert nonzero_singular_values(at) == 16
    at.toggle(key="full").set_value(True).run()
    assert nonzero_singular_values(at) >= 255  # full rank: no cut
    assert at.query_params["full"] == "1"  # the view is a link


def test_bad_parameters_fall_back_with_a_notice(app_env) -> None:
    at = open_page(PAGE, {"dmodel": "999", "sq": "x"})
    assert notices(at), "invalid parameters must be reported"
    assert nonzero_singular_values(at) == 16  # the default is the open run's shape: d_model 64, d_head 16
