"""What a run's computations share: its plan, its report, and the protocol every lens's computation follows.

`precompute.job.run` makes a `Plan` (the source, the checkpoints, the model) and a `RunReport`,
builds one `Computation` per lens the run computes (`analysis.store.lenses.LENSES`) and drives
them: `Computation.check_store` before anything is written, `Computation.begin` when the run state is
open, the computation's `PassJob` inside the pass over each new checkpoint, and `Computation.fill` after
it for what the store still lacks (a fill may run its per-checkpoint work where the run's executor runs
checkpoints: `TaskExecutor`). The computations live in their lens modules (``precompute/lenses/*.py``) and
import this module, never `precompute.job.run`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import torch

from headwatch.analysis.errors import CheckpointError, CheckpointNotFoundError, StoreError, UnknownArchitectureError
from headwatch.analysis.store import CheckpointEntry, Failure, Meta, ModelInfo
from headwatch.analysis.store.lenses.declaration import Lens
from headwatch.analysis.weights.heads import resolve_device
from headwatch.families.family import ModelShape
from headwatch.precompute.settings import RunOptions, StoreSettings
from headwatch.precompute.sources.fetch import human_bytes
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched, fingerprints_comparable

log = logging.getLogger("precompute")

if TYPE_CHECKING:  # the state imports the overlaps lens, whose computation imports this module
    from headwatch.precompute.evalset import EvalSet
    from headwatch.precompute.job.state import RunState

# Per-checkpoint failures: the checkpoint is listed under `failed` (or left out of a lens) and the run goes on.
CHECKPOINT_ERRORS = (CheckpointError, CheckpointNotFoundError, UnknownArchitectureError)

R = TypeVar("R")


@dataclass(frozen=True)
class Plan:
    """What a run will read: the source, the checkpoints to take, the requested ones it lacks, the model."""

    src: CheckpointSource
    todo: list[CheckpointRef]
    missing: list[CheckpointRef]
    shape: ModelShape
    model: ModelInfo
    requested: tuple[str, ...] | None

    def ref(self, entry: CheckpointEntry) -> CheckpointRef:
        """The checkpoint of a store entry, to read it again."""
        return CheckpointRef(entry.step, entry.revision, entry.tokens)


@dataclass
class RunReport:
    """What one invocation did, and what it moved.

    Attributes:
        lenses: per lens that ran (`analysis.store.lenses.declaration.Lens.name`), the steps it computed
            rows for after the pass over the checkpoints (`Computation.fill`).
        notes: what the computations could not do and what to do about it, one line each, for stderr.
    """

    computed: list[int] = field(default_factory=list)
    already_done: list[int] = field(default_factory=list)
    duplicates: dict[int, int] = field(default_factory=dict)  # step -> duplicate_of
    failed: list[Failure] = field(default_factory=list)
    mixed: list[CheckpointEntry] = field(default_factory=list)  # partial duplicates in the store after the run
    bytes_fetched: int = 0
    requests: int = 0
    peak_disk: int = 0  # most scratch-disk bytes held at once
    seconds: float = 0.0
    embeddings: str = "skipped"  # "not needed", "written", or why they failed (set by the embeddings lens)
    completed: list[int] = field(default_factory=list)  # checkpoints in the store read again for rows they lacked
    incomplete: list[int] = field(default_factory=list)  # checkpoints whose rows still lack something (not re-readable)
    lenses: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def transfer_summary(self) -> str:
        rate = self.bytes_fetched / max(self.seconds, 1e-9)
        return (
            f"fetched {human_bytes(self.bytes_fetched)} in {self.requests} requests over {self.seconds:.1f} s "
            f"({human_bytes(rate)}/s); peak scratch disk {human_bytes(self.peak_disk)}"
        )


def lens_device(options: RunOptions) -> str:
    """Where the lenses run: ``cpu`` or ``cuda`` (``--device``, resolved)."""
    return resolve_device(options.device).type


@dataclass(frozen=True)
class ComputationSetup:
    """What a computation is built from, before anything is written.

    Attributes:
        plan: the run's plan.
        options: what was asked (the lens's own options: ``options.lens_options_for(name)``).
        source: ``--source`` as given.
        scratch: the run's scratch folder (removed at the end of the run).
        eval_set: the evaluation sequences, when a lens the run computes needs them.
    """

    plan: Plan
    options: RunOptions
    source: str | Path
    scratch: Path
    eval_set: EvalSet | None = None


class TaskExecutor(Protocol):
    """What a computation's fill may ask of the run's executor (`precompute.job.executor`): one checkpoint's work,
    for each of a list of checkpoints, run where the executor runs checkpoints (in this process, or as Ray tasks)."""

    def each(
        self,
        fn: Callable[..., R],
        todo: Sequence[tuple[CheckpointRef, Any]],
        *,
        device: str,
        progress: Callable[[], None] | None = None,
    ) -> Generator[tuple[CheckpointRef, Callable[[], R]], None, None]:
        """``fn(src, ref, arg, scratch=FOLDER, progress=CALL)`` for each ``(ref, arg)`` of ``todo``, yielded in
        ``todo``'s order as ``(ref, result)``, where ``result()`` returns what ``fn`` returned or raises its
        per-checkpoint error (`CHECKPOINT_ERRORS`). Closing the iterator abandons the work still in flight.

        Args:
            fn: the work; it and every ``arg`` must pickle (a Ray task receives them). ``src`` is the run's
                source (re-opened in a Ray task), ``scratch`` a folder for temporary files where ``fn`` runs (the
                run's scratch folder here, a folder of the task's own in a Ray task, removed after it).
            todo: the checkpoints and each one's argument.
            device: where ``fn`` computes (``cuda``: a Ray task declares a GPU).
            progress: handed to ``fn`` where it runs in this process; a Ray task gets None.
        """
        ...


@dataclass
class RunContext:
    """What a computation's fill works on: the plan, the settings, the state it adds to and commits, the report,
    and the executor that runs the run's checkpoints."""

    plan: Plan
    settings: StoreSettings
    state: RunState
    report: RunReport
    executor: TaskExecutor
    progress: bool


class PassJob(Protocol):
    """A lens's share of the pass over each new checkpoint (`precompute.job.work.checkpoint_work`), run
    wherever the executor runs it (a Ray task included: it must pickle)."""

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        """The checkpoint's rows of the lens's tables, by table name.

        Raises:
            CheckpointError: the checkpoint cannot be read or evaluated.
        """
        ...


class Computation(Protocol):
    """The compute side of one lens (its ``lens``, declared in `analysis.store.lenses`; `precompute.lenses.computations`).

    Built by ``Computation(setup)``, which refuses bad options or an unsupported model before anything
    is written (raising `ValueError`, `analysis.errors.UnknownArchitectureError`, ...).
    """

    lens: Lens
    pass_job: PassJob | None  # rows computed in the pass over each new checkpoint (None: fill only)

    def __init__(self, setup: ComputationSetup) -> None: ...

    def check_store(self, out: Path, stored: Meta | None) -> None:
        """Refuse, under the store's lock and before any commit, a store whose tables of this lens
        were made otherwise (other evaluation sequences, other sampler settings).

        Raises:
            StoreError: with what differs and what to pass instead.
        """
        ...

    def begin(self, run: RunContext) -> None:
        """Record in ``run.state.meta`` how the lens is made, before the run's first commit (``run.settings``:
        the settings resolved under the store's lock)."""
        ...

    def fill(self, run: RunContext) -> None:
        """Compute what the store still lacks of the lens, committing as it goes; record the steps
        computed in ``run.report.lenses`` and what was left out in ``run.report.notes``."""
        ...

    def finish(self, run: RunContext) -> None:
        """After every lens's fill: bring what the lens made from other lenses' tables up to date with what the lenses
        filled after it wrote (the head types' multigram heads read the tokens in context the ablation lens keeps
        once the stages, made from the head types, are known)."""
        ...


class BaseComputation:
    """The protocol's defaults: no pass job, no store check, nothing to record."""

    lens: Lens
    pass_job: PassJob | None = None

    def __init__(self, setup: ComputationSetup) -> None:
        self.setup = setup

    def check_store(self, out: Path, stored: Meta | None) -> None:
        return None

    def begin(self, run: RunContext) -> None:
        return None

    def fill(self, run: RunContext) -> None:
        return None

    def finish(self, run: RunContext) -> None:
        return None


class FactorsComputation(BaseComputation):
    """What the lenses computed from every head's factors of both products share (composition, similarity).

    They read W_QK's and W_OV's factors (``reads``) in the pass over each new checkpoint and, for the store's
    other checkpoints, read them again (`refill`); how they are made is recorded once per store in their
    ``meta.json`` record, which begins with each of the lens's options under its field name (a store keeps one
    value of each: `check_store`) and goes on with `describe` (the random baseline, the definitions).

    A subclass sets ``lens`` and ``what`` and defines `describe` and `make_job`.
    """

    reads: tuple[str, ...] = ("qk", "ov")
    what: str  # what the lens computes, in words (``composition scores``): refusals, warnings, notes

    def __init__(self, setup: ComputationSetup) -> None:
        """Refuse a run whose fetch would not read both products of every head.

        Raises:
            ValueError: ``--matrices`` lacks one of ``reads``.
        """
        super().__init__(setup)
        lacking = [m for m in self.reads if m not in setup.options.matrices]
        if lacking:
            raise ValueError(
                f"--lenses {self.lens.name} reads W_QK and W_OV of every head: add {','.join(lacking)} to --matrices "
                f"(given: {','.join(setup.options.matrices)})"
            )
        self.options = setup.options.lens_options_for(self.lens.name)

    def kept(self) -> dict[str, Any]:
        """This run's value of each of the lens's options, by field: what its record keeps first."""
        return {option.field: getattr(self.options, option.field) for option in self.lens.options}

    def check_store(self, out: Path, stored: Meta | None) -> None:
        """Refuse to add rows made with another value of an option than the store's record holds.

        Raises:
            StoreError: naming the option, both values and what to pass.
        """
        record = stored.records.get(self.lens.meta_key or "") if stored is not None else None
        if record is None:
            return
        for option in self.lens.options:
            was, now = record.get(option.field), getattr(self.options, option.field)
            if was != now:
                given = f"{option.flag} {was}" if was is not None else f"no {option.flag}"
                raise StoreError(
                    f"store {str(out)!r} has {self.what} made with {given} (now {now}); every checkpoint of a store "
                    f"uses the same: pass {given}, or write to a new --out"
                )

    def begin(self, run: RunContext) -> None:
        """Record the options and `describe` (once per store: the baselines are the same numbers every time),
        and make the pass job from the record."""
        key = self.lens.meta_key
        assert key is not None, f"the {self.lens.name} lens declares a meta.json record"
        meta = run.state.meta
        if meta.records.get(key) is None:
            meta.set_record(key, self.kept() | self.describe(meta.model, run.settings))
        self.pass_job = self.make_job(meta.records[key])

    def fill(self, run: RunContext) -> None:
        """The store's checkpoints that lack the lens's rows, read again."""
        job = self.pass_job
        assert job is not None, "begin makes the pass job"
        refill(
            run,
            self.lens,
            lambda fetched: job.checkpoint_rows(fetched, run.plan.shape, run.settings, None),
            what=self.what,
            rows_name=self.lens.name,
            desc=self.lens.name,
            matrices=self.reads,
        )

    def describe(self, model: ModelInfo, settings: StoreSettings) -> dict[str, Any]:
        """The rest of the lens's record: how it is computed (the random baseline, ...)."""
        raise NotImplementedError

    def make_job(self, record: Mapping[str, Any]) -> PassJob:
        """The pass job, given the store's record (its options and baselines)."""
        raise NotImplementedError


def tensor_of(array: np.ndarray) -> torch.Tensor:
    """``array`` as a CPU tensor over its memory, or over a copy when it is read-only: a job's arrays arrive so in a
    Ray task (from Ray's object store), and torch warns on a tensor over memory it may not write."""
    return torch.from_numpy(np.require(array, requirements="W"))


def missing_steps(state: RunState, lens: Lens) -> list[int]:
    """Checkpoints with statistics but no rows of the lens's first table."""
    have = state.steps_with(lens.tables[0].name)
    return [s for s in state.meta.done_steps if s not in have]


def fill_missing(
    run: RunContext,
    lens: Lens,
    rows_of: Callable[[CheckpointRef], Mapping[str, pa.Table]],
    *,
    what: str,
    left_out_as: str,
    note: str,
) -> None:
    """Compute the lens's rows of every checkpoint with statistics that lacks them (`missing_steps`), one commit
    each, recording the steps in ``run.report.lenses``; a checkpoint that fails is left out with a warning, and a
    note says how many were.

    Args:
        run: the run.
        lens: the lens.
        rows_of: a checkpoint's rows of the lens's tables, by table name (raising one of `CHECKPOINT_ERRORS`).
        what: the lens in the log's words (``forward lens``).
        left_out_as: what a failed checkpoint lacks, in the warning's words (``its forward rows``).
        note: the report's note on the failed checkpoints, with ``{n}`` and ``{steps}`` (the first five) to fill.
    """
    plan, state = run.plan, run.state
    missing = missing_steps(state, lens)
    if missing:
        log.info("%s: %d checkpoints computed earlier without it", what, len(missing))
    plan.src.stop.clear()
    left_out = []
    for step in missing:
        ref = plan.ref(state.meta.entry(step))
        try:
            rows = rows_of(ref)
        except CHECKPOINT_ERRORS as exc:
            log.warning("%s: %s failed (%s); %s are left out", ref.revision, what, exc, left_out_as)
            left_out.append(step)
            continue
        state.put(dict(rows))
        state.commit(heads=False)
        run.report.lenses.setdefault(lens.name, []).append(step)
    if left_out:
        run.report.notes.append(note.format(n=len(left_out), steps=left_out[:5]))


def check_unchanged(sha256: str, sha256_source: str | None, entry: CheckpointEntry, *, then: str) -> None:
    """Refuse a checkpoint read again whose weights differ from those its stored statistics came from.

    Raises:
        CheckpointError: the fingerprints are comparable and differ; ``then`` says what to do.
    """
    if fingerprints_comparable(sha256_source, entry.sha256_source) and sha256 != entry.sha256:
        raise CheckpointError(
            f"its weights changed since its statistics were computed (sha256 {sha256[:12]} != {str(entry.sha256)[:12]}); {then}"
        )


def refill(
    run: RunContext,
    lens: Lens,
    rows: Callable[[Fetched], Mapping[str, pa.Table]],
    *,
    what: str,
    rows_name: str,
    desc: str,
    **read: Any,
) -> None:
    """Fill ``lens`` at every checkpoint of the store that lacks it by reading the checkpoint again
    (`fetch_again` with ``read``: ``matrices=`` or ``layers=``): ``rows(fetched)`` gives its tables,
    one commit per checkpoint. A checkpoint that cannot be read is left out, with a warning naming
    ``what`` the lens computes and a note in the run's report (the ``rows_name`` rows it lacks).

    Args:
        what: what the lens computes, in words (``composition scores``): warnings and the refusal.
        rows_name: the rows a checkpoint lacks, in words (``composition``): the report's note.
        desc: the progress bar's label.
    """
    from tqdm.auto import tqdm

    plan, state = run.plan, run.state
    plan.src.stop.clear()
    missing = missing_steps(state, lens)
    left_out = []
    bar = tqdm(total=len(missing), desc=desc, unit="ckpt", disable=not run.progress or not missing, dynamic_ncols=True)
    for step in missing:
        entry = state.meta.entry(step)
        try:
            fetched = fetch_again(plan, entry, then=f"recompute the store to get its {what}", **read)
            state.put(dict(rows(fetched)))
        except CHECKPOINT_ERRORS as exc:
            log.warning("%s: cannot re-read it for the %s (%s); left out", entry.revision, what, exc)
            left_out.append(step)
        else:
            state.commit(heads=False)
            run.report.lenses.setdefault(lens.name, []).append(step)
        bar.update(1)
    bar.close()
    if left_out:
        run.report.notes.append(
            f"note: {len(left_out)} checkpoints have no {rows_name} rows (steps {left_out[:5]}): see the "
            "warnings above; rerun to retry them"
        )


def fetch_again(plan: Plan, entry: CheckpointEntry, *, then: str, **what: Any) -> Fetched:
    """A checkpoint of the store read again (``what``: the source's fetch options, ``matrices=`` or
    ``layers=``), checked unchanged (`check_unchanged`)."""
    fetched = plan.src.fetch(plan.ref(entry), plan.shape, skip=lambda sha: False, **what)
    check_unchanged(fetched.sha256, fetched.sha256_source, entry, then=then)
    return fetched
