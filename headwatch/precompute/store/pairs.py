"""Singular-vector overlaps and relative change between consecutive checkpoints: ``overlaps.parquet``.

For every head, every per-head matrix the run computes (``qk``, ``ov``) and every pair of
consecutive checkpoints with statistics (t, t+1), the store keeps the K x K matrices
|<u_a(t), u_b(t+1)>| and |<v_a(t), v_b(t+1)>| of the K leading left and right singular
vectors (`analysis.stats.crossings`) and the relative change ||W(t+1) - W(t)||_F / ||W(t)||_F
(`analysis.stats.circuits.relative_change`, from the factors). The vectors and factors
themselves are never stored: a checkpoint's are held only until the next checkpoint's
pair with them is computed. The factors are held in the narrowest float type that
holds them exactly (float16 for a float16 checkpoint: half the memory of float32).

The required pairs follow the store's steps: adding a checkpoint between two
others replaces the pair that spanned it by two new ones. Pairs whose vectors are
not in memory (a resumed run, a checkpoint filled in between, a store written
before overlaps existed) are filled by `OverlapFiller`, which re-reads those
checkpoints from the source; one that the source no longer has, or whose weights
changed since its statistics were computed, leaves its pairs out (the dashboard
shows those approaches as unresolved) and is reported.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from headwatch.analysis.stats.circuits import relative_change
from headwatch.analysis.stats.crossings import vector_overlaps
from headwatch.analysis.store.lenses.overlaps import OVERLAPS

log = logging.getLogger("precompute")

Pair = tuple[int, int]


@dataclass(frozen=True)
class HeadVectors:
    """What one checkpoint's pairs need of one per-head matrix.

    Attributes:
        u, v: the K leading left and right singular vectors, ``(n_layers, n_heads, d_model, K)`` float32.
        left, right: the factors, ``(n_layers, n_heads, d_head, d_model)`` (W = left^T right), in the
            narrowest float type that holds them exactly (`compact`).
        frob_sq: ``||W||_F^2`` per head, ``(n_layers, n_heads)`` float64: the sum of the squared
            singular values (``sv``).
    """

    u: np.ndarray
    v: np.ndarray
    left: torch.Tensor
    right: torch.Tensor
    frob_sq: np.ndarray

    @classmethod
    def of(cls, u: np.ndarray, v: np.ndarray, left: torch.Tensor, right: torch.Tensor, sv: np.ndarray) -> HeadVectors:
        """From the vectors, the factors as extracted and the singular values."""
        return cls(u, v, compact(left), compact(right), (np.asarray(sv, np.float64) ** 2).sum(-1))


Vectors = dict[str, HeadVectors]  # matrix ("qk", "ov") -> its vectors and factors


def compact(t: torch.Tensor) -> torch.Tensor:
    """``t`` as float16 or bfloat16 when that holds every value exactly (weights stored so), else as is."""
    for dtype in (torch.float16, torch.bfloat16):
        if t.dtype != dtype:
            narrow = t.to(dtype)
            if torch.equal(narrow.to(t.dtype), t):
                return narrow
    return t


def overlaps_meta(k: int) -> dict[str, Any]:
    """The ``overlaps`` entry of meta.json."""
    return {
        "file": OVERLAPS.file,
        "k": k,
        "vectors": "leading K left (u) and right (v) singular vectors of each head's matrix from the QR core "
        "(analysis/stats/spectrum.py)",
        "rel_change": "||W(t+1) - W(t)||_F / ||W(t)||_F from the factors (analysis/stats/circuits.py)",
        "pairs": "consecutive checkpoints with statistics, in step order",
    }


def pair_rows(prev_step: int, step: int, first: Vectors, second: Vectors, *, matrices: Iterable[str] | None = None) -> pa.Table:
    """Rows of one checkpoint pair: every head's K x K overlap matrices, row-major, and its relative change,
    for each matrix both checkpoints have (or those of ``matrices``).

    Args:
        prev_step, step: the two checkpoints, ``prev_step < step``.
        first, second: their vectors and factors (`HeadVectors` by matrix).
        matrices: only these matrices (default: every one both have).
    """
    names = sorted(set(first) & set(second) if matrices is None else matrices)
    tables = []
    for matrix in names:
        a, b = first[matrix], second[matrix]
        n_layers, n_heads, _, k = a.u.shape
        o_u = np.empty((n_layers, n_heads, k, k), dtype=np.float32)
        o_v = np.empty_like(o_u)
        change = np.empty((n_layers, n_heads), dtype=np.float64)
        for layer in range(n_layers):  # float64 products, one layer at a time
            o_u[layer], o_v[layer] = vector_overlaps(
                a.u[layer].astype(np.float64),
                a.v[layer].astype(np.float64),
                b.u[layer].astype(np.float64),
                b.v[layer].astype(np.float64),
            )
            change[layer] = relative_change(
                (a.left[layer], a.right[layer]),
                (b.left[layer], b.right[layer]),
                frob_sq=(
                    torch.tensor(a.frob_sq[layer]),  # (n_heads,): a copy, the
                    torch.tensor(b.frob_sq[layer]),
                ),
            ).numpy()  # held arrays are read-only
        tables.append(matrix_rows(prev_step, step, o_u, o_v, matrix=matrix, rel_change=change))
    return pa.concat_tables(tables) if tables else OVERLAPS.empty()


def matrix_rows(
    prev_step: int, step: int, o_u: np.ndarray, o_v: np.ndarray, *, matrix: str = "qk", rel_change: np.ndarray | None = None
) -> pa.Table:
    """Rows of one checkpoint pair of one matrix from its overlap matrices ``(n_layers, n_heads, K, K)``
    and relative changes ``(n_layers, n_heads)`` (NaN when not given)."""
    n_layers, n_heads, k, _ = o_u.shape
    n = n_layers * n_heads
    offsets = pa.array(np.arange(0, (n + 1) * k * k, k * k, dtype=np.int32))
    change = np.full(n, np.nan) if rel_change is None else np.asarray(rel_change, np.float64).reshape(n)
    return pa.table(
        {
            "matrix": pa.array([matrix] * n, pa.string()),
            "layer": pa.array(np.repeat(np.arange(n_layers, dtype=np.int32), n_heads)),
            "head": pa.array(np.tile(np.arange(n_heads, dtype=np.int32), n_layers)),
            "prev_step": pa.array(np.full(n, prev_step, dtype=np.int64)),
            "step": pa.array(np.full(n, step, dtype=np.int64)),
            "overlap_u": pa.ListArray.from_arrays(offsets, pa.array(np.asarray(o_u, np.float32).reshape(-1))),
            "overlap_v": pa.ListArray.from_arrays(offsets, pa.array(np.asarray(o_v, np.float32).reshape(-1))),
            "rel_change": pa.array(change),
        },
        schema=OVERLAPS.schema,
    )


def required_pairs(steps: Iterable[int], states: Iterable[int] | None = None) -> list[Pair]:
    """Consecutive pairs of the steps with statistics, and of the training states among them (the
    steps without mixed checkpoints, which the views show by default: a pair spans each hidden
    mixed checkpoint), in order."""
    steps = sorted(steps)
    pairs = set(itertools.pairwise(steps))
    if states is not None:
        states = sorted(states)
        pairs |= set(itertools.pairwise(states))
    return sorted(pairs, key=lambda p: (p[1], p[0]))


def present_pairs(table: pa.Table, matrices: Iterable[str] = ("qk",)) -> set[Pair]:
    """Pairs the table holds completely for every one of ``matrices``: rows with a relative change
    (a version-2 file's rows have none, so their pairs are filled again)."""
    if table.num_rows == 0:
        return set()
    done = table.filter(pc.invert(pc.is_nan(table["rel_change"])))
    out: set[Pair] | None = None
    for matrix in matrices:
        rows = done.filter(pc.equal(done["matrix"], matrix))
        pairs = set(zip(rows["prev_step"].to_pylist(), rows["step"].to_pylist(), strict=True))
        out = pairs if out is None else out & pairs
    return out or set()


def _keys(table: pa.Table) -> pa.Array:
    return pc.add(pc.multiply(table["prev_step"], pa.scalar(1 << 32, pa.int64())), table["step"])


def update(table: pa.Table, steps: Iterable[int], new: Iterable[pa.Table] = (), states: Iterable[int] | None = None) -> pa.Table:
    """``table`` plus ``new`` rows (which replace the table's rows of the same matrix and pair), keeping
    only the pairs `required_pairs` names, sorted by (matrix, layer, head, step): the order
    `analysis.store.Store.overlaps` reads one head from."""
    new = [t for t in new if t.num_rows]
    if new and table.num_rows:
        for t in new:
            for matrix in set(t["matrix"].to_pylist()):
                mine = pc.equal(table["matrix"], matrix)
                replaced = pc.is_in(_keys(table), pc.unique(_keys(t.filter(pc.equal(t["matrix"], matrix)))))
                table = table.filter(pc.invert(pc.and_(mine, replaced)))
    table = pa.concat_tables([table, *new]) if new else table
    pairs = required_pairs(steps, states)
    if table.num_rows:
        keys = _keys(table)
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

    def __init__(
        self,
        load: Callable[[int], Vectors | None],
        commit: Callable[[pa.Table], None],
        *,
        commit_every_s: float = 30.0,
        held: dict[int, Vectors] | None = None,
    ) -> None:
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

    def fill(
        self, table: pa.Table, steps: list[int], matrices: Iterable[str] = ("qk",), states: list[int] | None = None
    ) -> tuple[pa.Table, list[Pair]]:
        """The table with every pair `required_pairs` names that is missing for some of ``matrices`` computed for them all,
        and the pairs left out."""
        matrices = tuple(matrices)
        present = present_pairs(table, matrices)
        missing = [p for p in required_pairs(steps, states) if p not in present]
        if not missing:
            return table, []
        reread = sorted({s for p in missing for s in p} - set(self.held))
        log.info(
            "%d checkpoint pairs lack singular-vector overlaps; re-reading %d checkpoints for them", len(missing), len(reread)
        )
        pending: list[pa.Table] = []
        left_out: list[Pair] = []
        last_commit = time.monotonic()
        for a, b in missing:
            first = self.vectors(a)
            second = self.vectors(b) if first is not None else None
            if first is None or second is None:
                left_out.append((a, b))
                continue
            pending.append(pair_rows(a, b, first, second, matrices=matrices))
            if time.monotonic() - last_commit > self.commit_every_s:
                table, pending = update(table, steps, pending, states), []
                self.commit(table)
                last_commit = time.monotonic()
        if pending:
            table = update(table, steps, pending, states)
            self.commit(table)
        return table, left_out
