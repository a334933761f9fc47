"""Atomic commits of a statistics store: every changed file changes together or not at all.

A commit writes the complete new store (the new ``meta.json`` and the tables that
changed, named by `analysis.store.lenses.TABLES`, plus hard links to every other file) into a hidden
staging directory beside it, flushes it to disk, then swaps the staging
directory and the store in one ``renameat2(RENAME_EXCHANGE)`` call. A process
killed at any instant leaves either the old store or the new one, never a mix;
the leftover staging directory is cleared by the next commit.

Where the kernel or filesystem has no atomic exchange (non-Linux, some network
filesystems) the fallback replaces each changed table and then ``meta.json``,
each atomically; ``meta.json`` is the commit record, and a reader that finds
rows for a step meta does not list reports it and the next run repairs it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store.format import META_FILE, SCHEMA_VERSION
from headwatch.analysis.store.lenses import TABLES
from headwatch.analysis.store.meta import Meta

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def staging_dir(store: Path) -> Path:
    """Hidden sibling where a commit is assembled (``.NAME.staging``)."""
    return store.parent / f".{store.name}.staging"


def commit_store(store: str | Path, meta: Meta, tables: Mapping[str, pa.Table] | None = None) -> None:
    """Atomically replace the store's ``meta.json`` and the given tables.

    Args:
        store: the store directory; created if missing.
        meta: the full metadata to write (always at the current schema version).
        tables: whole tables by name (``"heads"``, ``"overlaps"``; `analysis.store.lenses.TABLES`),
            each with its declared schema, in its sort order; their row groups follow the declaration.
            Files not named here are carried over unchanged.

    Raises:
        ValueError: a table is not declared or does not have its schema (a bug, not bad input).
        StoreError: a registered table that would be carried over has another schema (a store of an
            older version, not upgraded): the commit would label it as the current version.
    """
    tables = dict(tables or {})
    n_steps = len(meta.done_steps)
    for name, table in tables.items():
        spec = TABLES.get(name)
        if spec is None or not table.schema.equals(spec.schema):
            raise ValueError(f"table {name!r} is not registered with this schema: {table.schema}")
    store = Path(store)
    store.parent.mkdir(parents=True, exist_ok=True)
    stage = staging_dir(store)
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    files = {TABLES[name].file: table for name, table in tables.items()}
    if store.is_dir():
        _check_carried_over(store, set(files))
        for item in store.iterdir():
            if item.name not in files and item.name != META_FILE and item.is_file():
                os.link(item, stage / item.name)
    for name, table in tables.items():
        spec = TABLES[name]
        rows = spec.row_group_rows(meta.model.n_layers, meta.model.n_heads, n_steps)
        # the declared schema to the letter: a table read back from Parquet names its list items "element"
        # where a new one says "item" (Schema.equals ignores that), and a resumed store must keep its bytes; the
        # table's own metadata kept (pandas' dtypes: a nullable step column reads back as Int64, not float64)
        schema = spec.schema.with_metadata(table.schema.metadata) if table.schema.metadata else spec.schema
        _write_parquet(stage / spec.file, table.cast(schema), row_group_size=rows)
    _write_json(stage / META_FILE, meta.to_dict())
    _fsync_dir(stage)
    if not store.exists():
        os.rename(stage, store)
        _fsync_dir(store.parent)
        return
    if _exchange(stage, store):
        _fsync_dir(store.parent)
        shutil.rmtree(stage)  # now holds the previous version
        return
    # Fallback: one atomic rename per file, meta.json (the commit record) last.
    for name in files:
        os.replace(stage / name, store / name)
    os.replace(stage / META_FILE, store / META_FILE)
    _fsync_dir(store)
    shutil.rmtree(stage)


def _check_carried_over(store: Path, replaced: set[str]) -> None:
    """Refuse to carry ``heads.parquet`` over when its schema is not the declared one: its columns are what
    the schema version promises (the other tables' older layouts are read as they are)."""
    for spec in (TABLES["heads"],):
        path = store / spec.file
        if spec.file in replaced or not path.is_file():
            continue
        try:
            schema = pq.read_schema(path)
        except (OSError, pa.ArrowException):
            continue  # an unreadable file is the reader's to report; the commit does not touch it
        if not schema.equals(spec.schema, check_metadata=False):
            raise StoreError(
                f"{str(path)!r} is not in the current schema (version {SCHEMA_VERSION}); nothing was written. "
                f"Upgrade the store first: python -m headwatch.precompute.store.upgrade {store}"
            )


def _write_parquet(path: Path, table: pa.Table, *, row_group_size: int | None = None) -> None:
    """zstd, with float columns (and lists of floats) byte-stream-split and no dictionary: their mantissas look
    random to zstd byte by byte, while split into byte planes the exponent and high bytes compress, the values the
    same bits (what the shipped stores gain: docs/store.md, "Encoding")."""
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    lists = [f.name for f in table.schema if pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type)]
    others = [f.name for f in table.schema if f.name not in floats + lists]
    pq.write_table(
        table,
        path,
        compression="zstd",
        row_group_size=row_group_size,
        use_byte_stream_split=floats + [f"{name}.list.element" for name in lists] or False,  # a list's leaf by its path
        use_dictionary=others or False,
    )
    _fsync_file(path)


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=1, allow_nan=True) + "\n")
    _fsync_file(path)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on directories; the data is already flushed
        _fsync_file(path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with renameat2; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(err, f"renameat2 exchange of {a} and {b} failed: {os.strerror(err)}")
