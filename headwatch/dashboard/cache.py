"""The one cache for what a view derives from a store: `store_cached`.

A view derives what it draws from opened stores and plain options (a UMAP map, the run's events, the head types'
association with the trajectory clusters) with a pure function, written where its kind lives (``analysis/`` or the
view's own ``data.py``). The view caches it at its edge, once, with this decorator::

    events = store_cached(run_events, spinner="Collecting the run's events ...")
    events(frame.store)

The result is kept per server process (Streamlit's ``st.cache_data``: each call gets a copy), keyed on every
argument, where a store counts as its path, the version of its ``meta.json`` and whether it includes the mixed
checkpoints (`store_key`): a commit replaces ``meta.json``, so a store that gained checkpoints is derived again,
and the same store with its mixed checkpoints shown is another key. Stores may come alone, in lists and tuples, or
as the values of a dict (the Compare page's named runs). Two views that wrap the same function share its cache
(Streamlit keys a cache by the function's module, name and source).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable
from typing import Any, Generic, ParamSpec, TypeVar

import streamlit as st

from headwatch.analysis.store import Store, store_version

P = ParamSpec("P")
R = TypeVar("R")

# The calls each cached function has answered in this server process, by the function's qualified name: kept here,
# not on the wrapper, because a page script that wraps a function runs again (and wraps it again) at every rerun.
_DONE: dict[str, set[Hashable]] = {}


def store_key(store: Store) -> tuple[str, int, bool]:
    """What identifies a store's content for a cache: its path, its ``meta.json`` version and ``include_mixed``."""
    return (str(store.path), store_version(store.path), store.include_mixed)


def _frozen(value: Any) -> Hashable:
    """``value`` as a hashable key, each store by `store_key` (in lists, tuples and dict values too)."""
    if isinstance(value, Store):
        return ("store", *store_key(value))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    return value


class StoreCached(Generic[P, R]):
    """A function of stores and options whose results are cached (`store_cached`)."""

    def __init__(self, fn: Callable[P, R], *, spinner: bool | str, max_entries: int) -> None:
        functools.update_wrapper(self, fn)
        self._signature = inspect.signature(fn)
        self._cached = st.cache_data(show_spinner=spinner, max_entries=max_entries, hash_funcs={Store: store_key})(fn)
        self._done = _DONE.setdefault(f"{fn.__module__}.{fn.__qualname__}", set())

    def _key(self, args: tuple, kwargs: dict) -> Hashable:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple((name, _frozen(value)) for name, value in bound.arguments.items())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        result = self._cached(*args, **kwargs)
        self._done.add(self._key(args, kwargs))
        return result

    def computed(self, *args: P.args, **kwargs: P.kwargs) -> bool:
        """Whether a call with these arguments already ran in this server process (returns at once: a page can say
        that a slow derivation, such as a UMAP map, waits for a click before it starts one)."""
        return self._key(args, kwargs) in self._done

    def clear(self) -> None:
        """Forget every cached result."""
        self._cached.clear()
        self._done.clear()


def store_cached(fn: Callable[P, R], *, spinner: bool | str = False, max_entries: int = 16) -> StoreCached[P, R]:
    """``fn``, cached per server process on its stores' versions and its other arguments.

    Args:
        fn: a pure function of opened stores (`analysis.store.Store`, alone or in lists, tuples or dict values) and
            hashable options; it must not mutate its arguments.
        spinner: what the page says while ``fn`` runs (False: nothing).
        max_entries: the most results kept; the oldest go first.

    Returns:
        The cached function, with ``computed(...)`` (whether a call already ran) and ``clear()``.
    """
    return StoreCached(fn, spinner=spinner, max_entries=max_entries)
