"""Fetch the next checkpoint in a background thread while the current one is computed.

At most two checkpoints are held at once: the one being computed and the one being
fetched. That is the whole of the job's memory and scratch-disk bound, whatever
the length of the suite. The worker is a daemon thread, so Ctrl-C ends the process
without waiting for a transfer; `close` also asks transfers in flight to stop.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

R = TypeVar("R")
T = TypeVar("T")


class _Job(Generic[T]):
    def __init__(self, fn: Callable[[], T]):
        self.value: T  # set by _run unless fn raised (then error is set and value never read)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True, name="precompute-fetch")
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:  # handed to the consumer, which decides
            self.error = exc

    def result(self) -> T:
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.value


class Prefetcher(Generic[R, T]):
    """Iterate ``(item, fetch)`` pairs where ``fetch()`` returns ``fn(item)`` or raises its error;
    ``fn(items[i + 1])`` runs while the caller works on item ``i``.

    Args:
        fn: the fetch, run in a background thread, one item at a time, in order.
        items: what to fetch.
        stop: set on `close`, so that ``fn`` can abandon a transfer.
    """

    def __init__(self, fn: Callable[[R], T], items: Sequence[R], *, stop: threading.Event | None = None):
        self._fn = fn
        self._items = list(items)
        self._stop = stop
        self._pending: _Job[T] | None = None

    def __iter__(self) -> Iterator[tuple[R, Callable[[], T]]]:
        if not self._items:
            return
        self._pending = _Job(functools.partial(self._fn, self._items[0]))
        for i, item in enumerate(self._items):
            job = self._pending
            assert job is not None  # the job for item i was started with item i - 1's (or above, for item 0)
            # wait for this item before starting the next: never more than two in hand
            job._thread.join()
            nxt = self._items[i + 1] if i + 1 < len(self._items) else None
            self._pending = _Job(functools.partial(self._fn, nxt)) if nxt is not None else None
            yield item, job.result

    def close(self) -> None:
        """Ask the fetch in flight to stop (it is a daemon thread; nobody waits for it)."""
        if self._stop is not None:
            self._stop.set()

    def __enter__(self) -> Prefetcher[R, T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
