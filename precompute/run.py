"""The precompute loop: resumable, atomic, loud about bad input, for any checkpoint source.

For each selected checkpoint not yet in the store, in step order:

1. fetch it (`precompute.source`): fingerprint its weights (sha256); identical
   weights to a checkpoint already in the store make it a duplicate, listed with
   ``duplicate_of`` and no rows (its tensors are not even read);
2. otherwise extract per-head W_Q/W_K from its attention tensors, compute every
   statistic and append its rows;
3. keep the checkpoint's K leading singular vectors per head just long enough to
   compute their overlaps with the previous checkpoint's (`precompute.overlaps`);
4. commit ``heads.parquet``, ``overlaps.parquet`` and ``meta.json`` together
   (`store_writer.commit_store`).

Overlaps whose vectors were not in memory (a resumed run, a checkpoint filled in
between two others, a store from before overlaps existed) are filled at the end
by re-reading the checkpoints concerned.

Checkpoint t+1 is fetched in a background thread while t is computed
(`precompute.prefetch`), so at most two are held at once.

A checkpoint that fails (missing, no weights, truncated file, wrong shapes,
non-finite values) is logged with its name and reason, listed under ``failed`` in
meta.json (``reason``: ``missing`` or ``error``), and skipped; the others go on.
A network failure that outlasts the retries stops the run with
`analysis.errors.HubUnreachableError`. Either way, and after Ctrl-C or a kill at
any moment, the store holds every committed checkpoint and a rerun resumes to the
store an uninterrupted run writes. A run that computed rows ends by refreshing the
trajectory-map embeddings (`precompute.embeddings`), if that module is present.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from analysis.crossings import OVERLAP_K
from analysis.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    StoreError,
    UnknownArchitectureError,
)
from analysis.extract import ModelShape, extract_qk, model_shape
from analysis.heads import checkpoint_statistics, checkpoint_vectors, resolve_device
from analysis.schema import OVERLAPS_FILE
from analysis.store import (
    HEADS_FILE,
    META_FILE,
    add_null_columns,
    done_steps,
    empty_heads_table,
    read_meta,
    sort_heads,
)
from precompute import overlaps as ovl
from precompute.fetch import Meter, human_bytes
from precompute.lock import store_lock
from precompute.prefetch import Prefetcher
from precompute.revisions import CheckpointRef, parse_revisions, select
from precompute.settings import FetchSettings, Settings, software_versions
from precompute.source import CheckpointSource, Fetched, fingerprints_comparable
from precompute.sources import open_source
from precompute.store_writer import commit_store
from precompute.tables import heads_rows, new_meta

log = logging.getLogger("precompute")

# Per-checkpoint failures: the checkpoint is listed under `failed` and the run goes on.
CHECKPOINT_ERRORS = (CheckpointError, CheckpointNotFoundError, UnknownArchitectureError)


@dataclass
class RunReport:
    """What one invocation did, and what it moved."""

    computed: list[int] = field(default_factory=list)
    already_done: list[int] = field(default_factory=list)
    duplicates: dict[int, int] = field(default_factory=dict)  # step -> duplicate_of
    failed: list[dict[str, Any]] = field(default_factory=list)
    bytes_fetched: int = 0
    requests: int = 0
    peak_disk: int = 0  # most scratch-disk bytes held at once
    seconds: float = 0.0
    embeddings: str = "not needed"  # "written", "skipped", or why they failed
    overlaps_left_out: list[tuple[int, int]] = field(default_factory=list)  # pairs whose checkpoints could not be re-read

    def transfer_summary(self) -> str:
        rate = self.bytes_fetched / max(self.seconds, 1e-9)
        return (
            f"fetched {human_bytes(self.bytes_fetched)} in {self.requests} requests over {self.seconds:.1f} s "
            f"({human_bytes(rate)}/s); peak scratch disk {human_bytes(self.peak_disk)}"
        )


def run_precompute(
    source: str | Path,
    out: str | Path,
    *,
    device: str = "auto",
    model_id: str | None = None,
    tokens_per_step: int | None = None,
    revisions: str | Sequence[str] | None = None,
    every: int | None = None,
    progress: bool = True,
    embeddings: bool = True,
    fetch: FetchSettings | None = None,
    token: str | bool | None = None,
    overlap_k: int | None = None,
) -> RunReport:
    """Compute (or resume) the statistics store of a checkpoint suite.

    Args:
        source: a folder of ``step<N>`` / ``checkpoint-<N>`` sub-folders, or a Hub model
            id (``EleutherAI/pythia-1.4b-deduped``) whose branches are the checkpoints.
        out: the store directory (created, or resumed if it exists).
        device: ``auto``, ``cpu`` or ``cuda``.
        model_id: name recorded in meta.json (default: the folder name or repo id).
        tokens_per_step: tokens per optimizer step, for the ``tokens`` field (default:
            ``run.json``'s value for a local run, 2,097,152 for Pythia, else unknown;
            OLMo-style branch names carry their own token counts).
        revisions: only these checkpoints (names or one comma-separated string). Named
            ones that the source lacks are listed as failed (``reason: missing``).
        every: only steps that are multiples of this.
        progress: show a progress bar on stderr.
        embeddings: refresh the trajectory-map embeddings after computing rows.
        fetch: Hub fetch settings (default: `FetchSettings()`, from the environment).
        token: Hub token (default: the logged-in user's, if any).
        overlap_k: leading singular vectors per head whose overlaps between consecutive
            checkpoints are stored (capped at d_head); 0 computes none (a store's existing
            overlaps are kept). Default: the store's K when it has overlaps, else 8. A K
            other than the store's recomputes every pair, re-reading every checkpoint.

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
    started = time.monotonic()
    out = Path(out)
    meter = Meter()
    fetch = fetch or FetchSettings()
    scratch = out.parent / f".{out.name}.fetch"
    if isinstance(revisions, str):
        requested = parse_revisions(revisions)
    else:
        requested = parse_revisions(",".join(revisions)) if revisions else None
    src = open_source(source, scratch=scratch, fetch=fetch, meter=meter, token=token)
    todo_all, missing = _select(src, requested, every)
    shape, config = _model_shape(src, todo_all)
    run_info = src.run_info()
    if tokens_per_step is None and run_info is not None:
        tokens_per_step = run_info.get("tokens_per_step")
    if tokens_per_step is None:
        tokens_per_step = src.default_tokens_per_step()
    dev = resolve_device(device)
    settings = Settings(
        source=src.name,
        device=dev.type,
        tokens_per_step=tokens_per_step,
        source_kind=src.kind,
        revisions=tuple(r.revision for r in requested) if requested else None,
        every=every,
        fetch=src.fetch_settings,
        overlap_k=min(max(_overlap_k(out, overlap_k), 0), shape.d_head),
    )
    model = {"id": model_id or src.model_id, **shape.as_meta(), "config": config}

    report = RunReport()
    with store_lock(out):
        _clear(scratch)
        try:
            meta, heads, overlaps = _open_or_create(out, model, settings)
            meta["settings"] = settings.as_meta()
            if settings.overlap_k:
                meta["overlaps"] = ovl.overlaps_meta(settings.overlap_k)
            meta["software"] = software_versions()
            if run_info is not None:
                meta["training"] = run_info
            listed = {c["step"] for c in meta["checkpoints"]}
            report.already_done = sorted(listed & {r.step for r in todo_all})
            known = {c["sha256"]: c["step"] for c in meta["checkpoints"] if c.get("duplicate_of") is None}
            failed = {f["step"]: f for f in meta.get("failed", [])}
            for ref in missing:
                if ref.step not in listed:
                    failed[ref.step] = _failure(ref, f"revision {ref.revision!r} not found in {src.name}", "missing")
                    report.failed.append(failed[ref.step])
                    log.error("%s: not found in %s; skipped", ref.revision, src.name)
            meta["failed"] = sorted(failed.values(), key=lambda f: f["step"])
            if missing or not out.exists():
                _commit(out, meta, heads, overlaps, settings)
            todo = [r for r in todo_all if r.step not in listed]
            heads, overlaps, held = _loop(src, todo, shape, settings, out, meta, heads, overlaps, known, failed, report,
                                          progress)
            if settings.overlap_k:
                report.overlaps_left_out = _fill_overlaps(src, shape, settings, out, meta, overlaps, held)
        finally:
            _clear(scratch)
            report.bytes_fetched, report.requests, report.peak_disk = meter.fetched, meter.requests, meter.peak_disk
            report.seconds = time.monotonic() - started
        if embeddings and (report.computed or _embeddings_stale(meta)):
            report.embeddings = _add_embeddings(out)
        elif not embeddings:
            report.embeddings = "skipped"
    return report


def _loop(
    src: CheckpointSource,
    todo: list[CheckpointRef],
    shape: ModelShape,
    settings: Settings,
    out: Path,
    meta: dict[str, Any],
    heads: pa.Table,
    overlaps: pa.Table,
    known: dict[str, int],
    failed: dict[int, dict[str, Any]],
    report: RunReport,
    progress: bool,
) -> tuple[pa.Table, pa.Table, dict[int, ovl.Vectors]]:
    """Fetch (one ahead), compute and commit every checkpoint of ``todo``.

    Returns:
        The final heads and overlaps tables, and the singular vectors still held: those
        of the first checkpoint whose pair with its predecessor could not be made (the
        usual case of a resumed run), and the last one's, to spare `_fill_overlaps` re-reading them.
    """
    last: tuple[int, ovl.Vectors] | None = None  # the latest computed checkpoint's singular vectors
    held: dict[int, ovl.Vectors] = {}
    seen = dict(known)  # the fetch thread's view: known weights plus those it read this run

    def fetch_one(ref: CheckpointRef) -> Fetched:
        fetched = src.fetch(ref, shape, skip=lambda sha: sha in seen)
        if fetched.tensors is not None:
            seen.setdefault(fetched.sha256, ref.step)
        return fetched

    bar = tqdm(total=len(todo), desc="checkpoints", unit="ckpt", disable=not progress or not todo, dynamic_ncols=True)
    with Prefetcher(fetch_one, todo, stop=src.stop) as prefetched:
        for ref, result in prefetched:
            try:
                fetched = result()
                if fetched.tensors is None and fetched.sha256 not in known:
                    # skipped as a copy of a checkpoint that then failed: read it after all
                    fetched = src.fetch(ref, shape, skip=lambda sha: False)
                entry, rows, vectors = _process(fetched, shape, known, settings)
            except CHECKPOINT_ERRORS as exc:
                tqdm.write(f"error: {ref.revision}: {exc}", file=sys.stderr)
                failed[ref.step] = _failure(ref, str(exc), "missing" if isinstance(exc, CheckpointNotFoundError) else "error")
                report.failed.append(failed[ref.step])
            else:
                failed.pop(ref.step, None)
                meta["checkpoints"] = sorted(meta["checkpoints"] + [entry], key=lambda c: c["step"])
                if rows is None:
                    report.duplicates[ref.step] = entry["duplicate_of"]
                    tqdm.write(f"note: {ref.revision} has weights identical to step {entry['duplicate_of']}; marked duplicate_of", file=sys.stderr)
                else:
                    known[entry["sha256"]] = ref.step
                    heads = sort_heads(pa.concat_tables([heads, rows]))
                    report.computed.append(ref.step)
                    if vectors is not None:
                        steps = done_steps(meta)
                        before = steps[steps.index(ref.step) - 1] if steps.index(ref.step) else None
                        new = [ovl.pair_rows(before, ref.step, last[1], vectors)] if last and last[0] == before else []
                        if before is not None and not new and not held:
                            held[ref.step] = vectors
                        overlaps = ovl.update(overlaps, steps, new)  # also drops a pair this step now splits
                        last = (ref.step, vectors)
            meta["failed"] = sorted(failed.values(), key=lambda f: f["step"])
            _commit(out, meta, heads, overlaps, settings)
            bar.update(1)
            bar.set_postfix_str(src.progress_note(ref))
    bar.close()
    if last is not None:
        held[last[0]] = last[1]
    return heads, overlaps, held


def _commit(out: Path, meta: dict[str, Any], heads: pa.Table | None, overlaps: pa.Table, settings: Settings) -> None:
    """Commit the store; ``overlaps.parquet`` too when this run computes overlaps."""
    if not settings.overlap_k:
        commit_store(out, meta, heads)
        return
    n_heads = int(meta["model"]["n_heads"])
    commit_store(out, meta, heads, tables={OVERLAPS_FILE: overlaps},
                 row_group_sizes={OVERLAPS_FILE: ovl.row_group_size(n_heads, len(done_steps(meta)))})


def _fill_overlaps(
    src: CheckpointSource, shape: ModelShape, settings: Settings, out: Path, meta: dict[str, Any],
    overlaps: pa.Table, held: dict[int, ovl.Vectors],
) -> list[tuple[int, int]]:
    """Compute the overlaps the store still lacks, re-reading checkpoints whose vectors are not
    ``held``; the pairs left out."""
    src.stop.clear()  # set when the prefetcher closed; these reads are wanted
    entries = {c["step"]: c for c in meta["checkpoints"] if c.get("duplicate_of") is None}

    def load(step: int) -> ovl.Vectors | None:
        entry = entries[step]
        ref = CheckpointRef(step, entry["revision"], entry.get("tokens"))
        try:
            fetched = src.fetch(ref, shape, skip=lambda sha: False)
            comparable = fingerprints_comparable(fetched.sha256_source, entry.get("sha256_source"))
            if comparable and fetched.sha256 != entry.get("sha256"):
                raise CheckpointError(
                    f"its weights changed since its statistics were computed (sha256 {fetched.sha256[:12]} "
                    f"!= {str(entry.get('sha256'))[:12]}); recompute the store to get its overlaps"
                )
            assert fetched.tensors is not None
            w_q, w_k = extract_qk(shape, fetched.tensors)
            return checkpoint_vectors(w_q, w_k, settings.overlap_k, device=settings.device,
                                      spectrum_dtype=getattr(torch, settings.spectrum_dtype))
        except CHECKPOINT_ERRORS as exc:
            log.warning("%s: cannot re-read it for singular-vector overlaps (%s); its pairs are left out", ref.revision, exc)
            return None

    filler = ovl.OverlapFiller(load, lambda table: _commit(out, meta, None, table, settings), held=held)
    _, left_out = filler.fill(overlaps, done_steps(meta))
    return left_out


def _process(
    fetched: Fetched, shape: ModelShape, known: dict[str, int], settings: Settings
) -> tuple[dict[str, Any], pa.Table | None, ovl.Vectors | None]:
    """The checkpoint's meta.json entry and, unless it duplicates a known one, its rows and
    (when the run computes overlaps) its leading singular vectors."""
    ref = fetched.ref
    if ref.tokens is not None:
        tokens = ref.tokens
    else:
        tokens = ref.step * settings.tokens_per_step if settings.tokens_per_step else None
    entry = {
        "step": ref.step,
        "revision": ref.revision,
        "tokens": tokens,
        "sha256": fetched.sha256,
        "sha256_source": fetched.sha256_source,
        "files": fetched.files,
        "commit": fetched.commit,
        "duplicate_of": known.get(fetched.sha256),
    }
    if entry["duplicate_of"] is not None:
        return entry, None, None
    assert fetched.tensors is not None
    w_q, w_k = extract_qk(shape, fetched.tensors)
    for name, w in (("W_Q", w_q), ("W_K", w_k)):
        finite = torch.isfinite(w).flatten(1).all(dim=1)
        if not bool(finite.all()):
            layer = int((~finite).nonzero()[0])
            raise CheckpointError(f"non-finite values in {name} of layer {layer}; the checkpoint is corrupt or diverged")
    stats = checkpoint_statistics(
        w_q,
        w_k,
        device=settings.device,
        dtype=getattr(torch, settings.dtype),
        spectrum_dtype=getattr(torch, settings.spectrum_dtype),
        chunk_elements=settings.chunk_elements,
        vectors=settings.overlap_k,
    )
    vectors = (stats.pop("u"), stats.pop("v")) if settings.overlap_k else None
    return entry, heads_rows(ref.step, stats), vectors


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


def _failure(ref: CheckpointRef, error: str, reason: str) -> dict[str, Any]:
    return {"step": ref.step, "revision": ref.revision, "error": error, "reason": reason}


def _open_or_create(out: Path, model: dict[str, Any], settings: Settings) -> tuple[dict[str, Any], pa.Table, pa.Table]:
    """Resume an existing store (checking it is the same model) or start a new one: its meta,
    heads table and overlaps table (empty when it has none, or has them for another K)."""
    if not (out / META_FILE).is_file():
        if out.exists() and any(out.iterdir()):
            raise StoreError(f"--out {str(out)!r} exists, is not empty and is not a store; choose a new path")
        meta = new_meta(model=model, settings=settings.as_meta(), software=software_versions())
        return meta, empty_heads_table(null_columns=True), ovl.empty_overlaps()
    meta = read_meta(out)  # refuses newer schema versions before anything is written
    keys = ("family", "n_layers", "n_heads", "n_kv_heads", "d_model", "d_head")
    theirs = {k: meta["model"].get(k) for k in keys}
    ours = {k: model[k] for k in keys}
    if theirs != ours:
        raise StoreError(
            f"store {str(out)!r} holds a different model ({theirs}) than {settings.source!r} ({ours}); "
            "write to a new --out"
        )
    before = meta.get("settings", {})
    if settings.source_kind == "hub" and before.get("source_kind") == "hub" and before.get("source") != settings.source:
        raise StoreError(
            f"store {str(out)!r} was computed from {before.get('source')!r}, not {settings.source!r}; write to a new --out"
        )
    steps = done_steps(meta)
    if (out / HEADS_FILE).is_file():
        heads = pq.read_table(out / HEADS_FILE)
        heads = heads.filter(pc.is_in(heads["step"], pa.array(steps, pa.int64())))
    else:
        heads = empty_heads_table()
    overlaps = ovl.empty_overlaps()
    stored_k = (meta.get("overlaps") or {}).get("k")
    if (out / OVERLAPS_FILE).is_file() and stored_k == settings.overlap_k:
        try:
            overlaps = ovl.update(pq.read_table(out / OVERLAPS_FILE), steps)
        except (OSError, pa.ArrowException) as exc:  # derived data: rebuilt from the checkpoints
            log.warning("cannot read %s (%s): recomputing the overlaps (every checkpoint is read again)",
                        out / OVERLAPS_FILE, exc)
    elif settings.overlap_k and stored_k not in (None, settings.overlap_k):  # (K = 0 leaves the file as it is)
        log.warning("the store's overlaps are for K=%s, this run's for K=%s: recomputing every pair "
                    "(every checkpoint is read again)", stored_k, settings.overlap_k)
    # stores written before the null-model columns existed get them derived from `sv`
    return meta, sort_heads(add_null_columns(heads, d_model=int(model["d_model"]))), overlaps


def _overlap_k(out: Path, requested: int | None) -> int:
    """The K of this run: as requested, else the store's, else `OVERLAP_K`."""
    if requested is not None:
        return requested
    if (out / META_FILE).is_file():
        try:
            stored = (read_meta(out).get("overlaps") or {}).get("k")
        except StoreError:
            stored = None  # _open_or_create reports what is wrong with the store
        if stored:
            return int(stored)
    return OVERLAP_K


def _embeddings_stale(meta: dict[str, Any]) -> bool:
    """Whether the store's embeddings (if any) were made from other checkpoints than it now holds."""
    steps = done_steps(meta)
    return bool(steps) and (meta.get("embeddings") or {}).get("steps") != steps


def _add_embeddings(out: Path) -> str:
    """Refresh the trajectory-map embeddings; a failure is logged and leaves the store as it is."""
    try:
        from precompute.embeddings import add_embeddings
    except ImportError as exc:
        log.info("no trajectory-map embeddings: %s", exc)
        return f"unavailable ({exc})"
    try:
        add_embeddings(out)
    except Exception as exc:  # the store is complete without them; never lose it over a map
        log.warning(
            "trajectory-map embeddings failed (%s: %s); the store is complete without them. "
            "Retry with `python -m precompute.embeddings %s`",
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
