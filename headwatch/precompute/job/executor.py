"""Where the per-checkpoint work runs: here, one checkpoint fetched ahead, or on a Ray cluster.

`open_executor` picks one from `precompute.settings.RunOptions.executor`:

- ``local`` (`LocalExecutor`): checkpoint t+1 is fetched in a background thread
  (`precompute.job.prefetch.Prefetcher`) while t is computed in the run's thread; at most
  two checkpoints are held at once.
- ``ray`` (`precompute.job.ray_executor.RayExecutor`, imported only then): one Ray task per
  checkpoint, at most a bounded number in flight.

The same executor runs a computation's per-checkpoint work in its fill (`each`: the refined LLC's):
here, one checkpoint after the other in the run's thread, or one Ray task per checkpoint.
Either way the run (`precompute.job.run`) and the computations' fills are the only writers:
they settle and commit each result in step order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from headwatch.families.family import ModelShape
from headwatch.precompute.job.context import PassJob
from headwatch.precompute.job.prefetch import Prefetcher
from headwatch.precompute.job.work import Executor, Results, Work, checkpoint_work
from headwatch.precompute.settings import RunOptions, StoreSettings
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched

R = TypeVar("R")


class LocalExecutor:
    """Fetch one checkpoint ahead in a thread, compute in the caller's thread.

    Args:
        src: the run's source.
        scratch: the run's scratch folder (the computations' temporary files).
    """

    def __init__(self, src: CheckpointSource, scratch: Path):
        self.src, self.scratch = src, scratch

    def results(
        self,
        todo: list[CheckpointRef],
        *,
        shape: ModelShape,
        settings: StoreSettings,
        known: Callable[[], Mapping[str, int]],
        jobs: Mapping[str, PassJob] | None = None,
    ) -> Results:
        src = self.src
        seen = dict(known())  # the fetch thread's view: known weights plus those it read this run

        def fetch_one(ref: CheckpointRef) -> Fetched:
            fetched = src.fetch(ref, shape, skip=lambda sha: sha in seen, matrices=settings.head_matrices, layers=settings.layers)
            if fetched.tensors is not None:
                seen.setdefault(fetched.sha256, ref.step)
            return fetched

        with Prefetcher(fetch_one, todo, stop=src.stop) as prefetched:
            for ref, fetch in prefetched:

                def work(fetch: Callable[[], Fetched] = fetch) -> Work:
                    return checkpoint_work(fetch(), shape, settings, known=known(), jobs=jobs, src=src)

                yield ref, work

    def each(
        self,
        fn: Callable[..., R],
        todo: Sequence[tuple[CheckpointRef, Any]],
        *,
        device: str,
        progress: Callable[[], None] | None = None,
    ) -> Generator[tuple[CheckpointRef, Callable[[], R]], None, None]:
        """``fn`` of each checkpoint of ``todo``, computed in the caller's thread when it calls the result
        (`precompute.job.context.TaskExecutor.each`)."""
        for ref, arg in todo:
            yield ref, functools.partial(fn, self.src, ref, arg, scratch=self.scratch, progress=progress)


def open_executor(options: RunOptions, src: CheckpointSource, source: str, *, scratch: Path, meter: Meter) -> Executor:
    """The executor ``options.executor`` names, connected (a Ray cluster is joined, or started
    on this machine, here: before the store is opened).

    Args:
        options: the run's options (``executor``, ``ray``, ``fetch``, ``token``).
        src: the source as the driver opened it (the local executor reads through it).
        source: ``--source`` as a Ray task re-opens it (a local folder: its absolute path).
        scratch: the run's scratch folder (the local executor's computations write their temporary files there).
        meter: the run's meter; a Ray task's transfers are added to it.

    Raises:
        ClusterError: the Ray cluster cannot be reached.
        ValueError: ``ray`` is not installed, or the cluster has fewer CPUs than a task asks.
    """
    if options.executor == "local":
        return LocalExecutor(src, scratch)
    try:
        import ray  # noqa: F401  (only to say what is missing; precompute.job.ray_executor uses it)
    except ImportError:
        raise ValueError("--executor ray needs ray: pip install -r requirements-precompute.txt") from None
    from headwatch.precompute.job.ray_executor import RayExecutor

    return RayExecutor(source, options.ray, fetch=options.fetch, token=options.token, meter=meter)
