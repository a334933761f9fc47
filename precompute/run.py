"""The precompute loop: resumable, atomic, loud about bad input, for any checkpoint source.

For each selected checkpoint not yet in the store, in step order:

1. fetch it (`precompute.sources.source`): fingerprint its weights (sha256); identical
   weights to a checkpoint already in the store make it a duplicate, listed with
   ``duplicate_of`` and no rows (its tensors are not even read);
2. otherwise extract per-head W_Q/W_K from its attention tensors, compute every
   statistic and append its rows;
3. keep the checkpoint's K leading singular vectors per head just long enough to
   compute their overlaps with the previous checkpoint's (`precompute.lenses.overlaps`);
4. record it in the run state (`precompute.state.RunState`: meta, rows, overlaps,
   failures; a weight file identical to another checkpoint's marks a partial
   duplicate) and commit ``heads.parquet``, ``overlaps.parquet`` and ``meta.json``
   together (`precompute.store.writer.commit_store`).

Overlaps whose vectors were not in memory (a resumed run, a checkpoint filled in
between two others, a store from before overlaps existed) are filled at the end
by re-reading the checkpoints concerned.

Steps 1 and 2 run where the executor runs them (`precompute.executor`): here, with
checkpoint t+1 fetched in a background thread while t is computed, so at most two
are held at once; or as Ray tasks, a bounded number in flight
(`precompute.ray_executor`). Either way this module alone decides ``duplicate_of``
(`precompute.work.Work.settle`) and writes the store, in step order.

A checkpoint that fails (missing, no weights, truncated file, wrong shapes,
non-finite values) is logged with its name and reason, listed under ``failed`` in
meta.json (``reason``: ``missing`` or ``error``), and skipped; the others go on.
A network failure that outlasts the retries stops the run with
`analysis.errors.HubUnreachableError`. Either way, and after Ctrl-C or a kill at
any moment, the store holds every committed checkpoint and a rerun resumes to the
store an uninterrupted run writes. A run that computed rows ends by refreshing the
trajectory-map embeddings (`precompute.lenses.embeddings`), if that module is present.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm.auto import tqdm

from analysis.errors import CheckpointError, CheckpointNotFoundError, StoreError
from analysis.extract import ModelShape, model_shape
from analysis.heads import resolve_device
from analysis.store import CheckpointEntry, Failure, Meta, ModelInfo
from precompute.lenses import overlaps as ovl
from precompute.executor import open_executor
from precompute.lenses.evalset import EvalSet, resolve_eval_set
from precompute.sources.fetch import Meter, human_bytes
from precompute.lenses.forward import ForwardJob, check_loadable
from precompute.lenses.llc import LlcJob, check_family, checkpoint_llc, devinterp_version, parse_llc_steps, sampler_sequences
from precompute.store.lock import store_lock
from precompute.sources.revisions import CheckpointRef, parse_revisions, select
from precompute.settings import RunOptions, Settings, resolve_settings
from precompute.sources.source import CheckpointSource, fingerprints_comparable
from precompute.sources.resolve import open_source
from precompute.state import RunState, open_state, stored_meta
from precompute.work import CHECKPOINT_ERRORS, Executor, checkpoint_work, forward_work, layer_work, pair_vectors

log = logging.getLogger("precompute")

@dataclass
class RunReport:
    """What one invocation did, and what it moved."""

    computed: list[int] = field(default_factory=list)
    already_done: list[int] = field(default_factory=list)
    duplicates: dict[int, int] = field(default_factory=dict)  # step -> duplicate_of
    failed: list[Failure] = field(default_factory=list)
    mixed: list[CheckpointEntry] = field(default_factory=list)  # partial duplicates in the store after the run
    bytes_fetched: int = 0
    requests: int = 0
    peak_disk: int = 0  # most scratch-disk bytes held at once
    seconds: float = 0.0
    embeddings: str = "not needed"  # "written", "skipped", or why they failed
    overlaps_left_out: list[tuple[int, int]] = field(default_factory=list)  # pairs whose checkpoints could not be re-read
    completed: list[int] = field(default_factory=list)  # checkpoints in the store read again for rows they lacked
    incomplete: list[int] = field(default_factory=list)  # checkpoints whose rows still lack something (not re-readable)
    layers_left_out: list[int] = field(default_factory=list)  # checkpoints whose layer rows could not be made
    forward_left_out: list[int] = field(default_factory=list)  # steps the lens asked for whose forward rows are missing
    llc_computed: list[int] = field(default_factory=list)  # steps whose refined LLCs this run estimated
    llc_left_out: list[int] = field(default_factory=list)  # steps asked for whose refined LLCs could not be estimated

    def transfer_summary(self) -> str:
        rate = self.bytes_fetched / max(self.seconds, 1e-9)
        return (
            f"fetched {human_bytes(self.bytes_fetched)} in {self.requests} requests over {self.seconds:.1f} s "
            f"({human_bytes(rate)}/s); peak scratch disk {human_bytes(self.peak_disk)}"
        )


@dataclass(frozen=True)
class Plan:
    """What a run will read: the source, the checkpoints to take, the requested ones it lacks, the model."""

    src: CheckpointSource
    todo: list[CheckpointRef]
    missing: list[CheckpointRef]
    shape: ModelShape
    model: ModelInfo
    requested: tuple[str, ...] | None


def run_precompute(source: str | Path, out: str | Path, options: RunOptions | None = None) -> RunReport:
    """Compute (or resume) the statistics store of a checkpoint suite.

    Stages: plan (list and select the checkpoints, read the model), open the store under its
    lock and resolve the settings, record the requested checkpoints the source lacks, compute
    every new checkpoint (committing each), fill the overlap pairs still missing, refresh
    the trajectory-map embeddings.

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
        StoreError: ``out`` holds a different model, or is locked by another run.
        analysis.errors.HubUnreachableError: the network failed on every retry; the
            store keeps every committed checkpoint.
    """
    options = options or RunOptions()
    started = time.monotonic()
    out = Path(out)
    meter = Meter()
    scratch = out.parent / f".{out.name}.fetch"
    plan = _plan(source, options, scratch=scratch, meter=meter)
    # refusals: before anything is written
    eval_set = _eval_set(plan, options, source) if options.lenses else None
    forward = ForwardJob(eval_set, device=_lens_device(options)) if "attention" in options.lenses else None
    llc = _llc_job(plan, options, eval_set, scratch=scratch / "llc-samples") if "llc" in options.lenses else None
    executor = open_executor(options, plan.src, _task_source(source), meter=meter)
    report = RunReport()
    with store_lock(out):
        stored = stored_meta(out)  # under the lock: the store's K and settings as they are now
        settings = _settings(plan, options, stored)
        if forward is not None:
            _check_same_evaluation(out, stored, forward)
        if llc is not None:
            _check_same_llc(out, stored, llc)
        state = open_state(out, stored, plan.model, settings)
        if forward is not None:
            state.meta.forward = forward.eval_set.info
        if settings.overlap_k:
            state.meta.overlaps = ovl.overlaps_meta(settings.overlap_k)
        run_info = plan.src.run_info()
        if run_info is not None:
            state.meta.training = run_info
        report.already_done = sorted(state.meta.listed_steps & {r.step for r in plan.todo})
        _clear(scratch)
        try:
            _record_missing(plan, state, report, first_commit=stored is None or stored.upgraded)
            _complete(plan, settings, state, report, executor, progress=options.progress)
            todo = [r for r in plan.todo if r.step not in state.meta.listed_steps]
            _compute(plan, todo, settings, state, report, executor, progress=options.progress, forward=forward)
            if forward is not None:
                report.forward_left_out = _fill_forward(plan, state, forward, report)
            elif state.meta.forward is not None and state.forward_missing():
                log.warning("the store has forward-lens tables but %d checkpoints lack their rows; rerun with "
                            "--lenses attention (and the same --eval-text) to add them", len(state.forward_missing()))
            if llc is not None:
                _fill_llc(plan, state, llc, eval_set, report, steps=options.llc_steps, progress=options.progress)
            if settings.overlap_k:
                report.overlaps_left_out = _fill_overlaps(plan, settings, state)
            if settings.layers:
                report.layers_left_out = _fill_layers(plan, settings, state, progress=options.progress)
        finally:
            _clear(scratch)
            report.bytes_fetched, report.requests, report.peak_disk = meter.fetched, meter.requests, meter.peak_disk
            report.seconds = time.monotonic() - started
        report.mixed = state.meta.mixed
        if options.embeddings and (report.computed or _embeddings_stale(state.meta)):
            report.embeddings = _add_embeddings(out)
        elif not options.embeddings:
            report.embeddings = "skipped"
    return report


def _plan(source: str | Path, options: RunOptions, *, scratch: Path, meter: Meter) -> Plan:
    """Open the source, select the checkpoints and read the model's geometry (nothing is written)."""
    requested = parse_revisions(options.revisions) if options.revisions else None
    src = open_source(source, scratch=scratch, fetch=options.fetch, meter=meter, token=options.token)
    todo, missing = _select(src, requested, options.every)
    shape, config = _model_shape(src, todo)
    model = ModelInfo(id=options.model_id or src.model_id, **shape.as_meta(), config=config)
    return Plan(src, todo, missing, shape, model, tuple(r.revision for r in requested) if requested else None)


