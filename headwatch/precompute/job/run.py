"""The precompute loop: resumable, atomic, loud about bad input, for any checkpoint source.

For each selected checkpoint not yet in the store, in step order:

1. fetch it (`precompute.sources.source`): fingerprint its weights (sha256); identical
   weights to a checkpoint already in the store make it a duplicate, listed with
   ``duplicate_of`` and no rows (its tensors are not even read);
2. otherwise extract per-head W_Q/W_K from its attention tensors, compute every
   statistic and append its rows;
3. keep the checkpoint's K leading singular vectors per head just long enough to
   compute their overlaps with the previous checkpoint's (`precompute.store.pairs`);
4. record it in the run state (`precompute.job.state.RunState`: meta, rows, overlaps,
   failures; a weight file identical to another checkpoint's marks a partial
   duplicate) and commit ``heads.parquet``, ``overlaps.parquet`` and ``meta.json``
   together (`precompute.store.writer.commit_store`).

Every lens the run computes (`precompute.LENSES`) has a computation
(`precompute.job.context.Computation`): built before anything is written (its refusals come
first), it checks the store under its lock, records how it is made in meta.json,
adds its rows in the pass over each checkpoint (the whole-layer matrices and the
forward lens do, through their `precompute.job.context.PassJob`), and then fills what
the store still lacks (overlaps whose vectors were not in memory, layer or forward
rows of checkpoints computed without them, the refined LLC at its chosen steps,
the trajectory-map embeddings), one commit at a time. This module names no lens.

Steps 1 and 2 run where the executor runs them (`precompute.job.executor`): here, with
checkpoint t+1 fetched in a background thread while t is computed, so at most two
are held at once; or as Ray tasks, a bounded number in flight
(`precompute.job.ray_executor`). Either way this module alone decides ``duplicate_of``
(`precompute.job.work.Work.settle`) and writes the store, in step order. A computation's fill
may run its per-checkpoint work through the same executor (`RunContext.executor`: the refined
LLC's) and commits its results in step order.

A checkpoint that fails (missing, no weights, truncated file, wrong shapes,
non-finite values) is logged with its name and reason, listed under ``failed`` in
meta.json (``reason``: ``missing`` or ``error``), and skipped; the others go on.
A network failure that outlasts the retries stops the run with
`analysis.errors.HubUnreachableError`. Either way, and after Ctrl-C or a kill at
any moment, the store holds every committed checkpoint and a rerun resumes to the
store an uninterrupted run writes.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from headwatch.analysis.errors import CheckpointError, CheckpointNotFoundError
from headwatch.analysis.store import Failure, Meta, ModelInfo
from headwatch.analysis.store.lenses import LENSES
from headwatch.analysis.store.outputs import check_same_model, store_at
from headwatch.analysis.weights.heads import resolve_device
from headwatch.families.family import ModelShape
from headwatch.families.registry import language_config, model_shape
from headwatch.precompute.evalset import EvalSet, model_context, resolve_eval_set
from headwatch.precompute.job.context import (
    CHECKPOINT_ERRORS,
    Computation,
    ComputationSetup,
    PassJob,
    Plan,
    RunContext,
    RunReport,
    check_unchanged,
    lens_device,
)
from headwatch.precompute.job.executor import open_executor
from headwatch.precompute.job.state import RunState, open_state
from headwatch.precompute.job.work import Executor, checkpoint_work
from headwatch.precompute.lenses.attention import check_loadable
from headwatch.precompute.lenses.computations import COMPUTATIONS
from headwatch.precompute.settings import RunOptions, StoreSettings, resolve_settings
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.resolve import open_source
from headwatch.precompute.sources.revisions import CheckpointRef, parse_revisions, runs_note, select
from headwatch.precompute.sources.source import CheckpointSource
from headwatch.precompute.store.lock import store_lock

__all__ = ["Plan", "RunReport", "evaluation_set", "make_plan", "run_precompute"]

log = logging.getLogger("precompute")


def run_precompute(source: str | Path, out: str | Path, options: RunOptions | None = None) -> RunReport:
    """Compute (or resume) the statistics store of a checkpoint suite.

    Stages: plan (list and select the checkpoints, read the model), build the computation of every lens
    asked for (refusing bad options before anything is written), open the store under its lock and
    resolve the settings, record the requested checkpoints the source lacks, compute every new
    checkpoint (committing each), then let each lens fill what the store still lacks.

    Args:
        source: a folder of ``step<N>`` / ``checkpoint-<N>`` sub-folders, or a Hub model id
            (``EleutherAI/pythia-1.4b-deduped``) whose branches are the checkpoints.
        out: the store directory (created, or resumed if it exists).
        options: what to compute (`precompute.settings.RunOptions`; default: its defaults).

    Returns:
        A `RunReport`; ``failed`` lists checkpoints that were skipped.

    Raises:
        CheckpointNotFoundError: no such source, nothing selected, or no readable config.
        UnknownArchitectureError: the model type has no adapter.
        ValueError: bad ``revisions`` or ``every``.
        SchemaVersionError: ``out`` was written by a newer schema (left untouched).
        StoreError: ``out`` is a file, a folder that is not a store, a store of another model, or locked by
            another run (`analysis.store.outputs`; refused before anything is written).
        analysis.errors.HubUnreachableError: the network failed on every retry; the store keeps
            every committed checkpoint.
    """
    options = options or RunOptions()
    started = time.monotonic()
    out = Path(out)
    meter = Meter()
    scratch = out.parent / f".{out.name}.fetch"
    before = store_at(out)  # a file, another kind of folder, a newer store: refused before the source is read
    plan = make_plan(source, options, scratch=scratch, meter=meter)
    if before is not None:  # another model's store: said before any lens's refusal
        check_same_model(out, before, plan.model, source=str(source))
    computations = _computations(plan, options, source, scratch)  # refusals: before anything is written
    executor = open_executor(options, plan.src, _task_source(source), scratch=scratch, meter=meter)
    report = RunReport()
    with store_lock(out):
        stored = store_at(out)  # under the lock: the store's K and settings as they are now
        settings = _settings(plan, options, stored)
        for computation in computations:
            computation.check_store(out, stored)
        state = open_state(out, stored, plan.model, settings, asked=frozenset(s.lens.name for s in computations))
        run = RunContext(plan, settings, state, report, executor, progress=options.progress)
        for computation in computations:
            computation.begin(run)
        run_info = plan.src.run_info()
        if run_info is not None:
            grown = stored is not None and stored.training != run_info  # run.json written since (a followed run ended)
            state.meta.training = run_info
            if grown:
                state.commit()
        report.already_done = sorted(state.meta.listed_steps & {r.step for r in plan.todo})
        _clear(scratch)
        jobs = {s.lens.name: s.pass_job for s in computations if s.pass_job is not None}
        try:
            _record_missing(plan, state, report, first_commit=stored is None or stored.upgraded)
            _complete(run, executor, jobs=jobs)
            todo = [r for r in plan.todo if r.step not in state.meta.listed_steps]
            _compute(run, todo, executor, jobs=jobs)
            _warn_unasked(state, computations)
            for computation in computations:
                computation.fill(run)
                if "store" in computation.lens.needs:  # it committed its record itself: later commits keep it
                    state.take_record(computation.lens)
            for computation in computations:
                computation.finish(run)
                if "store" in computation.lens.needs:
                    state.take_record(computation.lens)
        finally:
            _clear(scratch)
            report.bytes_fetched, report.requests, report.peak_disk = meter.fetched, meter.requests, meter.peak_disk
            report.seconds = time.monotonic() - started
        report.mixed = state.meta.mixed
    return report


def _computations(plan: Plan, options: RunOptions, source: str | Path, scratch: Path) -> list[Computation]:
    """The computation of every lens the run computes, in the lenses' order (each refuses bad options or an
    unsupported model as it is built); the evaluation sequences are made once, if a lens needs them.

    Raises:
        UnknownArchitectureError: a lens cannot handle the model.
        ValueError, EvalTextError: bad options.
    """
    asked = [lens for lens in LENSES if lens.asked(options)]
    needs_eval = any("evaluation" in lens.needs for lens in asked)
    eval_set = evaluation_set(plan, options, source) if needs_eval else None
    setup = ComputationSetup(plan, options, source, scratch, eval_set)
    return [COMPUTATIONS[lens.name](setup) for lens in asked]


def _warn_unasked(state: RunState, computations: list[Computation]) -> None:
    """Say when the store records a lens the run does not compute and some checkpoints lack its rows."""
    asked = {s.lens.name for s in computations}
    for lens in LENSES.stepwise:
        if lens.name in asked or not lens.recorded(state.meta) or not lens.every_checkpoint:
            continue
        have = state.steps_with(lens.tables[0].name)
        lacking = [s for s in state.meta.done_steps if s not in have]
        if lacking:
            log.warning(
                "the store has %s tables but %d checkpoints lack their rows; rerun with %s %s (and the same options) to add them",
                lens.title,
                len(lacking),
                lens.asked_by,
                lens.name,
            )


def make_plan(source: str | Path, options: RunOptions, *, scratch: Path, meter: Meter) -> Plan:
    """Open the source, select the checkpoints and read the model's geometry (nothing is written)."""
    requested = parse_revisions(options.revisions) if options.revisions else None
    src = open_source(source, scratch=scratch, fetch=options.fetch, meter=meter, token=options.token, following=options.follow)
    todo, missing = _select(src, requested, options.every)
    shape, config = _model_shape(src, todo)
    model = ModelInfo(id=options.model_id or src.model_id, **shape.as_meta(), config=config)
    return Plan(src, todo, missing, shape, model, tuple(r.revision for r in requested) if requested else None)


