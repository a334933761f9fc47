"""precompute.job.factors.first_non_finite against an entry-by-entry test."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headwatch.precompute.job.factors import first_non_finite


def _brute_force(w: torch.Tensor) -> int | None:
    bad = [i for i in range(w.shape[0]) if not np.isfinite(w[i].numpy()).all()]
    return bad[0] if bad else None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_finds_the_first_layer_with_a_nan_or_an_infinity(dtype) -> None:
    rng = np.random.default_rng(0)
    clean = torch.tensor(rng.normal(0, 0.02, (6, 3, 4, 50)), dtype=dtype)
    assert first_non_finite(clean) is None
    for layer, value in ((4, float("nan")), (2, float("inf")), (1, -float("inf"))):
        w = clean.clone()
        w[layer, 1, 2, 7] = value
        w[5, 0, 0, 0] = float("nan")  # a later layer too: the first is named
        assert first_non_finite(w) == layer == _brute_force(w)


def test_opposite_infinities_and_an_overflowing_sum_of_finite_values() -> None:
    w = torch.zeros(3, 2, 8)
    w[1, 0, 0], w[1, 1, 3] = float("inf"), -float("inf")  # they sum to NaN: still found
    assert first_non_finite(w) == 1
    huge = torch.full((3, 2, 8), 3e38)  # finite, but every layer's float32 sum overflows to inf
    assert first_non_finite(huge) is None
    assert _brute_force(huge) is None
