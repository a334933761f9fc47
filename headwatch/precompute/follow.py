"""Follow a run while it trains, from its folder or its Hub repo: add each checkpoint to the store once it is whole.

Both followers run the same rounds (`_rounds`) over what they watch: a run folder (`follow_run`) or a Hub repo's
step branches (`follow_hub`). Each round looks at the checkpoints that are whole and, when some are not yet in
the store, runs the ordinary resumable job (`precompute.job.run.run_precompute`) with every lens the store already
has; then it waits ``poll`` seconds and looks again.

## A run folder

``python -m headwatch.precompute --follow --source RUN_FOLDER --out STORE`` (`follow_run`) runs the ordinary
resumable job (`precompute.job.run.run_precompute`) in rounds. Each round lists the run folder's checkpoints
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

## A Hub repo

``python -m headwatch.precompute --follow --source ORG/NAME --out STORE [--poll 60] [--follow-until STEP]``
(`follow_hub`) lists the repo's branches (huggingface_hub's ``HfApi.list_repo_refs``) every ``poll``
seconds and, when a step branch (``step<N>``, ``checkpoint-<N>``, ...; `precompute.sources.revisions`) is
not yet in the store, runs the ordinary resumable job (`precompute.job.run.run_precompute`) over the repo, with
every lens the store already has (`follow_options`).

A branch is read once it points at a commit of its own (`precompute.sources.hub.own_commit`): a commit is
atomic on the Hub, so its files are whole, but a branch made with ``create_branch`` points at the commit it
was made from until the upload to it lands. It stops

- when told the run finished: ``--follow-until STEP`` (``until``), once a branch of step STEP or later has a
  commit of its own. One last round then reads the repo as a post-hoc ``precompute`` would (every step
  branch), so the store ends as a post-hoc run over the repo at that moment writes it;
- when the process it watches (``--follow-pid``) is gone: one last round over the branches with their own
  commit, then it stops;
- on SIGTERM or SIGINT (``stop``): after the round in flight.

Which ``--source`` is a Hub repo: `hub_repo` (an existing directory is a run folder; anything else that is
a valid repo id is a repo). A repo that does not exist, or cannot be read, stops the follower at its first
look with a one-line error; the Hub unreachable later (after the fetch retries) is logged and the next look
tries again.
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
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import HFValidationError, validate_repo_id

from headwatch.analysis.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    HubUnreachableError,
    StoreError,
    UnknownArchitectureError,
)
from headwatch.analysis.store import Meta
from headwatch.analysis.store.following import FollowState, FollowStatus, status_path
from headwatch.analysis.store.format import META_FILE
from headwatch.analysis.store.lenses import LENSES
from headwatch.analysis.store.outputs import check_same_model, store_at
from headwatch.precompute.job.context import RunReport
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.checkpoints import find_checkpoints, incomplete_reason
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.hub import HubSource, own_commit
from headwatch.precompute.sources.revisions import refs_from_names, runs_of
from headwatch.training.markers import FINISHED_FILE, RUN_FILE

__all__ = [
    "FINISHED_FILE",
    "HUB_POLL_SECONDS",
    "REFUSALS",
    "check_model",
    "cpu_used",
    "follow_hub",
    "follow_options",
    "follow_run",
    "following_status",
    "hub_repo",
    "pid_alive",
    "store_mark",
    "training_finished",
    "write_status",
]

log = logging.getLogger("precompute")

POLL_SECONDS = 2.0  # between looks at the run folder: new checkpoints show within a few seconds
HUB_POLL_SECONDS = 60.0  # between looks at a Hub repo: one list_repo_refs call each, well inside the Hub's rate limits
# What the job raises for bad input (`precompute.job.run.run_precompute`), before it writes anything.
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
    first complete checkpoint (`precompute.job.run.make_plan`, which writes nothing) against the store's. Nothing
    to check without a store, or while the source has no complete checkpoint (the first round checks it).

    Raises:
        StoreError: ``out`` is the store of another model (`analysis.store.outputs.check_same_model`).
    """
    if stored is None:
        return
    from headwatch.precompute.job.run import make_plan  # imports torch

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
        ValueError: ``source`` is a file (a Hub repo is followed by `follow_hub`).
        StoreError: ``out`` is a file, a folder that is not a store, or the store of another model: refused
            before anything is written, the follower's status included.
        Whatever `precompute.job.run.run_precompute` raises for bad input (options the store refuses): a refusal
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
        return _rounds(_Folder(folder), out, options, poll=poll, stop=stop, pid=pid)


# ------------------------------------------------------------------ a Hub repo


def hub_repo(source: str | Path) -> str | None:
    """``source`` as a Hub repo id when it names one to follow: not an existing path, and a valid repo id
    (``ORG/NAME``). A run folder that does not exist yet and looks like a repo id (``runs/my-run``) is taken
    for a repo: create the folder first to follow a run from its start."""
    if Path(source).exists():
        return None
    try:
        validate_repo_id(str(source))
    except HFValidationError:
        return None
    return str(source)


