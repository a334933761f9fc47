"""The random-matrix lab's sample against the analytic predictions it is meant to illustrate."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from headwatch.analysis.rmt.nullmodel import free_mp_cdf
from headwatch.analysis.rmt.rmt_lab import lab_sample


def test_low_rank_product_has_the_cut_width_and_law() -> None:
    s = lab_sample(256, 8, 0.02, 0.05, seed=1)
    assert s.rank == 32 and s.c == pytest.approx(1 / 8)
    assert s.entry_std == pytest.approx(0.02 * 0.05 * np.sqrt(32), rel=0.03)
    assert s.predicted_std == pytest.approx(0.02 * 0.05 * np.sqrt(32))
    nonzero = s.sv > 1e-8 * s.sv[0]
    assert nonzero.sum() == 32 and s.sv.shape == (256,)
    assert s.x.mean() == pytest.approx(1.0, rel=0.1)
    assert np.sum(s.entry_density * np.diff(s.entry_edges)) == pytest.approx(1.0, abs=1e-3)


def test_spectrum_follows_the_free_product_law() -> None:
    xs = np.concatenate([lab_sample(512, 8, 1.0, 1.0, seed=k).x for k in range(6)])
    assert stats.kstest(xs, lambda v: free_mp_cdf(v, 1 / 8)).statistic < 0.06


def test_full_rank_product() -> None:
    s = lab_sample(128, 4, 1.0, 1.0, low_rank=False, seed=2)
    assert s.rank == 128 and s.c == 1.0
    assert (s.sv > 1e-8 * s.sv[0]).sum() >= 127  # the smallest of a square product can be tiny
    assert s.entry_std == pytest.approx(np.sqrt(128), rel=0.05)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="divisible"):
        lab_sample(100, 3, 1.0, 1.0)
    with pytest.raises(ValueError, match="positive"):
        lab_sample(64, 4, 0.0, 1.0)
