"""The ticks Plotly will draw on a linear value axis, predicted before it draws them (`dashboard.figures.common.
linear_ticks`), and the left margin a figure declares from them (`value_axis_margin`): the steps of plotly.js's rule,
labelled as Plotly labels them. The browser checks that Plotly draws these labels and does not widen the margin are
in tests/app/test_browser_margins.py, on the shipped runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headwatch.dashboard import style
from headwatch.dashboard.figures.common import Y_AXIS_PX, linear_ticks, tick_label_px, value_axis_margin


@pytest.mark.parametrize(
    ("rng", "length", "values", "text"),
    [
        # the plain-text run's ICL scores on the Timeline (306 px): Plotly drew 0, 0.5, 1, 1.5
        ((-0.36, 1.65), 306, [0, 0.5, 1, 1.5], ["0", "0.5", "1", "1.5"]),
        # its trajectory map (486 px): Plotly drew 4 to 10
        ((3.6, 10.3), 486, [4, 5, 6, 7, 8, 9, 10], ["4", "5", "6", "7", "8", "9", "10"]),
        ((-0.08, 0.01), 306, [-0.08, -0.06, -0.04, -0.02, 0], ["\u22120.08", "\u22120.06", "\u22120.04", "\u22120.02", "0"]),
        ((1234.0, 56789.0), 160, [2e4, 4e4], ["20,000", "40,000"]),
    ],
)
def test_ticks_are_plotlys(rng, length, values, text) -> None:
    got_values, got_text = linear_ticks(rng, length)
    assert np.allclose(got_values, values) and got_text == text


def test_random_ranges_get_plotlys_count_of_ticks_at_a_round_step() -> None:
    gen = np.random.default_rng(0)
    for _ in range(2000):
        centre, span = gen.normal(0, 10.0 ** gen.integers(-4, 5)), 10.0 ** gen.uniform(-5, 5)
        lo, hi = centre - span * gen.uniform(0, 1), centre + span * gen.uniform(0.01, 1)
        length = float(gen.uniform(100, 900))
        values, text = linear_ticks((lo, hi), length)
        # one tick per 40 px, 5 to 10 of them, the step rounded up to 2, 5 or 10 x 10^n: 2 to 10 ticks fall inside
        assert 2 <= len(values) <= 10 and all(lo <= v <= hi for v in values), (lo, hi, values)
        step = values[1] - values[0]
        mantissa = step / 10.0 ** math.floor(math.log10(step))
        assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-4 * mantissa, (lo, hi, step)
        assert step >= (hi - lo) / (min(max(length / 40, 4), 9) + 1) * (1 - 1e-6)
        assert np.allclose(np.diff(values), step, rtol=1e-4, atol=0)
        # each label is its value (minus as U+2212, thousands separated), no two alike
        assert [float(t.replace("\u2212", "-").replace(",", "")) for t in text] == pytest.approx(values, abs=step * 1e-6)
        assert len(set(text)) == len(text)


def test_the_declared_left_margin_holds_the_widest_label() -> None:
    # measured in Chromium on the shipped plain-text run: "0.5" is 15 px and Plotly grew the margin to 70 px; "10",
    # 12 px, to 67 (tests/app/test_browser_margins.py failed on both before the margins were declared from the labels)
    assert tick_label_px("0.5") == 15 and tick_label_px("10") == 12 and tick_label_px("\u221250") == 18
    assert value_axis_margin((-0.36, 1.65), style.HEIGHT) == Y_AXIS_PX + 15 == 70
    assert value_axis_margin((3.6, 10.3), 620) == 67
    assert value_axis_margin((-5.6, 0.4), style.HEIGHT) == 67  # "−5", 12 px
    assert value_axis_margin((0.0, 5.0), style.HEIGHT) == style.MARGIN["l"]  # one digit: the base layout's margin