def evaluation_set(plan: Plan, options: RunOptions, source: str | Path) -> EvalSet:
    """The lenses' evaluation sequences, checked against the model.

    Raises:
        UnknownArchitectureError: transformers cannot load the model.
        EvalTextError: no text, no usable tokenizer, or too few tokens (`precompute.evalset`).
    """
    check_loadable(plan.model.config)
    config = plan.model.config
    device = lens_device(options)
    dtype = "float32" if device == "cpu" else str(config.get("dtype") or config.get("torch_dtype") or "float32")
    local = Path(source) if Path(source).is_dir() else None
    return resolve_eval_set(
        eval_text=options.eval_text,
        run_info=plan.src.run_info(),
        run_folder=local,
        tokenizer_at=plan.src.tokenizer_location(plan.todo[0]) if plan.todo else (plan.src.name, {}),
        vocab_size=int(language_config(config).get("vocab_size") or 0),
        n=options.eval_sequences,
        t=options.eval_length,
        max_positions=model_context(language_config(config)),
        dtype=dtype,
    )


def _task_source(source: str | Path) -> str:
    """``--source`` as a task elsewhere opens it: a local folder by its absolute path."""
    path = Path(source)
    return str(path.resolve()) if path.is_dir() else str(source)


def _settings(plan: Plan, options: RunOptions, stored: Meta | None) -> StoreSettings:
    """The run's settings (`precompute.settings.resolve_settings`) given the source and the store."""
    src = plan.src
    run_info = src.run_info() or {}
    return resolve_settings(
        options,
        source=src.recorded_name,
        source_kind=src.kind,
        fetch=src.fetch_settings,
        device=resolve_device(options.device).type,
        d_head=plan.shape.d_head,
        run_tokens_per_step=run_info.get("tokens_per_step"),
        source_tokens_per_step=src.default_tokens_per_step(),
        stored_overlap_k=stored.overlap_k if stored else 0,
        revisions=plan.requested,
        stored_matrices=tuple(stored.matrices) if stored else (),
    )


