"""Read a statistics store: ``meta.json`` plus ``heads.parquet`` in one directory.

A store is a public format (README "The statistics store"); this reader checks
its version and its internal consistency, then hands out the table and dense
arrays indexed ``[step, layer, head]`` (``[step, layer, head, k]`` for the list
columns). It imports neither torch nor streamlit. Writing lives in
``precompute/store_writer.py``; the writer commits both files in one atomic step,
so the reader never has to guess which of the two is newer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.errors import SchemaVersionError, StoreError
from analysis.schema import (
    HEADS_COLUMNS,
    KEY_COLUMNS,
    LIST_COLUMNS,
    NULL_COLUMNS,
    OVERLAPS_FILE,
    SCALAR_COLUMNS,
    SCHEMA_VERSION,
)

META_FILE = "meta.json"
HEADS_FILE = "heads.parquet"


def read_meta(path: str | Path) -> dict[str, Any]:
    """Read and version-check a store's ``meta.json``.

    Args:
        path: the store directory.

    Returns:
        The parsed metadata.

    Raises:
        StoreError: the directory or its ``meta.json`` is missing or unreadable.
        SchemaVersionError: the store was written by a newer schema version.
    """
    path = Path(path)
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise StoreError(
            f"{str(path)!r} is not a statistics store: it has no {META_FILE}. "
            "Point at a directory written by `python -m precompute`."
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read {str(meta_path)!r}: {exc}") from exc
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise StoreError(f"{str(meta_path)!r} has no integer schema_version (found {version!r}).")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"store {str(path)!r} has schema_version {version}, newer than the {SCHEMA_VERSION} "
            "this code reads; upgrade this tool (git pull) to open it."
        )
    if version < 1:
        raise SchemaVersionError(f"store {str(path)!r} has invalid schema_version {version}.")
    return meta


def done_steps(meta: dict[str, Any]) -> list[int]:
    """Steps whose rows are in ``heads.parquet``: every listed checkpoint that is not a duplicate."""
    return sorted(c["step"] for c in meta.get("checkpoints", []) if c.get("duplicate_of") is None)


@dataclass(frozen=True)
class Store:
    """An opened store. Cheap to create: only the row keys are read at open; each column is
    read from ``heads.parquet`` on first use (list columns in batches, straight into one
    float32 array) and cached.

    Attributes:
        path: the store directory.
        meta: the parsed ``meta.json``.
        keys: the key columns (step, layer, head, matrix) of ``heads.parquet``, in file order,
            which is sorted by (step, layer, head, matrix).
    """

    path: Path
    meta: dict[str, Any]
    keys: pa.Table
    # heads.parquet as opened by `open_store`: later column reads come from this same file
    # even if a precompute commit swaps the store directory meanwhile (None: no rows yet)
    file: pq.ParquetFile | None = field(default=None, repr=False, compare=False)
    _cache: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def arrow(self) -> pa.Table:
        """The whole ``heads.parquet`` as a pyarrow table (read on first access)."""
        return self.file.read() if self.file is not None else empty_heads_table()

    @cached_property
    def column_names(self) -> list[str]:
        """Columns of ``heads.parquet`` (from its schema, without reading data)."""
        return self.file.schema_arrow.names if self.file is not None else heads_arrow_schema().names

    def _read(self, column: str) -> np.ndarray:
        """One column, all rows in file order: ``(rows,)`` float64 or ``(rows, k)`` float32 for list columns."""
        rows = self.keys.num_rows
        if "arrow" in self.__dict__ or rows == 0:
            col = self.arrow[column].combine_chunks()
            if column in LIST_COLUMNS:
                return col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(rows, -1)
            return col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
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
                raise StoreError(f"{str(self.path / HEADS_FILE)!r}: the lists of {column!r} differ in length; "
                                 "the file is corrupt: recompute the store")
            out[start : start + n] = values.reshape(n, -1)
            start += n
        return out

    @property
    def model(self) -> dict[str, Any]:
        return self.meta["model"]

    @property
    def n_layers(self) -> int:
        return int(self.model["n_layers"])

    @property
    def n_heads(self) -> int:
        return int(self.model["n_heads"])

    @property
    def d_head(self) -> int:
        return int(self.model["d_head"])

    @cached_property
    def steps(self) -> np.ndarray:
        """Steps with statistics, ascending (duplicates excluded): axis 0 of every array."""
        return np.asarray(done_steps(self.meta), dtype=np.int64)

    @cached_property
    def checkpoints(self) -> pd.DataFrame:
        """Every checkpoint in ``meta.json`` (duplicates included) as a table."""
        return pd.DataFrame(self.meta.get("checkpoints", []))

    @cached_property
    def table(self) -> pd.DataFrame:
        """``heads.parquet`` as pandas; index columns by name (``df["head"]``, not ``df.head``)."""
        return self.arrow.to_pandas()

    def array(self, column: str, *, matrix: str = "qk") -> np.ndarray:
        """Dense array of one column for one matrix kind.

        Args:
            column: a scalar column (returns ``[step, layer, head]``) or a list column,
                ``sv`` or ``hist_z`` (returns ``[step, layer, head, k]``). The
                null-model columns are derived from ``sv`` when the store lacks them.
            matrix: which product, ``"qk"``.

        Returns:
            float64 for scalars, float32 for list columns; axis 0 follows ``self.steps``.

        Raises:
            KeyError: unknown column or matrix.
        """
        key = (column, matrix)
        if key in self._cache:
            return self._cache[key]
        if column not in SCALAR_COLUMNS + NULL_COLUMNS + LIST_COLUMNS:
            raise KeyError(f"unknown column {column!r}; choose from {SCALAR_COLUMNS + NULL_COLUMNS + LIST_COLUMNS}")
        if column in NULL_COLUMNS and column not in self.column_names:
            from analysis.nullmodel import NULL_RATIO_STATS, null_columns

            spectral = {name: self.array(name, matrix=matrix) for name in NULL_RATIO_STATS}
            derived = null_columns(self.array("sv", matrix=matrix), spectral, d_model=int(self.model["d_model"]))
            for name, values in derived.items():
                values.setflags(write=False)
                self._cache[(name, matrix)] = values
            return self._cache[key]
        mask = pc.equal(self.keys["matrix"], matrix).to_numpy(zero_copy_only=False)
        shape = (len(self.steps), self.n_layers, self.n_heads)
        if int(mask.sum()) != int(np.prod(shape)):
            raise KeyError(f"store {str(self.path)!r} has no complete {matrix!r} rows")
        values = self._read(column)
        if not mask.all():
            values = values[mask]
        out = values.reshape(shape + values.shape[1:])
        out.setflags(write=False)
        self._cache[key] = out
        return out


    def overlaps(self, layer: int, head: int) -> tuple[np.ndarray, np.ndarray] | None:
        """One head's singular-vector overlaps between consecutive checkpoints (``overlaps.parquet``).

        Only that head's layer is decoded (the file has one row group per layer).

        Args:
            layer, head: the head.

        Returns:
            ``(o_u, o_v)``, each ``(len(steps) - 1, K, K)`` float64, where entry ``[t]`` holds
            ``|<u_a(steps[t]), u_b(steps[t+1])>|`` at ``[a, b]``; NaN for a pair the file
            lacks. None when the store has no overlaps.

        Raises:
            StoreError: the file is unreadable.
        """
        k = int((self.meta.get("overlaps") or {}).get("k") or 0)
        path = self.path / OVERLAPS_FILE
        if not k or not path.is_file():
            return None
        try:
            table = pq.read_table(path, filters=[("layer", "=", int(layer)), ("head", "=", int(head))])
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"cannot read {str(path)!r}: {exc}; rerun `python -m precompute` on the store to rewrite it") from exc
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
        for row, (a, b) in enumerate(zip(prev.tolist(), nxt.tolist())):
            t = position.get(a)
            if t is not None and int(self.steps[t + 1]) == b:  # only pairs of consecutive steps of this store
                o_u[t], o_v[t] = values_u[row], values_v[row]
        return o_u, o_v


def open_store(path: str | Path) -> Store:
    """Open a store and check that its two files agree.

    Args:
        path: the store directory (holding ``meta.json`` and ``heads.parquet``).

    Returns:
        The opened `Store`.

    Raises:
        StoreError: missing files, missing columns, or rows that disagree with
            ``meta.json`` about which checkpoints are done.
        SchemaVersionError: the store is from a newer schema version.
    """
    path = Path(path)
    meta = read_meta(path)
    for key in ("model", "checkpoints", "hist_edges"):
        if key not in meta:
            raise StoreError(f"{str(path / META_FILE)!r} lacks the required key {key!r}.")
    heads_path = path / HEADS_FILE
    if not heads_path.is_file():
        if done_steps(meta):
            raise StoreError(f"{str(heads_path)!r} is missing but meta.json lists finished checkpoints.")
        arrow = empty_heads_table().select(list(KEY_COLUMNS))
        names = heads_arrow_schema().names
        parquet = None
    else:
        try:
            parquet = pq.ParquetFile(heads_path)
            arrow = parquet.read(columns=list(KEY_COLUMNS))
            names = parquet.schema_arrow.names
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"cannot read {str(heads_path)!r}: {exc}") from exc
    missing = [c for c in HEADS_COLUMNS if c not in names]
    if missing:
        raise StoreError(f"{str(heads_path)!r} lacks columns {missing}; rewrite it with `python -m precompute`.")
    check_consistent(meta, arrow, where=str(path))
    return Store(path=path, meta=meta, keys=arrow, file=parquet)


def check_consistent(meta: dict[str, Any], arrow: pa.Table, *, where: str) -> None:
    """Raise `StoreError` unless the table holds exactly one full set of rows per done step."""
    model = meta["model"]
    per_step = int(model["n_layers"]) * int(model["n_heads"]) * len(meta.get("matrices", ["qk"]))
    steps = arrow["step"].to_numpy() if arrow.num_rows else np.zeros(0, dtype=np.int64)
    uniq, counts = np.unique(steps, return_counts=True)
    expected = done_steps(meta)
    if uniq.tolist() != expected:
        extra = sorted(set(uniq.tolist()) - set(expected))
        lacking = sorted(set(expected) - set(uniq.tolist()))
        raise StoreError(
            f"store {where!r}: heads.parquet and meta.json disagree (rows for steps not in meta: "
            f"{extra[:5]}; meta steps without rows: {lacking[:5]}). Re-run `python -m precompute` "
            "on it to repair, or recompute the store."
        )
    bad = uniq[counts != per_step]
    if len(bad):
        raise StoreError(
            f"store {where!r}: step {int(bad[0])} has {int(counts[counts != per_step][0])} rows, "
            f"expected {per_step} (layers x heads x matrices)."
        )


def heads_arrow_schema(*, null_columns: bool = False) -> pa.Schema:
    """The pyarrow schema of ``heads.parquet``, optionally with the null-model columns."""
    fields = [
        pa.field("step", pa.int64()),
        pa.field("layer", pa.int32()),
        pa.field("head", pa.int32()),
        pa.field("matrix", pa.string()),
    ]
    fields += [pa.field(c, pa.float64()) for c in SCALAR_COLUMNS]
    fields += [pa.field(c, pa.list_(pa.float32())) for c in LIST_COLUMNS]
    if null_columns:
        fields += [pa.field(c, pa.float64()) for c in NULL_COLUMNS]
    return pa.schema(fields)


def overlaps_arrow_schema() -> pa.Schema:
    """The pyarrow schema of ``overlaps.parquet`` (`analysis.schema.OVERLAP_COLUMN_DOCS`)."""
    return pa.schema([
        pa.field("layer", pa.int32()),
        pa.field("head", pa.int32()),
        pa.field("prev_step", pa.int64()),
        pa.field("step", pa.int64()),
        pa.field("overlap_u", pa.list_(pa.float32())),
        pa.field("overlap_v", pa.list_(pa.float32())),
    ])


def empty_heads_table(*, null_columns: bool = False) -> pa.Table:
    return heads_arrow_schema(null_columns=null_columns).empty_table()


def add_null_columns(table: pa.Table, *, d_model: int) -> pa.Table:
    """The table with the null-model columns, derived from ``sv`` where it lacks them.

    Lets a precompute run resume a store written before those columns existed.
    """
    if all(c in table.column_names for c in NULL_COLUMNS):
        return table
    from analysis.nullmodel import NULL_RATIO_STATS, null_columns

    table = table.drop_columns([c for c in NULL_COLUMNS if c in table.column_names])
    if table.num_rows == 0:
        return empty_heads_table(null_columns=True)
    sv = table["sv"].combine_chunks()
    values = sv.flatten().to_numpy(zero_copy_only=False).reshape(table.num_rows, -1)
    spectral = {name: table[name].to_numpy() for name in NULL_RATIO_STATS}
    derived = null_columns(values, spectral, d_model=d_model)
    for name in NULL_COLUMNS:
        table = table.append_column(pa.field(name, pa.float64()), pa.array(derived[name]))
    return table


def sort_heads(table: pa.Table) -> pa.Table:
    """Rows in canonical order (step, layer, head, matrix)."""
    return table.sort_by([(c, "ascending") for c in KEY_COLUMNS])