def _lens_device(options: RunOptions) -> str:
    """Where the lenses run: ``cpu`` or ``cuda`` (``--device``, resolved)."""
    return resolve_device(options.device).type


def _eval_set(plan: Plan, options: RunOptions, source: str | Path) -> EvalSet:
    """The lenses' evaluation sequences, checked against the model.

    Raises:
        UnknownArchitectureError: transformers cannot load the model.
        EvalTextError: no text, no usable tokenizer, or too few tokens (`precompute.lenses.evalset`).
    """
    check_loadable(plan.model.config)
    config = plan.model.config
    device = _lens_device(options)
    dtype = "float32" if device == "cpu" else str(config.get("dtype") or config.get("torch_dtype") or "float32")
    local = Path(source) if Path(source).is_dir() else None
    return resolve_eval_set(
        eval_text=options.eval_text, run_info=plan.src.run_info(), run_folder=local,
        tokenizer_at=plan.src.tokenizer_location(plan.todo[0]) if plan.todo else (plan.src.name, {}),
        vocab_size=int(config.get("vocab_size") or 0), n=options.eval_sequences, t=options.eval_length,
        max_positions=config.get("max_position_embeddings") or config.get("n_positions"), dtype=dtype,
    )


def _llc_job(plan: Plan, options: RunOptions, eval_set: EvalSet, *, scratch: Path) -> LlcJob:
    """The refined-LLC stage's job, checked before anything is written.

    Raises:
        UnknownArchitectureError: no per-head mask for the model's family.
        ValueError: ``--llc-steps`` names a step the run does not have, or more sampler sequences than
            the evaluation set holds.
    """
    check_family(plan.model.config)
    sampler = options.llc
    parse_llc_steps(options.llc_steps, [r.step for r in plan.todo])
    return LlcJob(sampler_sequences(eval_set, sampler), sampler, scratch, device=_lens_device(options))


