"""Follow a run while it trains: add each checkpoint to the store as soon as its files are complete.

``python -m headwatch.precompute --follow --source RUN_FOLDER --out STORE`` (`follow_run`) runs the ordinary
resumable job (`precompute.run.run_precompute`) in rounds. Each round lists the run folder's checkpoints
whose files are complete (`precompute.sources.checkpoints.incomplete_reason`: a checkpoint being
written is never read) and, when some are not yet in the store, runs the job over them, with every lens
the store already has; then it waits ``poll`` seconds and looks again. It stops

- when the run folder says training finished: ``run.json`` (written last by ``headwatch train``) or
  ``training-finished.json`` (written by `training.watch.HeadwatchCallback` when the Trainer's training
  ends). One last round then reads the folder as a run after training would (every checkpoint folder,
  complete or not), so the store ends as a post-hoc ``precompute`` of the finished run writes it;
- when the process it watches (``--follow-pid``, the trainer) is gone without finishing: one last round
  over the complete checkpoints, then it stops (a rerun of the same command completes the store);
- on SIGTERM or SIGINT (`stop`): after the round in flight, whose committed checkpoints stay.

The store is the job's, under its writer lock, committed one checkpoint at a time, so a follower killed
at any moment is resumed by running it again. The rounds re-run what a run does after its checkpoints
(overlaps, head types, stages, embeddings), so what depends on every checkpoint is brought up to date.

A Hub repo's new branches are followed at an interval by `precompute.follow_hub`, with the same rounds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from headwatch.analysis.errors import CheckpointError, CheckpointNotFoundError, StoreError, UnknownArchitectureError
from headwatch.analysis.store import Meta
from headwatch.analysis.store.following import FollowState, FollowStatus, status_path
from headwatch.analysis.store.format import META_FILE
from headwatch.analysis.store.lenses import LENSES
from headwatch.analysis.store.outputs import check_same_model, store_at
from headwatch.precompute.context import RunReport
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.checkpoints import find_checkpoints, incomplete_reason
from headwatch.precompute.sources.fetch import Meter
from headwatch.training.markers import FINISHED_FILE, RUN_FILE

__all__ = [
    "FINISHED_FILE",
    "REFUSALS",
    "check_model",
    "cpu_used",
    "follow_options",
    "follow_run",
    "following_status",
    "pid_alive",
    "store_mark",
    "training_finished",
    "write_status",
]

log = logging.getLogger("precompute")

POLL_SECONDS = 2.0  # between looks at the run folder: new checkpoints show within a few seconds
# What the job raises for bad input (`precompute.run.run_precompute`), before it writes anything.
REFUSALS = (CheckpointNotFoundError, UnknownArchitectureError, StoreError, CheckpointError, ValueError)


def training_finished(folder: Path) -> bool:
    """Whether ``folder`` says its training finished: ``run.json`` (``headwatch train``) or
    `FINISHED_FILE` (the Trainer callback)."""
    return (folder / RUN_FILE).is_file() or (folder / FINISHED_FILE).is_file()


def follow_options(options: RunOptions, stored: Meta | None) -> RunOptions:
    """``options`` with every lens and matrix the store already has, so that each new checkpoint gets
    every table the store holds (a lens's own options are checked against the store's by the job)."""
    if stored is None:
        return dataclasses.replace(options, follow=True)
    lenses = tuple(options.lenses) + tuple(
        lens.name for lens in LENSES if lens.asked_by == "--lenses" and lens.recorded(stored) and lens.name not in options.lenses
    )
    matrices = tuple(options.matrices) + tuple(
        lens.name
        for lens in LENSES
        if lens.asked_by == "--matrices" and lens.recorded(stored) and lens.name not in options.matrices
    )
    return dataclasses.replace(options, lenses=lenses, matrices=matrices, follow=True)


def write_status(out: Path, state: FollowState, *, source: str | Path, poll: float) -> None:
    """Say beside the store what the follower does (`analysis.store.following`), atomically."""
    path = status_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    status = FollowStatus(state=state, source=str(source), updated=time.time(), poll=poll, pid=os.getpid())
    tmp.write_text(status.to_json())
    os.replace(tmp, path)


def store_mark(out: str | Path) -> bytes | None:
    """The store's ``meta.json`` as it is now (None when there is none): every commit changes it."""
    try:
        return (Path(out) / META_FILE).read_bytes()
    except OSError:
        return None


@contextmanager
def following_status(out: Path, *, source: str | Path, poll: float) -> Iterator[None]:
    """Around a follower's rounds: when they end by an exception, the status says ``stopped``, unless it was
    a refusal (`REFUSALS`) that left the store as it was: then the status is put back as it was before the
    follower started (none, or an earlier follower's), so a refused follower leaves nothing behind."""
    path = status_path(out)
    try:
        status_before: bytes | None = path.read_bytes()
    except OSError:
        status_before = None
    store_before = store_mark(out)
    try:
        yield
    except REFUSALS:
        if store_mark(out) != store_before:
            write_status(out, "stopped", source=source, poll=poll)
        elif status_before is None:
            path.unlink(missing_ok=True)
        else:
            tmp = path.with_name(f"{path.name}.tmp")
            tmp.write_bytes(status_before)
            os.replace(tmp, path)
        raise
    except BaseException:
        write_status(out, "stopped", source=source, poll=poll)
        raise


