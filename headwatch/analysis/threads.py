"""One task per core: CPU work split across Python threads of one torch thread each.

Small LAPACK calls, memory-bound passes and single-threaded kernels (`analysis.stats.fused`) gain
little from threads inside one call, and lose much on a shared machine, where idle
intra-op threads spin. Independent tasks, one per core, keep every core busy instead:
torch, LAPACK and the numba kernels release the GIL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


def map_per_core(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, in order. With t > 1 torch threads, the items run on
    min(t, len(items)) Python threads while torch uses one thread each; the caller's thread
    count is restored afterwards, also when ``fn`` raises (the first exception propagates).
    A call made inside a task (torch then has one thread) runs in order on that thread."""
    items = list(items)
    threads = torch.get_num_threads()
    workers = min(len(items), threads)
    if workers < 2:
        return [fn(x) for x in items]
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)