def _llc_record(job: LlcJob, eval_set: EvalSet) -> dict[str, Any]:
    """meta.json ``llc``: everything an estimate depends on (compared by `_check_same_llc`)."""
    info = eval_set.info
    return {
        "sampler": job.sampler.as_meta(),
        "evaluation": {"text": info.text, "text_sha256": info.text_sha256, "tokenizer": info.tokenizer,
                       "n_sequences": info.n_sequences, "seq_len": info.seq_len, "seed": info.seed,
                       "sequences": int(len(job.tokens)), "tokens_sha256": job.tokens_sha256},
        "restriction": "devinterp weight_restrictions.create_param_masks(model, 'l<layer>h<head>'): the head's "
                       "interleaved Q, K, V rows (and biases) of query_key_value and its columns of attention.dense; "
                       "the whole-model row moves every parameter",
        "estimator": "n_beta * (mean over chain steps after burn-in of devinterp's loss_trace - init_loss), "
                     "mean and std over chains",
        "devinterp": devinterp_version(),
        "device": job.device,
        "seconds": {},
    }


def _check_same_llc(out: Path, stored: Meta | None, job: LlcJob) -> None:
    """Refuse to add refined LLCs estimated under other sampler settings or sequences than the store's.

    Raises:
        StoreError: the store's estimates used other settings or sequences.
    """
    if stored is None or stored.llc is None:
        return
    was = dict(stored.llc.get("sampler") or {})
    now = job.sampler.as_meta()
    diffs = [f"{k} {was.get(k)!r} (now {now.get(k)!r})" for k in now if was.get(k) != now.get(k)]
    was_tokens = (stored.llc.get("evaluation") or {}).get("tokens_sha256")
    if was_tokens != job.tokens_sha256:
        diffs.append(f"the sampler's sequences (sha256 {str(was_tokens)[:12]}, now {job.tokens_sha256[:12]})")
    if diffs:
        raise StoreError(
            f"store {str(out)!r} has refined LLCs estimated with other settings: {'; '.join(diffs)}. Estimates "
            "are comparable only under the same settings: pass the stored --llc-* options and --eval-text, "
            "or write to a new --out"
        )


