"""Watch a run while it trains: the follower process and the Trainer callback that starts it.

`Follower` starts ``python -m headwatch.precompute --follow --source RUN_FOLDER --out STORE`` (`precompute.follow`)
as a separate process at the lowest priority (Linux's SCHED_IDLE policy and nice 10, one thread: it runs on CPU
time the trainer leaves idle) and never waits for it: training goes on whatever the follower does. Its output goes
to a log file beside the store (``STORE.follow.log``); a follower that fails is reported once, with that file, and
training goes on.

`HeadwatchCallback` is the same for a ``transformers.Trainer``::

    from headwatch import HeadwatchCallback
    trainer = Trainer(..., callbacks=[HeadwatchCallback(store="stores/my-run")])

It starts the follower on ``output_dir`` when training begins (on the main process only) and, when
training ends, writes ``training-finished.json`` in ``output_dir``: the follower adds the checkpoints it
has not yet read and stops. ``headwatch train --watch STORE`` does the same for a reference run, whose
``run.json`` says the run finished.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from headwatch.training.markers import FINISHED_FILE

log = logging.getLogger(__name__)

NICE = 10  # the follower runs this much nicer than the trainer, which gets the CPU first


class Follower:
    """A ``precompute --follow`` process for one run folder and one store.

    Args:
        run_folder: where the checkpoints are saved.
        store: the store to create or grow.
        lenses: lenses to compute by name besides the default ones (``attention``, ...); the store's own
            lenses are always computed.
        args: further ``python -m headwatch.precompute`` options (``--matrices qk``, ``--eval-text FILE``, ...).
        nice: how much nicer than this process the follower runs.
        idle: run the follower under Linux's SCHED_IDLE policy (CPU time no other process wants), where there is one.
        threads: the follower's torch threads (``OMP_NUM_THREADS``, unless the environment sets it).
    """

    def __init__(
        self,
        run_folder: str | Path,
        store: str | Path,
        *,
        lenses: Sequence[str] = (),
        args: Sequence[str] = (),
        nice: int = NICE,
        idle: bool = True,
        threads: int = 1,
    ):
        self.run_folder, self.store = Path(run_folder), Path(store)
        self.command = [
            sys.executable,
            "-m",
            "headwatch.precompute",
            "--follow",
            "--no-progress",
            "--source",
            str(self.run_folder),
            "--out",
            str(self.store),
            "--follow-pid",
            str(os.getpid()),
            *(a for lens in lenses for a in ("--lenses", lens)),
            *args,
        ]
        self.nice, self.idle, self.threads = nice, idle, threads
        self.log_file = self.store.with_name(f"{self.store.name}.follow.log")
        self.process: subprocess.Popen[bytes] | None = None
        self._reported = False

    def start(self) -> None:
        """Start the follower (once); it keeps running if this process ends."""
        if self.process is not None:
            return
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        # the run folder exists before the follower looks: a relative one that does not (``runs/my-run``) would
        # read as a Hub repo id (`precompute.follow.hub_repo`)
        self.run_folder.mkdir(parents=True, exist_ok=True)
        # one thread: torch's default of one per core would contend with the trainer's own threads; a user's
        # OMP_NUM_THREADS / MKL_NUM_THREADS still rules
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads), **os.environ}
        with open(self.log_file, "ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self._lower_priority(self.process.pid)
        if (advice := share_advice()) is not None:
            log.warning(advice)
        log.info("headwatch: following %s into %s (pid %d, log %s)", self.run_folder, self.store, self.process.pid, self.log_file)

    def _lower_priority(self, pid: int) -> None:
        """Run the follower only on CPU time the trainer leaves idle: Linux's SCHED_IDLE policy where there is one
        (set as soon as the child exists, while it is still starting Python: the threads it starts later inherit it),
        and ``nice`` besides.

        Nice alone is not enough: at nice 10 the kernel still gives the follower a time slice now and then on a
        core the trainer is using, and a trainer whose per-step work is split over several threads then waits at
        every operation for the one thread that lost its core (docs/benchmarks.md, "Watching a run while it
        trains"). A SCHED_IDLE task yields its core as soon as the trainer's thread wants it."""
        try:
            # relative to this process's own niceness (setpriority sets an absolute value; the kernel caps it at 19)
            os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + self.nice))
        except OSError as exc:  # the follower runs at normal priority then; training goes on
            log.warning("headwatch: could not lower the follower's priority: %s", exc)
        if self.idle and hasattr(os, "SCHED_IDLE"):
            try:
                os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
            except OSError as exc:  # nice alone then
                log.warning("headwatch: could not give the follower the idle scheduling policy: %s", exc)

    def check(self) -> bool:
        """Whether the follower is running or ended well; a failure is logged once, with its log file."""
        if self.process is None:
            return False
        code = self.process.poll()
        if code not in (None, 0) and not self._reported:
            self._reported = True
            log.warning(
                "headwatch: the follower stopped with status %d; training goes on, the store keeps every checkpoint it "
                "committed. Why: %s. Resume it with: %s",
                code,
                self._last_line(),
                shlex.join(self.command),
            )
        return code in (None, 0)

    def on_save(self, step: int) -> None:
        """After each checkpoint a run saves (`training.train.train`'s ``on_save``): `check`, so a follower that
        failed is reported while training goes on."""
        self.check()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the follower to end (at most ``timeout`` seconds); its exit status, None if still running."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def _last_line(self) -> str:
        try:
            lines = [line for line in self.log_file.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return f"see {self.log_file}"
        return f"{lines[-1] if lines else 'no output'} (see {self.log_file})"


def share_advice() -> str | None:
    """What to do when this process's torch threads take every core it may run on (None otherwise).

    The follower then only runs in the gaps between the trainer's threads, and a trainer whose operations are split
    over all the cores waits at each one for the thread whose core the follower had a moment before; a trainer that
    leaves the follower a core trains as fast as without it (docs/benchmarks.md, "Watching a run while it trains").
    """
    torch = sys.modules.get("torch")  # the trainer's own torch; never imported here for this
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if torch is None or cores < 2 or torch.get_num_threads() < cores:
        return None
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # training on a GPU: its CPU threads mostly wait
        return None
    return (
        f"headwatch: training uses {torch.get_num_threads()} torch threads on {cores} cores, so the follower can only "
        f"run between them and training can slow by several times; leave it a core: OMP_NUM_THREADS={cores - 1} "
        f"(or torch.set_num_threads({cores - 1})) before training starts"
    )


def write_finished(run_folder: str | Path, record: dict[str, Any]) -> None:
    """Write ``training-finished.json`` in the run folder, atomically."""
    path = Path(run_folder) / FINISHED_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


def _run_folder(args: TrainingArguments) -> Path:
    """Where the Trainer saves its checkpoints (``output_dir``; transformers fills in a default when it is not given)."""
    if args.output_dir is None:
        raise ValueError("HeadwatchCallback follows the Trainer's checkpoints: give TrainingArguments an output_dir")
    return Path(args.output_dir)


class HeadwatchCallback(TrainerCallback):
    """Add each checkpoint a ``transformers.Trainer`` saves to a headwatch store while it trains.

    Args:
        store: the store to create or grow (``headwatch serve STORE`` shows it while it grows).
        lenses: lenses to compute besides the default ones (``("attention",)``; needs ``args=("--eval-text",
            FILE)`` for a model not trained by ``headwatch train``).
        args: further ``python -m headwatch.precompute`` options.
    """

    def __init__(self, store: str | Path, *, lenses: Sequence[str] = (), args: Sequence[str] = ()):
        self.store, self.lenses, self.args = Path(store), tuple(lenses), tuple(args)
        self.follower: Follower | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if not state.is_world_process_zero or self.follower is not None:
            return
        folder = _run_folder(args)
        (folder / FINISHED_FILE).unlink(missing_ok=True)  # a resumed run trains again
        self.follower = Follower(folder, self.store, lenses=self.lenses, args=self.args)
        self.follower.start()

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.follower is not None:
            self.follower.check()

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.follower is None:
            return
        write_finished(_run_folder(args), {"global_step": state.global_step, "max_steps": state.max_steps})
        self.follower.check()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the follower to add the last checkpoints and stop (training itself never waits); its exit
        status, None when it still runs after ``timeout`` seconds or was never started."""
        return self.follower.wait(timeout) if self.follower is not None else None
