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
from pathlib import Path

from headwatch.analysis.store import Meta
from headwatch.analysis.store.following import FollowState, FollowStatus, status_path
from headwatch.precompute import registry
from headwatch.precompute.context import RunReport
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.checkpoints import find_checkpoints, incomplete_reason
from headwatch.precompute.state import stored_meta
from headwatch.training.markers import FINISHED_FILE, RUN_FILE

__all__ = ["FINISHED_FILE", "cpu_used", "follow_options", "follow_run", "pid_alive", "training_finished", "write_status"]

log = logging.getLogger("precompute")

POLL_SECONDS = 2.0  # between looks at the run folder: new checkpoints show within a few seconds


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
        lens.name
        for lens in registry.LENSES
        if lens.asked_by == "--lenses" and lens.recorded(stored) and lens.name not in options.lenses
    )
    matrices = tuple(options.matrices) + tuple(
        lens.name
        for lens in registry.LENSES
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
        Whatever `precompute.run.run_precompute` raises for bad input (another model in the store, options
        the store refuses): the store keeps every committed checkpoint.
    """
    folder, out = Path(source), Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--follow reads a run folder or a Hub repo; {str(folder)!r} is a file")
    if not folder.exists():
        log.info("%s does not exist yet: waiting for the run to create it", folder)
    options = options or RunOptions()
    stop = stop or threading.Event()
    try:
        return _rounds(folder, out, options, poll=poll, stop=stop, pid=pid)
    except BaseException:
        write_status(out, "stopped", source=folder, poll=poll)
        raise


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
        stored = stored_meta(out)
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
            now = stored_meta(out)
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
