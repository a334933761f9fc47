"""Checkpoints as Ray tasks: the run's driver submits, collects in step order, and alone writes.

Each checkpoint is one task running `_checkpoint_task`: it re-opens the source from
picklable parameters (``--source``, the fetch settings, the token), fetches the
checkpoint, and runs `precompute.job.work.checkpoint_work`, the function the local
executor runs, with the torch thread count the local executor computes with (the
spectral columns depend on it in their last bits). It returns the `Work` (rows and
singular vectors, never the tensors) or the per-checkpoint error, which the driver
records as failed exactly as a local run does.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

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

# Seconds between looks at the cluster's head while the driver waits for a result (Ray itself
# ends a driver whose head is gone only after gcs_rpc_server_reconnect_timeout_s, 60 s).
_POLL_S = 2.0

# Errors a task hands back as its result: per-checkpoint failures, and the network's.
_RETURNED_ERRORS = (*CHECKPOINT_ERRORS, HubUnreachableError)


@dataclass(frozen=True)
class _Failed:
    """A task's per-checkpoint error, returned rather than raised so Ray neither retries nor wraps it."""

    error: BaseException


@dataclass(frozen=True)
class _Job:
    """What every task of a run needs besides its checkpoint (pickled once per task)."""

    source: str
    fetch: FetchSettings
    token: str | bool | None
    shape: ModelShape
    settings: StoreSettings
    threads: int
    jobs: Mapping[str, PassJob] | None = None  # the lens pass jobs (`precompute.job.context.PassJob`)


def _checkpoint_task(job: _Job, ref: CheckpointRef, known: dict[str, int]) -> Work | _Failed:
    """Fetch and compute one checkpoint on a Ray worker (`precompute.job.work.checkpoint_work`)."""
    torch.set_num_threads(job.threads)
    meter = Meter()
    scratch = Path(tempfile.mkdtemp(prefix="headwatch-fetch-"))  # .bin downloads of this task only
    try:
        src = open_source(job.source, scratch=scratch, fetch=job.fetch, meter=meter, token=job.token)
        fetched = src.fetch(
            ref, job.shape, skip=lambda sha: sha in known, matrices=job.settings.head_matrices, layers=job.settings.layers
        )
        _die_once()
        work = checkpoint_work(fetched, job.shape, job.settings, known=known, jobs=job.jobs, src=src)
    except _RETURNED_ERRORS as exc:
        return _Failed(exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    work.fetched, work.requests, work.peak_disk = meter.fetched, meter.requests, meter.peak_disk
    return work


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
    """Run each checkpoint as a Ray task; yield the results in step order.

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
        job = ray.put(_Job(self.source, self.fetch, self.token, shape, settings, self.threads, jobs))
        task = ray.remote(_checkpoint_task).options(
            num_cpus=self.threads,
            num_gpus=1 if settings.device == "cuda" else 0,
            max_retries=self.options.max_retries,
            runtime_env={"env_vars": forwarded_environment()},
        )
        waiting = collections.deque(todo)
        in_flight: collections.deque[tuple[CheckpointRef, ray.ObjectRef]] = collections.deque()

        def submit() -> None:
            while waiting and len(in_flight) < self.max_in_flight:
                ref = waiting.popleft()
                in_flight.append((ref, task.remote(job, ref, dict(known()))))

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

    def _get(self, ref: CheckpointRef, pending: ray.ObjectRef) -> Work | _Failed:
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

    def _unwrap(self, value: Work | _Failed) -> Work:
        if isinstance(value, _Failed):
            raise value.error
        self.meter.merge(value.fetched, value.requests, value.peak_disk)
        return value
