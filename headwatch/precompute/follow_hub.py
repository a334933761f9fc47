"""Follow a Hub repo that still receives checkpoints: add each new step branch to the store at an interval.

``python -m headwatch.precompute --follow --source ORG/NAME --out STORE [--poll 60] [--follow-until STEP]``
(`follow_hub`) lists the repo's branches (huggingface_hub's ``HfApi.list_repo_refs``) every ``poll``
seconds and, when a step branch (``step<N>``, ``checkpoint-<N>``, ...; `precompute.sources.revisions`) is
not yet in the store, runs the ordinary resumable job (`precompute.run.run_precompute`) over the repo, with
every lens the store already has (`precompute.follow.follow_options`).

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
import threading
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import HFValidationError, validate_repo_id

from headwatch.analysis.errors import HubUnreachableError
from headwatch.analysis.store.outputs import store_at
from headwatch.precompute.context import RunReport
from headwatch.precompute.follow import check_model, cpu_used, follow_options, following_status, pid_alive, write_status
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.hub import HubSource, own_commit
from headwatch.precompute.sources.revisions import refs_from_names

__all__ = ["POLL_SECONDS", "follow_hub", "hub_repo"]

log = logging.getLogger("precompute")

POLL_SECONDS = 60.0  # between looks at a Hub repo: one list_repo_refs call each, well inside the Hub's rate limits


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
    poll: float = POLL_SECONDS,
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
        Whatever `precompute.run.run_precompute` raises for bad input: a refusal before the first commit leaves
        the follower's status as it was (`precompute.follow.following_status`); the store keeps every committed
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
        return _rounds(src, out, options, branches, poll=poll, stop=stop, pid=pid, until=until)


def _rounds(
    src: HubSource,
    out: Path,
    options: RunOptions,
    branches: dict[str, str],
    *,
    poll: float,
    stop: threading.Event,
    pid: int | None,
    until: int | None,
) -> list[RunReport]:
    """`follow_hub`'s rounds, until the run's last step has landed, ``pid`` is gone or ``stop`` is set."""
    from headwatch.precompute.run import run_precompute  # imports torch

    repo_id = src.repo_id
    reports: list[RunReport] = []
    announced: tuple[list[int], list[str]] | None = None
    while True:
        write_status(out, "following", source=repo_id, poll=poll)
        gone = pid is not None and not pid_alive(pid)
        refs, _ = refs_from_names(branches, where=f"the branches of {repo_id}")
        ready = [r.step for r in refs if own_commit(r.revision, branches)]
        waiting = [r.revision for r in refs if not own_commit(r.revision, branches)]
        finished = until is not None and any(step >= until for step in ready)
        last = finished or gone or stop.is_set()
        stored = store_at(out)
        have = stored.listed_steps if stored is not None else set()
        if (ready, waiting) != announced:
            log.info(
                "%s: %d step branches with their own commit, %d in the store%s",
                repo_id,
                len(ready),
                len(have & set(ready)),
                f", waiting for their upload: {', '.join(waiting)}" if waiting else "",
            )
            announced = (ready, waiting)
        if (set(ready) - have) or finished or (ready and not reports):
            # the first round runs whatever the store has: it checks the store against the repo at once
            round_options = follow_options(options, stored)
            if finished:
                round_options = dataclasses.replace(round_options, follow=False)  # every step branch, as post-hoc
            try:
                reports.append(run_precompute(repo_id, out, round_options))
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
            why = f"step {until} has landed" if finished else ("the trainer is gone" if gone else "stopped")
            log.info("%s: %s; the store %s is complete up to here (%s)", repo_id, why, out, cpu_used())
            write_status(out, "finished" if finished else "stopped", source=repo_id, poll=poll)
            return reports
        if stop.wait(poll):
            continue  # a signal: the next pass is the last round
        try:
            branches = src.branches()
        except HubUnreachableError as exc:
            log.warning("%s; the next look, in %.0f s, tries again", exc, poll)