def follow_hub(
    repo_id: str,
    out: str | Path,
    options: RunOptions | None = None,
    *,
    poll: float = HUB_POLL_SECONDS,
    stop: threading.Event | None = None,
    pid: int | None = None,
    until: int | None = None,
) -> list[RunReport]:
    """Add each new step branch of a Hub repo to the store, looking every ``poll`` seconds.

    Args:
        repo_id: ``ORG/NAME``.
        out: the store (created, or resumed).
        options: what to compute (`RunOptions`); the store's own lenses and matrices are added.
        poll: seconds between looks at the repo's branches.
        stop: set it to stop after the round in flight (the command line sets it on SIGTERM and SIGINT).
        pid: a process (the trainer that pushes): when it is gone, one last round, then stop.
        until: the run's last step: once a branch of this step or a later one has a commit of its own, one
            last round reads every step branch, then stop. None: follow until stopped.

    Returns:
        The report of every round that ran the job.

    Raises:
        ValueError: ``HF_HUB_OFFLINE`` is set (a repo cannot be followed from the cache).
        CheckpointNotFoundError: the repo does not exist, is private without a token, or is gated.
        StoreError: ``out`` is a file, a folder that is not a store, or the store of another model.
        Whatever `precompute.job.run.run_precompute` raises for bad input: a refusal before the first commit leaves
        the follower's status as it was (`following_status`); the store keeps every committed
        checkpoint.
    """
    out = Path(out)
    options = options or RunOptions()
    stop = stop or threading.Event()
    if constants.is_offline_mode():
        raise ValueError(f"--follow {repo_id}: HF_HUB_OFFLINE is set; following a Hub repo needs the network")
    stored = store_at(out)  # a file, another kind of folder: refused before the repo is read
    src = HubSource(
        repo_id,
        scratch=out.parent / f".{out.name}.fetch",
        fetch=options.fetch,
        meter=Meter(),
        token=options.token,
    )
    branches = src.branches()  # a missing repo stops here, before anything is written
    check_model(repo_id, out, stored, options)  # another model's store: said before anything else
    with following_status(out, source=repo_id, poll=poll):
        return _rounds(_Branches(src, branches, until), out, options, poll=poll, stop=stop, pid=pid)


# ------------------------------------------------------------------ what a follower watches


@dataclass
class _Look:
    """What one look found: the steps whose checkpoints are whole, those still being written, and whether the
    run has finished (the last round then reads the source as after training)."""

    ready: list[int]
    waiting: list[str]
    finished: bool


class _Folder:
    """A run folder, as `_rounds` watches it."""

    def __init__(self, folder: Path) -> None:
        self.source = folder
        self.ready_as, self.waiting_as = "checkpoints complete", "being written"
        self.finished_as = "training finished"

    def look(self) -> _Look:
        finished = training_finished(self.source)
        ready, writing = _waiting(self.source)
        return _Look(ready, writing, finished)

    def look_again(self, poll: float) -> None:
        return None


class _Branches:
    """A Hub repo's step branches, as `_rounds` watches them: listed again between rounds."""

    def __init__(self, src: HubSource, branches: dict[str, str], until: int | None) -> None:
        self.src, self.branches, self.until = src, branches, until
        self.source = src.repo_id
        self.ready_as, self.waiting_as = "step branches with their own commit", "waiting for their upload"
        self.finished_as = f"step {until} has landed"

    def look(self) -> _Look:
        refs, _ = refs_from_names(self.branches, where=f"the branches of {self.source}")
        refs = next(iter(runs_of(refs).values()), [])  # the first training run, as `revisions.select` takes it
        ready = [r.step for r in refs if own_commit(r.revision, self.branches)]
        waiting = [r.revision for r in refs if not own_commit(r.revision, self.branches)]
        return _Look(ready, waiting, self.until is not None and any(step >= self.until for step in ready))

    def look_again(self, poll: float) -> None:
        try:
            self.branches = self.src.branches()
        except HubUnreachableError as exc:
            log.warning("%s; the next look, in %.0f s, tries again", exc, poll)


def _rounds(
    watched: _Folder | _Branches, out: Path, options: RunOptions, *, poll: float, stop: threading.Event, pid: int | None
) -> list[RunReport]:
    """A follower's rounds, until the run finishes, the trainer is gone or ``stop`` is set."""
    from headwatch.precompute.job.run import run_precompute  # imports torch

    source = watched.source
    reports: list[RunReport] = []
    announced: tuple[list[int], list[str]] | None = None
    while True:
        write_status(out, "following", source=source, poll=poll)
        dead = pid is not None and not pid_alive(pid)  # before the look: what it wrote before it went is seen
        look = watched.look()
        finished = look.finished
        gone = dead and not finished
        last = finished or gone or stop.is_set()
        stored = store_at(out)
        have = stored.listed_steps if stored is not None else set()
        if (look.ready, look.waiting) != announced:
            log.info(
                "%s: %d %s, %d in the store%s",
                source,
                len(look.ready),
                watched.ready_as,
                len(have & set(look.ready)),
                f", {watched.waiting_as}: {', '.join(look.waiting)}" if look.waiting else "",
            )
            announced = (look.ready, look.waiting)
        if (set(look.ready) - have) or (finished and (look.ready or look.waiting)) or (look.ready and not reports):
            # the first round runs whatever the store has: it checks the store against the source at once
            round_options = follow_options(options, stored)
            if finished:
                round_options = dataclasses.replace(round_options, follow=False)  # read as after training
            try:
                reports.append(run_precompute(source, out, round_options))
            except HubUnreachableError as exc:
                if last:
                    raise
                log.warning("%s; the next look, in %.0f s, tries again", exc, poll)
            now = store_at(out)
            log.info(
                "%s: the store has %d checkpoints, up to step %s",
                out,
                len(now.listed_steps) if now else 0,
                max(now.listed_steps) if now and now.listed_steps else "-",
            )
        if last:
            why = watched.finished_as if finished else ("the trainer is gone" if gone else "stopped")
            log.info("%s: %s; the store %s is complete up to here (%s)", source, why, out, cpu_used())
            write_status(out, "finished" if finished else "stopped", source=source, poll=poll)
            return reports
        if not stop.wait(poll):  # a signal: the next pass is the last round
            watched.look_again(poll)
