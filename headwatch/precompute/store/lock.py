"""One writer per store: an exclusive, non-blocking file lock beside it."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headwatch.analysis.errors import StoreError


@contextmanager
def store_lock(out: Path) -> Iterator[None]:
    """Hold ``.NAME.lock`` next to the store, so two runs (or a run and a push) never write one store.

    Raises:
        StoreError: another process holds the lock.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.parent / f".{out.name}.lock"
    with open(lock_path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise StoreError(f"another precompute run is writing {str(out)!r} (lock {str(lock_path)!r} is held)") from exc
        yield
