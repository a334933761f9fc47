"""Checkpoints as Ray tasks: the run's driver submits, collects in step order, and alone writes.

Each checkpoint is one task running `_task`: it re-opens the source from picklable
parameters (``--source``, the fetch settings, the token) with a scratch folder of its
own, sets the torch thread count the local executor computes with (the spectral
columns depend on it in their last bits), and runs one checkpoint's work: for the pass
over the checkpoints `_checkpoint` (fetch, then `precompute.job.work.checkpoint_work`,
the function the local executor runs), for a computation's fill the function it hands
`RayExecutor.each` (the refined LLC's `precompute.lenses.llc.checkpoint_llc_of`, the
function its local fill calls). It returns the result (for a checkpoint its `Work`:
rows and singular vectors, never the tensors) with what its fetches moved, or the
per-checkpoint error, which the driver records as failed exactly as a local run does.

Resources: a task declares ``num_cpus`` (`RayOptions.cpus_per_task`) and, when the
run's device is CUDA, ``num_gpus=1``. At most `RayOptions.max_in_flight` tasks are
submitted and not yet committed, so the driver holds at most that many results:
per checkpoint its rows (Pythia-1.4B: 768 rows, about 1 MB) and its K leading
singular vectors per head (2 x n_layers x n_heads x d_model x K float32: 50 MB for
Pythia-1.4B with K=8).

Faults: a task whose worker process dies is retried by Ray (`RayOptions.max_retries`);
a checkpoint that fails for a data reason comes back as its error; a cluster that
is lost (or a task still dying after its retries) raises
`analysis.errors.ClusterError`, and the store keeps every committed checkpoint.

``ray`` is imported here only, and this module only when ``--executor ray`` is asked.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import ray
import torch
from ray import exceptions as rx

from headwatch.analysis.errors import ClusterError, HubUnreachableError
from headwatch.families.family import ModelShape
from headwatch.precompute.job.context import CHECKPOINT_ERRORS, PassJob
from headwatch.precompute.job.work import Results, Work, checkpoint_work
from headwatch.precompute.settings import FetchSettings, RayOptions, StoreSettings, forwarded_environment, ray_die_once_marker
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.resolve import open_source
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource

# Seconds between looks at the cluster's head while the driver waits for a result (Ray itself
# ends a driver whose head is gone only after gcs_rpc_server_reconnect_timeout_s, 60 s).
_POLL_S = 2.0

# Errors a task hands back as its result: per-checkpoint failures, and the network's.
_RETURNED_ERRORS = (*CHECKPOINT_ERRORS, HubUnreachableError)

R = TypeVar("R")


@dataclass(frozen=True)
class _Failed:
    """A task's per-checkpoint error, returned rather than raised so Ray neither retries nor wraps it."""

    error: BaseException


@dataclass(frozen=True)
class _Done:
    """A task's result, with what its fetches moved (added to the run's meter by the driver)."""

    value: Any
    fetched: int
    requests: int
    peak_disk: int


@dataclass(frozen=True)
class _Where:
    """How every task of a run re-opens the source and computes (pickled once per run)."""

    source: str
    fetch: FetchSettings
    token: str | bool | None
    threads: int