def check_model(source: str | Path, out: Path, stored: Meta | None, options: RunOptions) -> None:
    """Refuse the store of another model before a follower says or writes anything: the model of the source's
    first complete checkpoint (`precompute.run.make_plan`, which writes nothing) against the store's. Nothing
    to check without a store, or while the source has no complete checkpoint (the first round checks it).

    Raises:
        StoreError: ``out`` is the store of another model (`analysis.store.outputs.check_same_model`).
    """
    if stored is None:
        return
    from headwatch.precompute.run import make_plan  # imports torch

    try:
        plan = make_plan(
            source, dataclasses.replace(options, follow=True), scratch=out.parent / f".{out.name}.fetch", meter=Meter()
        )
    except CheckpointNotFoundError:
        return
    check_same_model(out, stored, plan.model, source=str(source))


def cpu_used() -> str:
    """The CPU time this process has used, for the follower's last log line: what following cost the machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return f"{usage.ru_utime + usage.ru_stime:.1f} s of CPU"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _waiting(folder: Path) -> tuple[list[int], list[str]]:
    """The steps of the folder's complete checkpoints and the names of those still being written
    (nothing when the folder or its first checkpoint does not exist yet)."""
    if not folder.is_dir():
        return [], []
    try:
        refs, _ = find_checkpoints(folder)
    except FileNotFoundError:
        return [], []
    ready, writing = [], []
    for ref in refs:
        (ready.append(ref.step) if incomplete_reason(folder / ref.revision) is None else writing.append(ref.revision))
    return ready, writing


def follow_run(
    source: str | Path,
    out: str | Path,
    options: RunOptions | None = None,
    *,
    poll: float = POLL_SECONDS,
    stop: threading.Event | None = None,
    pid: int | None = None,
) -> list[RunReport]:
    """Add each checkpoint of a training run to the store as it is saved, until the run finishes.

    Args:
        source: the run folder (``headwatch train --out``, a Trainer's ``output_dir``, or any folder of
            ``save_pretrained`` checkpoints); it may not exist yet.
        out: the store (created, or resumed).
        options: what to compute (`RunOptions`); the store's own lenses and matrices are added.
        poll: seconds between looks at the folder.
        stop: set it to stop after the round in flight (the command line sets it on SIGTERM and SIGINT).
        pid: the trainer's process: when it is gone and the folder does not say training finished, one last
            round over the complete checkpoints, then stop.

    Returns:
        The report of every round that ran the job.

    Raises:
        ValueError: ``source`` is a file (a Hub repo is followed by `precompute.follow_hub.follow_hub`).
        StoreError: ``out`` is a file, a folder that is not a store, or the store of another model: refused
            before anything is written, the follower's status included.
        Whatever `precompute.run.run_precompute` raises for bad input (options the store refuses): a refusal
            before the first commit leaves the status as it was (`following_status`); the store keeps every
            committed checkpoint.
    """
    folder, out = Path(source), Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--follow reads a run folder or a Hub repo; {str(folder)!r} is a file")
    options = options or RunOptions()
    stored = store_at(out)
    if _waiting(folder)[0]:
        check_model(folder, out, stored, options)
    if not folder.exists():
        log.info("%s does not exist yet: waiting for the run to create it", folder)
    stop = stop or threading.Event()
    with following_status(out, source=folder, poll=poll):
        return _rounds(folder, out, options, poll=poll, stop=stop, pid=pid)


def _rounds(
    folder: Path, out: Path, options: RunOptions, *, poll: float, stop: threading.Event, pid: int | None
) -> list[RunReport]:
    """`follow_run`'s rounds, until the run finishes, the trainer is gone or ``stop`` is set."""
    from headwatch.precompute.run import run_precompute  # imports torch

    reports: list[RunReport] = []
    announced: tuple[list[int], list[str]] | None = None
    while True:
        write_status(out, "following", source=folder, poll=poll)
        finished = training_finished(folder)
        gone = pid is not None and not pid_alive(pid) and not finished
        last = finished or gone or stop.is_set()
        ready, writing = _waiting(folder)
        stored = store_at(out)
        have = stored.listed_steps if stored is not None else set()
        if (ready, writing) != announced:
            log.info(
                "%s: %d checkpoints complete, %d in the store%s",
                folder,
                len(ready),
                len(have & set(ready)),
                f", being written: {', '.join(writing)}" if writing else "",
            )
            announced = (ready, writing)
        if (set(ready) - have) or (finished and (ready or writing)) or (ready and not reports):
            # the first round runs whatever the store has: it checks the store against the run at once
            round_options = follow_options(options, stored)
            if finished:
                round_options = dataclasses.replace(round_options, follow=False)  # read as after training
            reports.append(run_precompute(folder, out, round_options))
            now = store_at(out)
            log.info(
                "%s: the store has %d checkpoints, up to step %s",
                out,
                len(now.listed_steps) if now else 0,
                max(now.listed_steps) if now and now.listed_steps else "-",
            )
        if last:
            why = "training finished" if finished else ("the trainer is gone" if gone else "stopped")
            log.info("%s: %s; the store %s is complete up to here (%s)", folder, why, out, cpu_used())
            write_status(out, "finished" if finished else "stopped", source=folder, poll=poll)
            return reports
        stop.wait(poll)