def _fill_llc(
    plan: Plan, state: RunState, job: LlcJob, eval_set: EvalSet, report: RunReport, *, steps: str | None, progress: bool,
) -> None:
    """Estimate the refined LLCs of the chosen checkpoints that lack them, one commit per checkpoint."""
    chosen = parse_llc_steps(steps, state.meta.state_steps) if state.meta.state_steps else []
    missing = [s for s in chosen if s not in state.llc_steps()]
    if not missing:
        return
    if state.meta.llc is None:
        state.meta.llc = _llc_record(job, eval_set)
    state.meta.llc["steps"] = sorted(set(state.meta.llc.get("steps") or []) | set(chosen))
    per_step = plan.shape.n_layers * plan.shape.n_heads + 1
    log.info("refined LLC: %d checkpoints x %d estimates (%d SGLD steps each)", len(missing), per_step,
             job.sampler.forward_backward)
    plan.src.stop.clear()
    bar = tqdm(total=len(missing) * per_step, desc="refined LLC", unit="estimate", disable=not progress, dynamic_ncols=True)
    for step in missing:
        entry = state.meta.entry(step)
        ref = CheckpointRef(step, entry.revision, entry.tokens)
        done = bar.n
        try:
            with plan.src.checkpoint_folder(ref) as folder:
                rows, seconds = checkpoint_llc(folder, step, job, n_layers=plan.shape.n_layers,
                                               n_heads=plan.shape.n_heads, on_estimate=lambda: bar.update(1))
        except CHECKPOINT_ERRORS as exc:
            log.warning("%s: refined LLC failed (%s); left out", ref.revision, exc)
            report.llc_left_out.append(step)
            bar.update(done + per_step - bar.n)
            continue
        state.add_llc(rows)
        state.meta.llc.setdefault("seconds", {})[str(step)] = round(seconds, 1)
        state.commit(heads=False)
        report.llc_computed.append(step)
        bar.set_postfix_str(ref.revision)
    bar.close()
    _clear(job.scratch)


def _check_same_evaluation(out: Path, stored: Meta | None, forward: ForwardJob) -> None:
    """Refuse to add forward rows made on other sequences than the store's.

    Raises:
        StoreError: the store's lens ran on another text, tokenizer, N or T.
    """
    if stored is None or stored.forward is None or stored.forward.same_evaluation(forward.eval_set.info):
        return
    was, now = stored.forward, forward.eval_set.info
    raise StoreError(
        f"store {str(out)!r} has forward lenses on {was.n_sequences} x {was.seq_len} tokens of {was.text!r} "
        f"(sha256 {was.text_sha256[:12]}, tokenizer {was.tokenizer!r}), not {now.n_sequences} x {now.seq_len} of "
        f"{now.text!r} (sha256 {now.text_sha256[:12]}, {now.tokenizer!r}); pass the same --eval-text and sizes, "
        "or write to a new --out"
    )


def _fill_forward(plan: Plan, state: RunState, forward: ForwardJob, report: RunReport) -> list[int]:
    """Compute the forward rows of checkpoints whose weight statistics were computed without the lens,
    one commit each; the steps that could not be read."""
    missing = state.forward_missing()
    left_out = []
    if missing:
        log.info("forward lens: %d checkpoints computed earlier without it", len(missing))
    plan.src.stop.clear()
    for step in missing:
        entry = state.meta.entry(step)
        ref = CheckpointRef(step, entry.revision, entry.tokens)
        try:
            rows = forward_work(plan.src, ref, plan.shape, forward)
        except CHECKPOINT_ERRORS as exc:
            log.warning("%s: forward lens failed (%s); its forward rows are left out", ref.revision, exc)
            left_out.append(step)
            continue
        state.add_forward(rows)
        state.commit(heads=False)
    return left_out


def _task_source(source: str | Path) -> str:
    """``--source`` as a task elsewhere opens it: a local folder by its absolute path."""
    path = Path(source)
    return str(path.resolve()) if path.is_dir() else str(source)