def _task(where: _Where, fn: Callable[..., Any], ref: CheckpointRef, arg: Any) -> _Done | _Failed:
    """``fn(src, ref, arg)`` on a Ray worker, with the source re-opened here (`precompute.job.context.TaskExecutor.each`)."""
    torch.set_num_threads(where.threads)
    meter = Meter()
    scratch = Path(tempfile.mkdtemp(prefix="headwatch-task-"))  # .bin downloads and temporary files of this task only
    try:
        src = open_source(where.source, scratch=scratch, fetch=where.fetch, meter=meter, token=where.token)
        value = fn(src, ref, arg, scratch=scratch, progress=None)
    except _RETURNED_ERRORS as exc:
        return _Failed(exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _Done(value, meter.fetched, meter.requests, meter.peak_disk)


def _checkpoint(
    src: CheckpointSource,
    ref: CheckpointRef,
    known: dict[str, int],
    *,
    scratch: Path,
    progress: Callable[[], None] | None,
    shape: ModelShape,
    settings: StoreSettings,
    jobs: Mapping[str, PassJob] | None,
) -> Work:
    """Fetch and compute one checkpoint (`precompute.job.work.checkpoint_work`), as `_task` runs it."""
    fetched = src.fetch(ref, shape, skip=lambda sha: sha in known, matrices=settings.head_matrices, layers=settings.layers)
    _die_once()
    return checkpoint_work(fetched, shape, settings, known=known, jobs=jobs, src=src)


def _die_once() -> None:
    """The test hook of `precompute.settings.ray_die_once_marker`: kill this worker, once per marker."""
    marker = ray_die_once_marker()
    if marker is None:
        return
    try:
        with open(marker, "x"):
            pass
    except FileExistsError:
        return
    os._exit(1)


def _check_reachable(address: str | None, *, timeout_s: float = 10.0) -> None:
    """Refuse a ``HOST:PORT`` address nothing answers at, at once (``ray.init`` would retry for
    minutes); ``auto``, ``ray://`` and a new local cluster are left to Ray.

    Raises:
        ClusterError: no connection to ``HOST:PORT`` within ``timeout_s``.
    """
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise ClusterError(
            f"nothing answers at --ray-address {address!r} ({exc}); start the cluster (ray start --head) or fix the address"
        ) from None


class RayExecutor:
    """Run each checkpoint as a Ray task, and each checkpoint's work of a computation's fill; yield the results
    in step order.

    Args:
        source: ``--source`` as every worker can open it (a local folder: an absolute path on a
            file system the workers share).
        options: address, CPUs per task, results in flight, retries.
        fetch: the Hub fetch settings, as resolved on the driver.
        token: the Hub token (None: each worker's logged-in user, or HF_TOKEN as forwarded).
        meter: the run's meter; each task's transfers are added to it.

    Raises:
        ClusterError: no cluster at ``options.address``.
        ValueError: more CPUs per task than the cluster has.
    """

    def __init__(self, source: str, options: RayOptions, *, fetch: FetchSettings, token: str | bool | None, meter: Meter):
        if not ray.is_initialized():
            _check_reachable(options.address)
            try:
                ray.init(address=options.address, include_dashboard=False, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, TimeoutError) as exc:
                where = options.address or "a new local cluster"
                raise ClusterError(
                    f"cannot reach the Ray cluster at {where!r} ({exc}); check --ray-address / RAY_ADDRESS, and for a "
                    "cluster with token authentication (Ray's default) set RAY_AUTH_MODE=token and the cluster's "
                    "token (RAY_AUTH_TOKEN or ~/.ray/auth_token)"
                ) from exc
        self.source, self.options, self.fetch, self.token, self.meter = source, options, fetch, token, meter
        self.threads = options.cpus_per_task or torch.get_num_threads()
        cluster_cpus = int(ray.cluster_resources().get("CPU", 0))
        if self.threads > cluster_cpus:
            raise ValueError(f"{self.threads} CPUs per task, but the Ray cluster has {cluster_cpus}; lower --ray-cpus-per-task")
        self.max_in_flight = options.max_in_flight or max(2, 2 * (cluster_cpus // self.threads))
        self.lost = False  # the head stopped answering: nothing more is asked of the cluster

    def results(
        self,
        todo: list[CheckpointRef],
        *,
        shape: ModelShape,
        settings: StoreSettings,
        known: Callable[[], Mapping[str, int]],
        jobs: Mapping[str, PassJob] | None = None,
    ) -> Results:
        compute = ray.put(functools.partial(_checkpoint, shape=shape, settings=settings, jobs=jobs))
        where, task = self._remote(settings.device)
        # the fingerprints as committed when the checkpoint is submitted (a hint: `Work.settle` decides)
        yield from self._stream([(ref, None) for ref in todo], lambda ref, _: task.remote(where, compute, ref, dict(known())))

    def each(
        self,
        fn: Callable[..., R],
        todo: Sequence[tuple[CheckpointRef, Any]],
        *,
        device: str,
        progress: Callable[[], None] | None = None,
    ) -> Generator[tuple[CheckpointRef, Callable[[], R]], None, None]:
        """``fn`` of each checkpoint of ``todo`` as one Ray task each (`precompute.job.context.TaskExecutor.each`);
        ``progress`` is not called (a task reports only its result)."""
        compute = ray.put(fn)
        where, task = self._remote(device)
        yield from self._stream(todo, lambda ref, arg: task.remote(where, compute, ref, arg))

    def _remote(self, device: str) -> tuple[ray.ObjectRef, Any]:
        """The run's `_Where` in the object store, and `_task` with this run's resources and retries."""
        where = ray.put(_Where(self.source, self.fetch, self.token, self.threads))
        task = ray.remote(_task).options(
            num_cpus=self.threads,
            num_gpus=1 if device == "cuda" else 0,
            max_retries=self.options.max_retries,
            runtime_env={"env_vars": forwarded_environment()},
        )
        return where, task

    def _stream(
        self, todo: Sequence[tuple[CheckpointRef, Any]], submit_one: Callable[[CheckpointRef, Any], ray.ObjectRef]
    ) -> Generator[tuple[CheckpointRef, Callable[[], Any]], None, None]:
        """Submit ``todo`` (at most `max_in_flight` at once) and yield each result in order, as a call that returns
        it or raises its per-checkpoint error."""
        waiting = collections.deque(todo)
        in_flight: collections.deque[tuple[CheckpointRef, ray.ObjectRef]] = collections.deque()

        def submit() -> None:
            while waiting and len(in_flight) < self.max_in_flight:
                ref, arg = waiting.popleft()
                in_flight.append((ref, submit_one(ref, arg)))

        try:
            submit()
            while in_flight:
                ref, pending = in_flight.popleft()
                value = self._get(ref, pending)
                # a node's raylet outlives a lost head and its results may keep coming back within _POLL_S: look at
                # the head after each one too, so a lost cluster stops the run here, with our error (exit 3), and not
                # at the shutdown, which finding no head ends the process with Ray's status
                self._check_head()
                submit()  # before the driver commits this one: the cluster stays busy meanwhile
                yield ref, functools.partial(self._unwrap, value)
        finally:
            for _, pending in [] if self.lost else in_flight:  # closed early (an error, Ctrl-C): abandon the rest
                with contextlib.suppress(Exception):  # a cluster already gone; nothing to cancel
                    ray.cancel(pending)

    def _get(self, ref: CheckpointRef, pending: ray.ObjectRef) -> _Done | _Failed:
        """The task's result; between waits of `_POLL_S`, a look at the head node, so that a lost
        cluster stops the run with our error before Ray ends the process with its own."""
        while True:
            try:
                return ray.get(pending, timeout=_POLL_S)
            except rx.GetTimeoutError:
                self._check_head()
            except rx.RayTaskError:
                raise  # a bug in the task, not a fault of the cluster: as a local run would
            except (rx.RayError, ConnectionError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise ClusterError(
                    f"Ray failed on {ref.revision} after {self.options.max_retries} retries ({type(exc).__name__}: {first})"
                ) from exc

    def _check_head(self) -> None:
        """Raise `ClusterError` when the cluster's head (its GCS) no longer accepts connections."""
        address = ray.get_runtime_context().gcs_address
        try:
            _check_reachable(address, timeout_s=5.0)
        except ClusterError:
            self.lost = True
            atexit.unregister(ray.shutdown)  # a shutdown that finds no head ends the process with status 1
            raise ClusterError(f"lost the Ray cluster: its head at {address} no longer answers") from None

    def _unwrap(self, value: _Done | _Failed) -> Any:
        if isinstance(value, _Failed):
            raise value.error
        self.meter.merge(value.fetched, value.requests, value.peak_disk)
        return value.value
