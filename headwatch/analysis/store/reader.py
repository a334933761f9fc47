"""Read a statistics store: ``meta.json`` plus the Parquet tables of `analysis.store.lenses.TABLES`.

A store is a public format (README "The statistics store"); this reader checks its
version and its internal consistency, then hands out the per-head statistics as dense
arrays indexed ``[step, layer, head]`` (``[step, layer, head, k]`` for the list columns:
`Store.array`, `Store.overlaps`) and every other registered table through one accessor:
`Store.read` (any table, as Arrow; `Store.frame` as pandas), `Store.dense` (a table keyed
by step, layer and head, as an array), `Store.steps_with` and `Store.has`. It imports neither torch nor streamlit. The writer
(`precompute.store.writer`) commits every file in one atomic step, so the reader
never has to guess which file is newer. Stores of older schema versions are read
through `analysis.store.older_versions`.

The steps a `Store` shows are its training states: checkpoints with rows, less the
partial duplicates (`analysis.store.meta`), which `Store.view(include_mixed=True)` adds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from headwatch.analysis.errors import StoreError
from headwatch.analysis.rmt.nullmodel import NULL_RATIO_STATS
from headwatch.analysis.store.format import (
    CIRCUIT_COLUMNS,
    HEADS,
    HEADS_COLUMNS,
    LIST_COLUMNS,
    META_FILE,
    NULL_COLUMNS,
    SCALAR_COLUMNS,
    TableSpec,
)
from headwatch.analysis.store.lenses.overlaps import OVERLAPS
from headwatch.analysis.store.meta import Meta, read_meta
from headwatch.analysis.store.older_versions import null_model_columns, upgrade_table

# The per-checkpoint relative change of a head's matrix, kept with the pairs in overlaps.parquet.
REL_CHANGE = "rel_change"
# Every column `Store.array` hands out.
ARRAY_COLUMNS = SCALAR_COLUMNS + NULL_COLUMNS + CIRCUIT_COLUMNS + (REL_CHANGE,) + LIST_COLUMNS


@dataclass(frozen=True)
class Store:
    """An opened store. Cheap to create: only the row keys are read at open; each column is
    read from ``heads.parquet`` on first use (list columns a row group at a time, straight into
    one float32 array) and cached, shared by every `view` of the store.

    Attributes:
        path: the store directory.
        meta: the typed ``meta.json``.
        keys: the key columns (step, layer, head, matrix) of ``heads.parquet``, in file order,
            which is sorted by (step, layer, head, matrix).
        include_mixed: whether `steps` includes partial duplicates.
    """

    path: Path
    meta: Meta
    keys: pa.Table
    include_mixed: bool = False
    # heads.parquet as opened by `open_store`: later column reads come from this same file
    # even if a precompute commit swaps the store directory meanwhile (None: no rows yet)
    file: pq.ParquetFile | None = field(default=None, repr=False, compare=False)
    _cache: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False, compare=False)

    def view(self, *, include_mixed: bool) -> Store:
        """The same store showing (or hiding) the partial duplicates; shares the column cache."""
        if include_mixed == self.include_mixed:
            return self
        return replace(self, include_mixed=include_mixed)

    @property
    def model(self):
        return self.meta.model

    @property
    def n_layers(self) -> int:
        return self.meta.model.n_layers

    @property
    def n_heads(self) -> int:
        return self.meta.model.n_heads

    @property
    def d_head(self) -> int:
        return self.meta.model.d_head

    @property
    def d_model(self) -> int:
        return self.meta.model.d_model

    @cached_property
    def steps(self) -> np.ndarray:
        """Steps shown, ascending: axis 0 of every array (whole duplicates never; partial ones if ``include_mixed``)."""
        steps = self.meta.done_steps if self.include_mixed else self.meta.state_steps
        return np.asarray(steps, dtype=np.int64)

    @cached_property
    def hidden_steps(self) -> list[tuple[int, str]]:
        """Checkpoints listed but not in `steps`, with why: (step, text), by step."""
        out = [(d, f"step {d} repeats step {o}'s weights") for d, o in self.meta.duplicates]
        if not self.include_mixed:
            for c in self.meta.mixed:
                s = c.shared_files[0]
                more = f" and {len(c.shared_files) - 1} more file(s)" if len(c.shared_files) > 1 else ""
                out.append((c.step, f"step {c.step} carries step {s.step}'s {s.other_file}{more}"))
        return sorted(out)

    @cached_property
    def checkpoints(self) -> pd.DataFrame:
        """Every checkpoint in ``meta.json`` (duplicates included) as a table."""
        return pd.DataFrame([c.as_dict() for c in self.meta.checkpoints])

    @cached_property
    def column_names(self) -> list[str]:
        """Columns of ``heads.parquet`` (from its footer, without reading data)."""
        return self.file.schema_arrow.names if self.file is not None else HEADS.schema.names

    def has_column(self, column: str) -> bool:
        """Whether ``heads.parquet`` stores ``column`` (a null-model column of an old store is derived instead)."""
        return column in self.column_names

    @cached_property
    def arrow(self) -> pa.Table:
        """The whole ``heads.parquet`` as a pyarrow table (read on first access; mixed checkpoints included)."""
        return self.file.read() if self.file is not None else HEADS.empty()

    @cached_property
    def table(self) -> pd.DataFrame:
        """``heads.parquet`` as pandas; index columns by name (``df["head"]``, not ``df.head``)."""
        return self.arrow.to_pandas()

    def _read(self, column: str) -> np.ndarray:
        """One column, all rows in file order: ``(rows,)`` float64 or ``(rows, k)`` float32 for list columns."""
        rows = self.keys.num_rows
        if rows == 0:
            return np.zeros((0,) if column not in LIST_COLUMNS else (0, 0), np.float64)
        assert self.file is not None, "a store with rows has heads.parquet"
        if column not in LIST_COLUMNS:
            return self.file.read(columns=[column]).column(0).to_numpy().astype(np.float64, copy=False)
        # List columns: one row group at a time (16,384 rows as precompute writes them), each
        # decoded straight into its rows of one float32 array. Faster than iter_batches (which
        # also buffers ahead) and never two full copies of the column in memory.
        out = None
        start = 0
        for i in range(self.file.metadata.num_row_groups):
            col = self.file.read_row_group(i, columns=[column]).column(0).combine_chunks()
            values = col.flatten().to_numpy(zero_copy_only=False)
            n = len(col)
            if out is None:
                out = np.empty((rows, len(values) // max(n, 1)), dtype=np.float32)
            if len(values) != n * out.shape[1]:
                raise StoreError(
                    f"{str(self.path / HEADS.file)!r}: the lists of {column!r} differ in length; "
                    "the file is corrupt: recompute the store"
                )
            out[start : start + n] = values.reshape(n, -1)
            start += n
        assert out is not None, "a file with rows has a row group"
        return out

    def _full(self, column: str, matrix: str) -> np.ndarray:
        """``[done step, layer, head(, k)]`` over every checkpoint with rows, cached."""
        key = (column, matrix)
        if key in self._cache:
            return self._cache[key]
        if column in NULL_COLUMNS and not self.has_column(column):
            spectral = {name: self._full(name, matrix) for name in NULL_RATIO_STATS}
            derived = null_model_columns(self._full("sv", matrix), spectral, d_model=self.d_model)
            for name, values in derived.items():
                values.setflags(write=False)
                self._cache[(name, matrix)] = values
            return self._cache[key]
        mask = pc.equal(self.keys["matrix"], matrix).to_numpy(zero_copy_only=False)
        shape = (len(self.meta.done_steps), self.n_layers, self.n_heads)
        if int(mask.sum()) != int(np.prod(shape)):
            raise KeyError(f"store {str(self.path)!r} has no complete {matrix!r} rows")
        if column in CIRCUIT_COLUMNS and not self.has_column(column):  # before version 3: needs the weights
            values = np.full(int(mask.size), np.nan)
        elif column == REL_CHANGE:
            values = self._rel_change_rows(matrix, mask)
        else:
            values = self._read(column)
        if not mask.all():
            values = values[mask]
        out = values.reshape(shape + values.shape[1:])
        out.setflags(write=False)
        self._cache[key] = out
        return out

    def _rel_change_rows(self, matrix: str, mask: np.ndarray) -> np.ndarray:
        """``rel_change`` laid out like the rows of ``heads.parquet`` (all of them, file order): the change
        from each row's checkpoint to the next done checkpoint (``overlaps.parquet``), NaN where the file
        has no such pair (the last checkpoint, a store without overlaps or from before version 3)."""
        out = np.full(int(mask.size), np.nan)
        path = self.path / OVERLAPS.file
        if not path.is_file():
            return out
        try:
            names = pq.ParquetFile(path).schema_arrow.names
            if "rel_change" not in names:
                return out
            table = pq.read_table(
                path, columns=["matrix", "layer", "head", "prev_step", "step", "rel_change"], filters=[("matrix", "=", matrix)]
            )
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(
                f"cannot read {str(path)!r}: {exc}; rerun `python -m headwatch.precompute` on the store to rewrite it"
            ) from exc
        done = np.asarray(self.meta.done_steps, dtype=np.int64)
        prev = table["prev_step"].to_numpy()
        t = np.searchsorted(done, prev).clip(0, max(len(done) - 1, 0))
        ok = (len(done) > 1) & (t + 1 < len(done))
        ok &= (done[t] == prev) & (done[np.minimum(t + 1, len(done) - 1)] == table["step"].to_numpy())
        rows = (t * self.n_layers + table["layer"].to_numpy()) * self.n_heads + table["head"].to_numpy()
        dense = np.full(len(done) * self.n_layers * self.n_heads, np.nan)
        dense[rows[ok]] = table["rel_change"].to_numpy(zero_copy_only=False)[ok]
        out[mask] = dense  # the matrix's rows, in file order = (step, layer, head) order
        return out

    def array(self, column: str, *, matrix: str = "qk") -> np.ndarray:
        """Dense array of one column for one matrix kind, over `steps`.

        Args:
            column: a scalar column (returns ``[step, layer, head]``) or a list column,
                ``sv`` or ``hist_z`` (returns ``[step, layer, head, k]``). The
                null-model columns are derived from ``sv`` when the store lacks them; the
                circuit columns of a store before schema version 3 are NaN. ``rel_change``
                is the relative change to the next checkpoint with rows, from
                ``overlaps.parquet`` (NaN at the last one, and where the file lacks the pair).
            matrix: which product, ``"qk"`` or ``"ov"`` (`meta.matrices`).

        Returns:
            float64 for scalars, float32 for list columns, read-only; axis 0 follows ``self.steps``.

        Raises:
            KeyError: unknown column or matrix.
        """
        if column not in ARRAY_COLUMNS:
            raise KeyError(f"unknown column {column!r}; choose from {ARRAY_COLUMNS}")
        full = self._full(column, matrix)
        if len(self.steps) == len(self.meta.done_steps):
            return full
        key = (column, f"{matrix}:states")
        if key not in self._cache:
            rows = np.searchsorted(np.asarray(self.meta.done_steps, dtype=np.int64), self.steps)
            part = full[rows]
            part.setflags(write=False)
            self._cache[key] = part
        return self._cache[key]

    def overlaps(self, layer: int, head: int, *, matrix: str = "qk") -> tuple[np.ndarray, np.ndarray] | None:
        """One head's singular-vector overlaps between consecutive `steps` (``overlaps.parquet``).

        Only that head's layer is decoded (the file has one row group per matrix and layer).

        Args:
            layer, head: the head.
            matrix: which product (a file from before schema version 3 holds ``qk`` only).

        Returns:
            ``(o_u, o_v)``, each ``(len(steps) - 1, K, K)`` float64, where entry ``[t]`` holds
            ``|<u_a(steps[t]), u_b(steps[t+1])>|`` at ``[a, b]``; NaN for a pair the file
            lacks. None when the store has no overlaps.

        Raises:
            StoreError: the file is unreadable.
        """
        k = self.meta.overlap_k
        path = self.path / OVERLAPS.file
        if not k or not path.is_file():
            return None
        try:
            filters: list[tuple[str, str, Any]] = [("layer", "=", int(layer)), ("head", "=", int(head))]
            if "matrix" in pq.ParquetFile(path).schema_arrow.names:
                filters.append(("matrix", "=", matrix))
            elif matrix != "qk":
                filters = [("layer", "=", -1)]  # version 2: no rows of other matrices
            table = pq.read_table(path, filters=filters)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(
                f"cannot read {str(path)!r}: {exc}; rerun `python -m headwatch.precompute` on the store to rewrite it"
            ) from exc
        n_pairs = max(len(self.steps) - 1, 0)
        o_u = np.full((n_pairs, k, k), np.nan)
        o_v = np.full((n_pairs, k, k), np.nan)
        if n_pairs == 0 or table.num_rows == 0:
            return o_u, o_v
        position = {int(s): i for i, s in enumerate(self.steps[:-1])}
        prev = table["prev_step"].to_numpy()
        nxt = table["step"].to_numpy()
        values_u = table["overlap_u"].combine_chunks().flatten().to_numpy().reshape(-1, k, k)
        values_v = table["overlap_v"].combine_chunks().flatten().to_numpy().reshape(-1, k, k)
        for row, (a, b) in enumerate(zip(prev.tolist(), nxt.tolist(), strict=True)):
            t = position.get(a)
            if t is not None and int(self.steps[t + 1]) == b:  # only pairs of consecutive steps of this view
                o_u[t], o_v[t] = values_u[row], values_v[row]
        return o_u, o_v

    # ------------------------------------------------------------------ every other table

    def has(self, spec: TableSpec) -> bool:
        """Whether the store has the table ``spec`` (`analysis.store.lenses.TABLES`)."""
        return (self.path / spec.file).is_file()

    def read(self, spec: TableSpec, *, columns: list[str] | None = None) -> pa.Table | None:
        """Any registered table, read through `analysis.store.older_versions.upgrade_table` (an older store's
        table as this version writes it), in its sort order; a table keyed by step holds the rows of
        this view's `steps` only. Cached.

        Args:
            spec: the table (`analysis.store.lenses.TABLES`); the per-head statistics are `array`'s.
            columns: the columns to read (its key columns are always read); None reads all.

        Returns:
            The table, or None when the store does not have it.

        Raises:
            KeyError: a column the table does not have.
            StoreError: the file is unreadable.
        """
        if columns is not None:
            unknown = [c for c in columns if c not in spec.schema.names]
            if unknown:
                raise KeyError(f"{spec.file} has no columns {unknown}; columns: {', '.join(spec.schema.names)}")
            columns = list(dict.fromkeys([*spec.sort, *columns]))
        key = ("table", f"{spec.name}:{','.join(columns or [])}:{self.include_mixed}")
        if key in self._cache:
            return self._cache[key]
        path = self.path / spec.file
        if not path.is_file():
            return None
        filters = [("step", "in", [int(s) for s in self.steps])] if "step" in spec.sort else None
        try:
            names = pq.ParquetFile(path).schema_arrow.names
            wanted = [c for c in columns if c in names] if columns is not None else None
            table = pq.read_table(path, columns=wanted, filters=filters)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(
                f"cannot read {str(path)!r}: {exc}; rerun `python -m headwatch.precompute` on the store to rewrite it"
            ) from exc
        table = upgrade_table(spec, table)
        table = spec.sorted(table) if all(c in table.column_names for c in spec.sort) else table
        self._cache[key] = table
        return table

    def frame(self, spec: TableSpec, *, columns: list[str] | None = None) -> pd.DataFrame | None:
        """`read` as pandas (index columns by name: ``df["head"]``), or None."""
        table = self.read(spec, columns=columns)
        return None if table is None else table.to_pandas()

    def steps_with(self, spec: TableSpec, *, at: Mapping[str, int | str] | None = None) -> np.ndarray:
        """The steps of this view's `steps` with rows in ``spec`` (empty when the store lacks it); of those rows,
        the ones ``at`` picks, as `dense` picks them (the refined LLC's: under its default distribution unless
        ``at`` names one)."""
        table = self.read(spec, columns=[])
        if table is None:
            return np.zeros(0, dtype=np.int64)
        at = {**(spec.pick(table) if spec.pick is not None else {}), **(at or {})}
        keep = np.ones(table.num_rows, dtype=bool)
        for name, value in at.items():
            keep &= table[name].to_numpy(zero_copy_only=False) == value
        have = set(table["step"].to_numpy()[keep].tolist())
        return np.array([s for s in self.steps if int(s) in have], dtype=np.int64)

    def dense(self, spec: TableSpec, column: str, *, at: Mapping[str, int | str] | None = None) -> np.ndarray | None:
        """One column of a table keyed by step and layer/head indices, as a dense array over its keys.

        Axis 0 follows `steps`; the other axes are the table's other key columns in order
        (``layer`` and ``layer_a``/``layer_b`` over the model's layers, ``head`` and ``head_a``/``head_b``
        over its heads, ``chain`` over the refined LLC's chains): the composition scores are
        ``dense(COMPOSITION, "k")``, ``[step, layer_a, head_a, layer_b, head_b]``.
        ``at`` picks rows by the value of some key columns and drops their axes: the refined LLC's
        whole-model row is ``dense(LLC, "llc", at={"layer": -1, "head": -1})`` (`analysis.store.format.LLC_MODEL`);
        one head type's rows are ``dense(HEAD_TYPES_TABLE, "holds", at={"type": "induction"})``.
        A string key is picked the same way: ``dense(ULTRAMETRICITY, "share", at={"distance": "qk_frob"})``;
        where ``at`` does not name one the table picks it (`analysis.store.format.TableSpec.pick`: the refined LLC
        under the store's default distribution, ``at={"data": "repeats"}`` under another).
        Rows outside the axes (such a whole-model row, without ``at``) are left out.

        Returns:
            float64, read-only; NaN where the table has no row (a step without the lens, a step
            the lens skipped); None when the store does not have the table.

        Raises:
            KeyError: a column that is not a numeric column of the table, or a table not keyed this way.
            StoreError: the file is unreadable.
        """
        at = dict(at or {})
        if spec.pick is not None and any(c not in at for c in spec.pick(spec.empty())):
            table = self.read(spec)
            if table is None:
                return None
            at = {**spec.pick(table), **at}  # e.g. the refined LLC under the store's default distribution
        chains = int(((self.meta.llc or {}).get("sampler") or {}).get("chains") or 0)
        sizes = {
            "layer": self.n_layers,
            "layer_a": self.n_layers,
            "layer_b": self.n_layers,
            "head": self.n_heads,
            "head_a": self.n_heads,
            "head_b": self.n_heads,
            "chain": chains,
        }
        axes = [c for c in spec.sort if c != "step" and c not in at]
        if spec.sort[:1] != ("step",) or any(c not in sizes for c in axes) or any(c not in spec.sort for c in at):
            raise KeyError(f"{spec.file} is keyed by {spec.sort}: not a dense (step, layer/head) table")
        if column in spec.sort or column not in spec.schema.names:
            raise KeyError(f"{spec.file} has no value column {column!r}; columns: {', '.join(spec.schema.names)}")
        cache = ("dense", f"{spec.name}:{column}:{sorted(at.items())}:{self.include_mixed}")
        if cache in self._cache:
            return self._cache[cache]
        table = self.read(spec)
        if table is None:
            return None
        shape = (len(self.steps), *(sizes[c] for c in axes))
        out = np.full(shape, np.nan)
        rows = self._step_rows(table["step"].to_numpy())
        keep = rows >= 0
        for name, value in at.items():
            keep &= table[name].to_numpy() == value
        index = [rows]
        for name, size in zip(axes, shape[1:], strict=True):
            values = table[name].to_numpy()
            keep &= (values >= 0) & (values < size)
            index.append(values)
        out[tuple(i[keep] for i in index)] = table[column].to_numpy(zero_copy_only=False).astype(np.float64)[keep]
        out.setflags(write=False)
        self._cache[cache] = out
        return out

    def require(self, spec: TableSpec, column: str, *, at: Mapping[str, int | str] | None = None) -> np.ndarray:
        """`dense` of a table the caller knows the store has (`has`).

        Raises:
            StoreError: the store does not have the table after all.
        """
        values = self.dense(spec, column, at=at)
        if values is None:
            raise StoreError(f"store {str(self.path)!r} has no {spec.file}")
        return values

    def _step_rows(self, steps: np.ndarray) -> np.ndarray:
        """Position of each of ``steps`` in `steps` (-1 for a step not shown)."""
        index = {int(s): i for i, s in enumerate(self.steps)}
        return np.array([index.get(int(s), -1) for s in steps], dtype=np.int64)


def is_store(path: str | Path) -> bool:
    """Whether ``path`` is a store directory (it has a ``meta.json``; `open_store` checks the rest)."""
    return (Path(path) / META_FILE).is_file()


def store_version(path: str | Path) -> int:
    """A number that changes with every commit to the store (its ``meta.json``'s mtime in ns; 0 if absent).

    Every commit replaces ``meta.json``, so a cache keyed by this opens the new version after a commit.
    """
    try:
        return (Path(path) / META_FILE).stat().st_mtime_ns
    except OSError:
        return 0


def read_table(path: str | Path, spec: TableSpec) -> pa.Table | None:
    """A whole table of the store at ``path``, or None when the store does not have it.

    Raises:
        StoreError: the file exists but cannot be read.
    """
    file = Path(path) / spec.file
    if not file.is_file():
        return None
    try:
        return pq.read_table(file)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(f"cannot read {str(file)!r}: {exc}") from exc


def open_store(path: str | Path) -> Store:
    """Open a store and check that its files agree.

    Args:
        path: the store directory (holding ``meta.json`` and ``heads.parquet``).

    Returns:
        The opened `Store` (partial duplicates hidden; see `Store.view`).

    Raises:
        StoreError: missing files, missing columns, or rows that disagree with
            ``meta.json`` about which checkpoints are done.
        SchemaVersionError: the store is from a newer schema version.
    """
    path = Path(path)
    meta = read_meta(path)
    heads_path = path / HEADS.file
    if not heads_path.is_file():
        if meta.done_steps:
            raise StoreError(f"{str(heads_path)!r} is missing but meta.json lists finished checkpoints.")
        keys = HEADS.empty().select(["step", "layer", "head", "matrix"])
        names = HEADS.schema.names
        parquet = None
    else:
        try:
            parquet = pq.ParquetFile(heads_path)
            keys = parquet.read(columns=["step", "layer", "head", "matrix"])
            names = parquet.schema_arrow.names
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"cannot read {str(heads_path)!r}: {exc}") from exc
    missing = [c for c in HEADS_COLUMNS if c not in names]
    if missing:
        raise StoreError(f"{str(heads_path)!r} lacks columns {missing}; rewrite it with `python -m headwatch.precompute`.")
    check_consistent(meta, keys, where=str(path))
    return Store(path=path, meta=meta, keys=keys, file=parquet)


def check_consistent(meta: Meta, keys: pa.Table, *, where: str) -> None:
    """Raise `StoreError` unless the table holds exactly one full set of rows per done step."""
    per_step = meta.model.n_layers * meta.model.n_heads * len(meta.matrices)
    steps = keys["step"].to_numpy() if keys.num_rows else np.zeros(0, dtype=np.int64)
    uniq, counts = np.unique(steps, return_counts=True)
    expected = meta.done_steps
    if uniq.tolist() != expected:
        extra = sorted(set(uniq.tolist()) - set(expected))
        lacking = sorted(set(expected) - set(uniq.tolist()))
        raise StoreError(
            f"store {where!r}: heads.parquet and meta.json disagree (rows for steps not in meta: "
            f"{extra[:5]}; meta steps without rows: {lacking[:5]}). Re-run `python -m headwatch.precompute` "
            "on it to repair, or recompute the store."
        )
    bad = uniq[counts != per_step]
    if len(bad):
        raise StoreError(
            f"store {where!r}: step {int(bad[0])} has {int(counts[counts != per_step][0])} rows, "
            f"expected {per_step} (layers x heads x matrices)."
        )
