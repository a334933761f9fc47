"""A value axis whose ticks are chosen before Plotly draws it (`dashboard.figures.common.linear_ticks`,
`labelled_value_axis`): the ticks hold the range at a step of 1, 2 or 5 x 10^n, labelled as Plotly labels them, and
the declared left margin holds the widest label (the browser check that Plotly does not widen it is
tests/app/test_browser_margins.py, on the shipped runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headwatch.dashboard.figures.common import Y_AXIS_PX, labelled_value_axis, linear_ticks, tick_label_px


@pytest.mark.parametrize(
    ("rng", "values", "text"),
    [
        ((-0.2, 1.7), [0, 0.5, 1, 1.5], ["0", "0.5", "1", "1.5"]),  # the plain-text run's ICL scores: Plotly's own ticks
        ((-5.6, 0.4), [-5, -4, -3, -2, -1, 0], ["\u22125", "\u22124", "\u22123", "\u22122", "\u22121", "0"]),
        ((-0.08, 0.01), [-0.08, -0.06, -0.04, -0.02, 0], ["\u22120.08", "\u22120.06", "\u22120.04", "\u22120.02", "0"]),
        ((1234.0, 56789.0), [1e4, 2e4, 3e4, 4e4, 5e4], ["10,000", "20,000", "30,000", "40,000", "50,000"]),
    ],
)
def test_ticks_are_round_steps_labelled_as_plotly_labels_them(rng, values, text) -> None:
    got_values, got_text = linear_ticks(rng)
    assert np.allclose(got_values, values) and got_text == text


def test_random_ranges_get_two_to_seven_ticks_inside_at_a_round_step() -> None:
    gen = np.random.default_rng(0)
    for _ in range(2000):
        centre, span = gen.normal(0, 10.0 ** gen.integers(-4, 5)), 10.0 ** gen.uniform(-5, 5)
        lo, hi = centre - span * gen.uniform(0, 1), centre + span * gen.uniform(0.01, 1)
        values, text = linear_ticks((lo, hi))
        assert 2 <= len(values) <= 7 and all(lo <= v <= hi for v in values), (lo, hi, values)
        step = values[1] - values[0]
        mantissa = step / 10.0 ** math.floor(math.log10(step))
        assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-4 * mantissa, (lo, hi, step)
        assert np.allclose(np.diff(values), step, rtol=1e-4, atol=0)
        # each label is its value (minus as U+2212, thousands separated), no two alike
        assert [float(t.replace("\u2212", "-").replace(",", "")) for t in text] == pytest.approx(values, abs=step * 1e-6)
        assert len(set(text)) == len(text)


def test_the_declared_left_margin_holds_the_widest_label() -> None:
    # measured in Chromium on the shipped plain-text run: "0.5" is 15 px and Plotly grew the margin to 70 px; "10",
    # 12 px, to 67 (tests/app/test_browser_margins.py failed on both before the margins were declared from the labels)
    assert tick_label_px("0.5") == 15 and tick_label_px("10") == 12 and tick_label_px("\u221250") == 18
    axis, left = labelled_value_axis("ICL score (nats)", (-0.2, 1.7))
    assert left == Y_AXIS_PX + 15 == 70 and axis["ticktext"] == ["0", "0.5", "1", "1.5"]
    assert axis["range"] == [-0.2, 1.7] and axis["title"] == {"text": "ICL score (nats)"}