def _record_missing(plan: Plan, state: RunState, report: RunReport, *, first_commit: bool) -> None:
    """List the requested checkpoints the source lacks as failed; commit when that (or a new or
    upgraded store) changes what is on disk."""
    for ref in plan.missing:
        if ref.step not in state.meta.listed_steps:
            failure = _failure(ref, f"revision {ref.revision!r} not found in {plan.src.name}", "missing")
            state.fail(failure)
            report.failed.append(failure)
            log.error("%s: not found in %s; skipped", ref.revision, plan.src.name)
    if plan.missing or first_commit:
        state.commit()


def _compute(run: RunContext, todo: list[CheckpointRef], executor: Executor, *, jobs: dict[str, PassJob]) -> None:
    """Compute every checkpoint of ``todo`` through the executor, with the lenses' pass ``jobs``, then
    settle and commit each, in step order."""
    plan, settings, state, report, progress = run.plan, run.settings, run.state, run.report, run.progress
    src, shape = plan.src, plan.shape
    bar = tqdm(total=len(todo), desc="checkpoints", unit="ckpt", disable=not progress or not todo, dynamic_ncols=True)
    kwargs = {"jobs": jobs} if jobs else {}  # executors without a lens keep their signature
    results = executor.results(todo, shape=shape, settings=settings, known=lambda: state.meta.fingerprints, **kwargs)
    with contextlib.closing(results):
        for ref, result in results:
            known = state.meta.fingerprints
            try:
                work = result()
                if work.rows is None and work.entry.sha256 not in known:
                    # skipped as a copy of a checkpoint that then failed: read it after all
                    fetched = src.fetch(
                        ref, shape, skip=lambda sha: False, matrices=settings.head_matrices, layers=settings.layers
                    )
                    work = checkpoint_work(fetched, shape, settings, known=known, jobs=jobs, src=src)
                entry, rows, vectors = work.settle(known)
            except CHECKPOINT_ERRORS as exc:
                tqdm.write(f"error: {ref.revision}: {exc}", file=sys.stderr)
                failure = _failure(ref, str(exc), "missing" if isinstance(exc, CheckpointNotFoundError) else "error")
                state.fail(failure)
                report.failed.append(failure)
            else:
                state.add(entry, rows, vectors, work.lens_rows if rows is not None else None)
                if rows is None:
                    assert entry.duplicate_of is not None, "settle gives no rows only to a duplicate"
                    report.duplicates[ref.step] = entry.duplicate_of
                    tqdm.write(
                        f"note: {ref.revision} has weights identical to step {entry.duplicate_of}; marked duplicate_of",
                        file=sys.stderr,
                    )
                else:
                    report.computed.append(ref.step)
            state.commit()
            bar.update(1)
            bar.set_postfix_str(src.progress_note(ref))
    bar.close()


