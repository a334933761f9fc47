"""Rewrite a store of an older schema version as the current one, atomically, without its checkpoints.

    python -m headwatch.precompute.store.upgrade STORE [STORE ...]

Exit status: 0 done; 2 a path that is not a store, a store of a newer version or one another run is writing
(one line each, nothing written to it; the others are upgraded); 1 a store that could not be written.

A precompute run upgrades a store in its first commit, but that needs the checkpoints;
this needs only the store. It reads the store through `analysis.store` (which fills in
what later versions added, `analysis.store.older_versions`), derives the null-model columns of
``heads.parquet`` when it lacks them, gives it NaN circuit columns and ``overlaps.parquet``
its ``matrix`` and NaN ``rel_change`` columns (version 3: values that need the weights;
a precompute run with the checkpoints fills them), and commits under the store's lock.
Other tables are carried over unchanged. A current store is left as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headwatch.analysis.store import read_meta, read_table
from headwatch.analysis.store.format import HEADS, SCHEMA_VERSION
from headwatch.analysis.store.lenses.overlaps import OVERLAPS
from headwatch.analysis.store.older_versions import complete_heads, complete_overlaps
from headwatch.precompute.store.lock import store_lock
from headwatch.precompute.store.writer import commit_store


def upgrade_store(path: str | Path) -> bool:
    """Upgrade the store at ``path`` to `SCHEMA_VERSION`; whether anything was written.

    Raises:
        StoreError: the store is unreadable, or another run holds its lock.
        SchemaVersionError: the store is newer than this code.
    """
    path = Path(path)
    read_meta(path)  # not a store: said before anything is written, its lock file included
    with store_lock(path):
        meta = read_meta(path)
        heads = read_table(path, HEADS)
        overlaps = read_table(path, OVERLAPS)
        complete = heads is None or heads.schema.equals(HEADS.schema)
        overlaps_complete = overlaps is None or overlaps.schema.equals(OVERLAPS.schema)
        if not meta.upgraded and complete and overlaps_complete:
            return False
        tables = {} if complete else {HEADS.name: HEADS.sorted(complete_heads(heads, d_model=meta.model.d_model))}
        if not overlaps_complete:
            tables[OVERLAPS.name] = OVERLAPS.sorted(complete_overlaps(overlaps))
        commit_store(path, meta, tables)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwatch.precompute.store.upgrade", description=__doc__.splitlines()[0])
    parser.add_argument("stores", nargs="+", help="store directories")
    args = parser.parse_args(argv)
    status = 0
    for store in args.stores:
        try:
            done = upgrade_store(store)
        except ValueError as exc:  # StoreError and SchemaVersionError: not a store, a newer one, locked
            print(f"error: {exc}", file=sys.stderr)
            status = max(status, 2)
            continue
        except OSError as exc:
            print(f"error: {store}: {exc}", file=sys.stderr)
            status = max(status, 1)
            continue
        print(f"{store}: {'upgraded to' if done else 'already at'} schema version {SCHEMA_VERSION}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
