"""Singular-vector overlaps between consecutive checkpoints: building and keeping ``overlaps.parquet``.

For every head and every pair of consecutive checkpoints with statistics (t, t+1),
the store keeps the K x K matrices |<u_a(t), u_b(t+1)>| and |<v_a(t), v_b(t+1)>| of
the K leading left and right singular vectors of W_QK (`analysis.crossings`). The
vectors themselves are never stored: a checkpoint's are held only until the next
checkpoint's overlaps with them are computed.

The required pairs follow the store's steps: adding a checkpoint between two
others replaces the pair that spanned it by two new ones. Pairs whose vectors are
not in memory (a resumed run, a checkpoint filled in between, a store written
before overlaps existed) are filled by `OverlapFiller`, which re-reads those
checkpoints from the source; one that the source no longer has, or whose weights
changed since its statistics were computed, leaves its pairs out (the dashboard
shows those approaches as unresolved) and is reported.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.crossings import vector_overlaps
from analysis.store.format import OVERLAPS

log = logging.getLogger("precompute")

Vectors = tuple[np.ndarray, np.ndarray]  # u, v: (n_layers, n_heads, d_model, K) float32
Pair = tuple[int, int]


def overlaps_meta(k: int) -> dict[str, Any]:
    """The ``overlaps`` entry of meta.json."""
    return {
        "file": OVERLAPS.file,
        "k": k,
        "vectors": "leading K left (u) and right (v) singular vectors of W_QK from the QR core (analysis/spectrum.py)",
        "pairs": "consecutive checkpoints with statistics, in step order",
    }


def empty_overlaps() -> pa.Table:
    return OVERLAPS.empty()


def pair_rows(prev_step: int, step: int, first: Vectors, second: Vectors) -> pa.Table:
    """Rows of one checkpoint pair: every head's K x K overlap matrices, row-major.

    Args:
        prev_step, step: the two checkpoints, ``prev_step < step``.
        first, second: their vectors, each ``(u, v)`` of shape ``(n_layers, n_heads, d_model, K)``.
    """
    u0, v0 = first
    u1, v1 = second
    n_layers, n_heads, _, k = u0.shape
    o_u = np.empty((n_layers, n_heads, k, k), dtype=np.float32)
    o_v = np.empty_like(o_u)
    for layer in range(n_layers):  # float64 products, one layer at a time
        o_u[layer], o_v[layer] = vector_overlaps(
            u0[layer].astype(np.float64), v0[layer].astype(np.float64),
            u1[layer].astype(np.float64), v1[layer].astype(np.float64),
        )
    return matrix_rows(prev_step, step, o_u, o_v)


def matrix_rows(prev_step: int, step: int, o_u: np.ndarray, o_v: np.ndarray) -> pa.Table:
    """Rows of one checkpoint pair from its overlap matrices ``(n_layers, n_heads, K, K)``."""
    n_layers, n_heads, k, _ = o_u.shape
    n = n_layers * n_heads
    offsets = pa.array(np.arange(0, (n + 1) * k * k, k * k, dtype=np.int32))
    return pa.table(
        {
            "layer": pa.array(np.repeat(np.arange(n_layers, dtype=np.int32), n_heads)),
            "head": pa.array(np.tile(np.arange(n_heads, dtype=np.int32), n_layers)),
            "prev_step": pa.array(np.full(n, prev_step, dtype=np.int64)),
            "step": pa.array(np.full(n, step, dtype=np.int64)),
            "overlap_u": pa.ListArray.from_arrays(offsets, pa.array(np.asarray(o_u, np.float32).reshape(-1))),
            "overlap_v": pa.ListArray.from_arrays(offsets, pa.array(np.asarray(o_v, np.float32).reshape(-1))),
        },
        schema=OVERLAPS.schema,
    )


def required_pairs(steps: Iterable[int], states: Iterable[int] | None = None) -> list[Pair]:
    """Consecutive pairs of the steps with statistics, and of the training states among them (the
    steps without mixed checkpoints, which the views show by default: a pair spans each hidden
    mixed checkpoint), in order."""
    steps = sorted(steps)
    pairs = set(zip(steps[:-1], steps[1:]))
    if states is not None:
        states = sorted(states)
        pairs |= set(zip(states[:-1], states[1:]))
    return sorted(pairs, key=lambda p: (p[1], p[0]))


def present_pairs(table: pa.Table) -> set[Pair]:
    if table.num_rows == 0:
        return set()
    return set(zip(table["prev_step"].to_pylist(), table["step"].to_pylist()))


def update(table: pa.Table, steps: Iterable[int], new: Iterable[pa.Table] = (),
           states: Iterable[int] | None = None) -> pa.Table:
    """``table`` plus ``new`` rows, keeping only the pairs `required_pairs` names, sorted by
    (layer, head, step): the order `analysis.store.Store.overlaps` reads one head from."""
    table = pa.concat_tables([table, *new]) if new else table
    pairs = required_pairs(steps, states)
    if table.num_rows:
        keys = pc.add(pc.multiply(table["prev_step"], pa.scalar(1 << 32, pa.int64())), table["step"])
        wanted = pa.array([a * (1 << 32) + b for a, b in pairs], pa.int64())
        table = table.filter(pc.is_in(keys, wanted))
    return OVERLAPS.sorted(table)


class OverlapFiller:
    """Computes the pairs a store lacks, re-reading checkpoints through ``load``.

    Args:
        load: step -> that checkpoint's vectors, or None when it cannot be read (logged by ``load``).
        commit: called with the updated table to write it (at most every ``commit_every_s``
            seconds, and at the end), so a kill loses little.
        commit_every_s: seconds between intermediate commits.
        held: vectors already in memory (by step), used before anything is re-read.
    """

    def __init__(self, load: Callable[[int], Vectors | None], commit: Callable[[pa.Table], None], *,
                 commit_every_s: float = 30.0, held: dict[int, Vectors] | None = None) -> None:
        self.load = load
        self.commit = commit
        self.commit_every_s = commit_every_s
        self.held = dict(held or {})
        self.cache: OrderedDict[int, Vectors | None] = OrderedDict()  # at most 2: pairs are filled in order
        self.unavailable: set[int] = set()

    def vectors(self, step: int) -> Vectors | None:
        if step in self.unavailable:
            return None
        if step in self.held:
            return self.held[step]
        if step not in self.cache:
            self.cache[step] = self.load(step)
            if self.cache[step] is None:
                self.unavailable.add(step)
            while len(self.cache) > 2:
                self.cache.popitem(last=False)
        return self.cache[step]

    def fill(self, table: pa.Table, steps: list[int], states: list[int] | None = None) -> tuple[pa.Table, list[Pair]]:
        """The table with every missing pair `required_pairs` names that it can compute, and the
        pairs left out."""
        present = present_pairs(table)
        missing = [p for p in required_pairs(steps, states) if p not in present]
        if not missing:
            return table, []
        reread = sorted({s for p in missing for s in p} - set(self.held))
        log.info("%d checkpoint pairs lack singular-vector overlaps; re-reading %d checkpoints for them",
                 len(missing), len(reread))
        pending: list[pa.Table] = []
        left_out: list[Pair] = []
        last_commit = time.monotonic()
        for a, b in missing:
            first = self.vectors(a)
            second = self.vectors(b) if first is not None else None
            if first is None or second is None:
                left_out.append((a, b))
                continue
            pending.append(pair_rows(a, b, first, second))
            if time.monotonic() - last_commit > self.commit_every_s:
                table, pending = update(table, steps, pending, states), []
                self.commit(table)
                last_commit = time.monotonic()
        if pending:
            table = update(table, steps, pending, states)
            self.commit(table)
        return table, left_out
