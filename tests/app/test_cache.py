"""`dashboard.cache.store_cached`: a derivation runs once per store version and options, again after a commit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.synthetic_store import write_synthetic_store
from headwatch.analysis.store import open_store
from headwatch.dashboard.cache import store_cached, store_key

CALLS: list[tuple] = []


def steps_seen(store, *, scale: int = 1) -> list[int]:
    """A stand-in derivation: counts its calls."""
    CALLS.append((str(store.path), store.include_mixed, scale))
    return [int(s) * scale for s in store.steps]


def total_steps(stores: dict, *, scale: int = 1) -> int:
    CALLS.append(tuple(stores))
    return sum(len(s.steps) for s in stores.values()) * scale


@pytest.fixture
def stores(tmp_path: Path):
    CALLS.clear()
    a, b = tmp_path / "a", tmp_path / "b"
    write_synthetic_store(a, n_checkpoints=4, seed=0)
    write_synthetic_store(b, n_checkpoints=5, seed=1)
    return open_store(a), open_store(b)


def _touch_meta(path: Path) -> None:
    """A commit as the job makes one: meta.json replaced, so its mtime (the store's version) moves."""
    meta = path / "meta.json"
    st = meta.stat()
    os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_a_derivation_runs_once_per_store_version_and_options(stores) -> None:
    a, b = stores
    cached = store_cached(steps_seen)
    cached.clear()
    assert not cached.computed(a)
    assert cached(a) == [int(s) for s in a.steps]
    assert cached(a) == [int(s) for s in a.steps] and len(CALLS) == 1  # the second call is answered from the cache
    assert cached.computed(a) and not cached.computed(a, scale=2) and not cached.computed(b)
    cached(a, scale=2)
    cached(b)
    assert len(CALLS) == 3  # other options, another store: computed
    cached(open_store(a.path))  # the same store opened again: the same key
    assert len(CALLS) == 3
    before = store_key(a)
    _touch_meta(a.path)  # a commit: the store's version moves, and the next call derives again
    assert store_key(a)[0] == before[0] and store_key(a)[1] != before[1]
    cached(a)
    assert len(CALLS) == 4 and not cached.computed(b, scale=2)
    cached(a.view(include_mixed=not a.include_mixed))  # the mixed checkpoints shown: another key
    assert len(CALLS) == 5 and CALLS[-1][1] is (not a.include_mixed)


def test_stores_in_a_dict_are_keyed_by_their_versions(stores) -> None:
    a, b = stores
    cached = store_cached(total_steps)
    cached.clear()
    assert cached({"a": a, "b": b}) == len(a.steps) + len(b.steps)
    cached({"a": a, "b": b})
    assert len(CALLS) == 1
    cached({"b": b, "a": a})  # another order of the runs is another question (the joint maps depend on it)
    assert len(CALLS) == 2
    _touch_meta(b.path)
    cached({"a": a, "b": b})
    assert len(CALLS) == 3


def test_computed_survives_wrapping_again() -> None:
    """A page script wraps its function again at every rerun: what ran stays known."""
    first = store_cached(total_steps)
    first.clear()
    first({})
    assert store_cached(total_steps).computed({})