def _settings(plan: Plan, options: RunOptions, stored: Meta | None) -> Settings:
    """The run's settings (`precompute.settings.resolve_settings`) given the source and the store."""
    src = plan.src
    run_info = src.run_info() or {}
    return resolve_settings(
        options, source=src.recorded_name, source_kind=src.kind, fetch=src.fetch_settings, device=resolve_device(options.device).type,
        d_head=plan.shape.d_head, run_tokens_per_step=run_info.get("tokens_per_step"),
        source_tokens_per_step=src.default_tokens_per_step(),
        stored_overlap_k=stored.overlap_k if stored else 0, revisions=plan.requested,
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


def _compute(
    plan: Plan, todo: list[CheckpointRef], settings: Settings, state: RunState, report: RunReport,
    executor: Executor, *, progress: bool, forward: ForwardJob | None = None,
) -> None:
    """Compute every checkpoint of ``todo`` through the executor, then settle and commit each, in step order."""
    src, shape = plan.src, plan.shape
    bar = tqdm(total=len(todo), desc="checkpoints", unit="ckpt", disable=not progress or not todo, dynamic_ncols=True)
    kwargs = {"forward": forward} if forward is not None else {}  # executors without the lens keep their signature
    results = executor.results(todo, shape=shape, settings=settings, known=lambda: state.meta.fingerprints, **kwargs)
    with contextlib.closing(results):
        for ref, result in results:
            known = state.meta.fingerprints
            try:
                work = result()
                if work.rows is None and work.entry.sha256 not in known:
                    # skipped as a copy of a checkpoint that then failed: read it after all
                    fetched = src.fetch(ref, shape, skip=lambda sha: False, matrices=settings.head_matrices,
                                        layers=settings.layers)
                    work = checkpoint_work(fetched, shape, settings, known=known, forward=forward, src=src)
                entry, rows, vectors = work.settle(known)
                layer_rows = work.layer_rows if rows is not None else None
            except CHECKPOINT_ERRORS as exc:
                tqdm.write(f"error: {ref.revision}: {exc}", file=sys.stderr)
                failure = _failure(ref, str(exc), "missing" if isinstance(exc, CheckpointNotFoundError) else "error")
                state.fail(failure)
                report.failed.append(failure)
            else:
                state.add(entry, rows, vectors, work.forward if rows is not None else None, layer_rows=layer_rows)
                if rows is None:
                    report.duplicates[ref.step] = entry.duplicate_of
                    tqdm.write(f"note: {ref.revision} has weights identical to step {entry.duplicate_of}; marked duplicate_of", file=sys.stderr)
                else:
                    report.computed.append(ref.step)
            state.commit()
            bar.update(1)
            bar.set_postfix_str(src.progress_note(ref))
    bar.close()


def _complete(
    plan: Plan, settings: Settings, state: RunState, report: RunReport, executor: Executor, *, progress: bool
) -> None:
    """Read again, through the executor, every checkpoint of the store whose rows are incomplete (a matrix
    the store gained, or circuit columns a store older than schema version 3 lacks), and replace its
    rows, one commit each. One that cannot be read, or whose weights changed, keeps its rows as they are."""
    steps = state.incomplete()
    if not steps:
        return
    refs = [CheckpointRef(s, state.meta.entry(s).revision, state.meta.entry(s).tokens) for s in steps]
    log.info("%d checkpoints of the store lack rows of %s or circuit columns: reading them again",
             len(refs), ", ".join(settings.head_matrices))
    bar = tqdm(total=len(refs), desc="completing", unit="ckpt", disable=not progress, dynamic_ncols=True)
    results = executor.results(refs, shape=plan.shape, settings=settings, known=lambda: {})
    with contextlib.closing(results):
        for ref, result in results:
            entry = state.meta.entry(ref.step)
            try:
                work = result()
                if work.rows is None:
                    raise CheckpointError("its weights were not read")
                if fingerprints_comparable(work.entry.sha256_source, entry.sha256_source) and work.entry.sha256 != entry.sha256:
                    raise CheckpointError(
                        f"its weights changed since its statistics were computed (sha256 {work.entry.sha256[:12]} "
                        f"!= {str(entry.sha256)[:12]}); recompute the store into a new --out"
                    )
            except CHECKPOINT_ERRORS as exc:
                log.warning("%s: cannot read it again to complete its rows (%s); they stay as they are", ref.revision, exc)
                report.incomplete.append(ref.step)
            else:
                state.redo(entry, work.rows, work.vectors, layer_rows=work.layer_rows)
                state.commit()
                report.completed.append(ref.step)
            bar.update(1)
    bar.close()
    plan.src.stop.clear()  # set when the prefetcher closed; the run's next reads are wanted


def _fill_overlaps(plan: Plan, settings: Settings, state: RunState) -> list[tuple[int, int]]:
    """Compute the overlaps the store still lacks, re-reading checkpoints whose vectors are not
    held; the pairs left out."""
    src, shape = plan.src, plan.shape
    src.stop.clear()  # set when the prefetcher closed; these reads are wanted

    def load(step: int) -> ovl.Vectors | None:
        entry = state.meta.entry(step)
        ref = CheckpointRef(step, entry.revision, entry.tokens)
        try:
            fetched = src.fetch(ref, shape, skip=lambda sha: False, matrices=settings.head_matrices)
            comparable = fingerprints_comparable(fetched.sha256_source, entry.sha256_source)
            if comparable and fetched.sha256 != entry.sha256:
                raise CheckpointError(
                    f"its weights changed since its statistics were computed (sha256 {fetched.sha256[:12]} "
                    f"!= {str(entry.sha256)[:12]}); recompute the store to get its overlaps"
                )
            assert fetched.tensors is not None
            return pair_vectors(shape, fetched.tensors, settings)
        except CHECKPOINT_ERRORS as exc:
            log.warning("%s: cannot re-read it for singular-vector overlaps (%s); its pairs are left out", ref.revision, exc)
            return None

    def commit(table: pa.Table) -> None:
        state.overlaps = table
        state.commit(heads=False)

    filler = ovl.OverlapFiller(load, commit, held=state.finish_vectors())
    _, left_out = filler.fill(state.overlaps, state.meta.done_steps, settings.head_matrices, state.meta.state_steps)
    return left_out


def _fill_layers(plan: Plan, settings: Settings, state: RunState, *, progress: bool) -> list[int]:
    """Give the store's checkpoints that have statistics but no layer rows (a store computed
    without ``--matrices layers``) their ``layers.parquet`` rows, re-reading each one and
    committing after each; the steps left out (the checkpoint is gone or changed)."""
    src, shape = plan.src, plan.shape
    src.stop.clear()
    missing = state.layer_steps_missing()
    left_out = []
    bar = tqdm(total=len(missing), desc="layer matrices", unit="ckpt", disable=not progress or not missing, dynamic_ncols=True)
    for step in missing:
        entry = state.meta.entry(step)
        ref = CheckpointRef(step, entry.revision, entry.tokens)
        try:
            fetched = src.fetch(ref, shape, skip=lambda sha: False, layers=True)
            if fingerprints_comparable(fetched.sha256_source, entry.sha256_source) and fetched.sha256 != entry.sha256:
                raise CheckpointError(
                    f"its weights changed since its statistics were computed (sha256 {fetched.sha256[:12]} "
                    f"!= {str(entry.sha256)[:12]}); recompute the store to get its layer matrices"
                )
            state.add_layers(layer_work(fetched, shape, settings))
        except CHECKPOINT_ERRORS as exc:
            log.warning("%s: cannot re-read it for the layer matrices (%s); left out", ref.revision, exc)
            left_out.append(step)
        else:
            state.commit(heads=False)
        bar.update(1)
    bar.close()
    return left_out


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


def _embeddings_stale(meta: Meta) -> bool:
    """Whether the store's embeddings (if any) were made from other checkpoints than its training states."""
    steps = meta.state_steps
    return bool(steps) and meta.embedding_steps != steps


def _add_embeddings(out: Path) -> str:
    """Refresh the trajectory-map embeddings; a failure is logged and leaves the store as it is."""
    try:
        from precompute.lenses.embeddings import add_embeddings
    except ImportError as exc:
        log.info("no trajectory-map embeddings: %s", exc)
        return f"unavailable ({exc})"
    try:
        add_embeddings(out)
    except Exception as exc:  # the store is complete without them; never lose it over a map
        log.warning(
            "trajectory-map embeddings failed (%s: %s); the store is complete without them. "
            "Retry with `python -m precompute.lenses.embeddings %s`",
            type(exc).__name__,
            exc,
            out,
        )
        return f"failed ({type(exc).__name__}: {exc})"
    return "written"


def _clear(scratch: Path) -> None:
    """Remove the scratch folder (downloads of a run that was killed, or this one's)."""
    if scratch.exists():
        shutil.rmtree(scratch, ignore_errors=True)