def _complete(run: RunContext, executor: Executor, *, jobs: dict[str, PassJob]) -> None:
    """Read again, through the executor, every checkpoint of the store whose rows are incomplete (a matrix
    the store gained, or circuit columns a store older than schema version 3 lacks), and replace its
    rows, one commit each, with the rows of the lenses in ``jobs`` that some of those checkpoints lack.
    One that cannot be read, or whose weights changed, keeps its rows as they are."""
    plan, settings, state, report, progress = run.plan, run.settings, run.state, run.report, run.progress
    steps = state.incomplete()
    if not steps:
        return
    lacking = {
        name: job
        for name, job in jobs.items()
        if any(s not in state.steps_with(LENSES.by_name[name].tables[0].name) for s in steps)
    }
    refs = [plan.ref(state.meta.entry(s)) for s in steps]
    log.info(
        "%d checkpoints of the store lack rows of %s or circuit columns: reading them again",
        len(refs),
        ", ".join(settings.head_matrices),
    )
    bar = tqdm(total=len(refs), desc="completing", unit="ckpt", disable=not progress, dynamic_ncols=True)
    kwargs = {"jobs": lacking} if lacking else {}
    results = executor.results(refs, shape=plan.shape, settings=settings, known=lambda: {}, **kwargs)
    with contextlib.closing(results):
        for ref, result in results:
            entry = state.meta.entry(ref.step)
            try:
                work = result()
                if work.rows is None:
                    raise CheckpointError("its weights were not read")
                check_unchanged(work.entry.sha256, work.entry.sha256_source, entry, then="recompute the store into a new --out")
            except CHECKPOINT_ERRORS as exc:
                log.warning("%s: cannot read it again to complete its rows (%s); they stay as they are", ref.revision, exc)
                report.incomplete.append(ref.step)
            else:
                state.redo(entry, work.rows, work.vectors, work.lens_rows)
                state.commit()
                report.completed.append(ref.step)
            bar.update(1)
    bar.close()
    plan.src.stop.clear()  # set when the prefetcher closed; the run's next reads are wanted


def _select(
    src: CheckpointSource, requested: list[CheckpointRef] | None, every: int | None
) -> tuple[list[CheckpointRef], list[CheckpointRef]]:
    """The checkpoints to take and the requested ones the source lacks."""
    listing = src.list()
    if listing is None and requested is None:
        raise ValueError(
            f"HF_HUB_OFFLINE is set, so the branches of {src.name} cannot be listed; "
            "pass --revisions step0,step1000,... to read those revisions from the local Hub cache"
        )
    available, ignored = listing if listing is not None else (None, [])
    if ignored:
        log.info("ignoring names that carry no step: %s", ", ".join(ignored[:10]) + (", ..." if len(ignored) > 10 else ""))
    if available is not None:
        src.check_schedule(available)
    todo, missing = select(available, revisions=requested, every=every)
    note = runs_note(todo + missing, available)
    if note:
        log.info("%s", note)
    if not todo and not missing:
        raise CheckpointNotFoundError(
            f"no checkpoint of {src.name} is selected"
            + (f" (--every {every} keeps none of steps {[r.step for r in available or []][:10]})" if every else "")
        )
    return todo, missing


def _model_shape(src: CheckpointSource, refs: list[CheckpointRef]) -> tuple[ModelShape, dict[str, Any]]:
    """The run's model, from the first checkpoint with a readable config.json."""
    errors = []
    for ref in refs:
        try:
            config = src.config(ref)
        except (CheckpointError, CheckpointNotFoundError) as exc:
            errors.append(str(exc))
            continue
        return model_shape(config), config
    raise CheckpointNotFoundError("no checkpoint has a readable config.json: " + "; ".join(errors[:3]))


def _failure(ref: CheckpointRef, error: str, reason: str) -> Failure:
    return Failure(step=ref.step, revision=ref.revision, error=error, reason=reason)


def _clear(scratch: Path) -> None:
    """Remove the scratch folder (downloads of a run that was killed, or this one's)."""
    if scratch.exists():
        shutil.rmtree(scratch, ignore_errors=True)
