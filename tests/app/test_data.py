"""Derived slices: step axes, ranges, statistic arrays; checked against direct computations."""

import json

import numpy as np
import pytest

from headwatch.analysis.store import open_store
from headwatch.dashboard.data import cell_edges, default_steps, fixed_range, step_axis


def test_step_axis_log_places_step_zero_at_one_and_tokens(store_path):
    store = open_store(store_path)
    lin = step_axis(store)
    assert np.array_equal(lin.x, store.steps) and not lin.log
    log = step_axis(store, scale="log")
    assert log.x[0] == 1.0 and log.log and "+ 1" in log.title
    assert log.range[0] < 0 < log.range[1]  # log10 units around 1 = step 0
    tok = step_axis(store, unit="tokens")
    assert np.array_equal(tok.x, store.steps * 2_097_152.0)
    assert len(lin.dup_x) == 1 and "repeats step 0" in lin.dup_text[0]
    assert store.meta.duplicates == [(3, 0)]


def test_step_axis_without_token_counts_refuses_tokens(tmp_path):
    from benchmarks.synthetic_store import write_synthetic_store

    path = write_synthetic_store(tmp_path / "bare", n_layers=1, n_heads=2, d_head=4, d_model=8, n_checkpoints=5, training=False)
    meta = json.loads((path / "meta.json").read_text())
    meta["checkpoints"] = [dict(c, tokens=None) for c in meta["checkpoints"]]
    (path / "meta.json").write_text(json.dumps(meta))
    bare = open_store(path)
    assert bare.meta.tokens_at(bare.steps) is None
    with pytest.raises(ValueError, match="token"):
        step_axis(bare, unit="tokens")


def test_cell_edges_are_midpoints_in_the_axis_space():
    assert np.allclose(cell_edges(np.array([0.0, 2.0, 10.0]), log=False), [-1, 1, 6, 14])
    e = cell_edges(np.array([1.0, 100.0]), log=True)
    assert np.allclose(e, [0.1, 10.0, 1000.0])


def test_default_steps_spread_in_log_and_keep_ends():
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, *range(1000, 143001, 1000)])
    picked = default_steps(steps, 5)
    assert picked[0] == 0 and picked[-1] == 143000 and len(picked) == 5
    assert all(p in steps for p in picked) and picked == sorted(picked)


def test_fixed_range_ignores_non_finite_and_non_positive_on_log():
    v = np.array([0.0, 1.0, 100.0, np.inf, np.nan])
    lo, hi = fixed_range(v, log=True, pad=0)
    assert (lo, hi) == (0.0, 2.0)
    assert fixed_range(v, pad=0) == (0.0, 100.0)


def test_nan_mean_is_numpys_nanmean_and_silent_where_a_slice_is_empty() -> None:
    import warnings

    from headwatch.dashboard.data import nan_mean

    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 4, 3))
    v[rng.random(v.shape) < 0.3] = np.nan
    v[:, 2, :] = np.nan  # one layer never estimated
    v[1, 0, 0] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" would raise here
        for axis in range(3):
            got = nan_mean(v, axis=axis)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                ref = np.nanmean(v, axis=axis)
            np.testing.assert_allclose(got, ref, rtol=1e-15)  # NaN where numpy gives NaN, inf where it gives inf
    assert np.isnan(nan_mean(v, axis=2)[:, 2]).all()
