"""The precompute loop over local checkpoint folders: resumable, atomic, loud about bad input.

For each checkpoint not yet in the store, in step order:

1. hash its weight files (sha256); identical weights to a checkpoint already in
   the store make it a duplicate: listed with ``duplicate_of`` and no rows;
2. otherwise read only the attention tensors, extract per-head W_Q/W_K,
   compute every statistic and append its rows;
3. commit ``heads.parquet`` and ``meta.json`` together (`store_writer.commit_store`).

A checkpoint that fails (no weights, truncated file, wrong shapes, non-finite
values) is logged with its name and reason, listed under ``failed`` in
meta.json, and skipped; the others go on. A run killed at any moment resumes
from the last commit and ends with the store an uninterrupted run writes.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from analysis.errors import CheckpointError, CheckpointNotFoundError, StoreError
from analysis.extract import ModelShape, attention_tensor_names, extract_qk, model_shape
from analysis.heads import checkpoint_statistics, resolve_device
from analysis.store import HEADS_FILE, META_FILE, done_steps, empty_heads_table, read_meta, sort_heads
from precompute.checkpoints import (
    LocalCheckpoint,
    file_sha256,
    find_checkpoints,
    read_config,
    weight_files,
    weights_fingerprint,
)
from precompute.settings import Settings, software_versions
from precompute.store_writer import commit_store
from precompute.tables import heads_rows, new_meta
from precompute.weights import read_tensors, tensor_names

log = logging.getLogger("precompute")

RUN_INFO_FILE = "run.json"  # written by training/ next to the checkpoint folders


@dataclass
class RunReport:
    """What one invocation did."""

    computed: list[int] = field(default_factory=list)
    already_done: list[int] = field(default_factory=list)
    duplicates: dict[int, int] = field(default_factory=dict)  # step -> duplicate_of
    failed: list[dict[str, Any]] = field(default_factory=list)


def run_precompute(
    source: str | Path,
    out: str | Path,
    *,
    device: str = "auto",
    model_id: str | None = None,
    tokens_per_step: int | None = None,
    progress: bool = True,
) -> RunReport:
    """Compute (or resume) the statistics store of every checkpoint under ``source``.

    Args:
        source: folder of ``step<N>`` / ``checkpoint-<N>`` sub-folders.
        out: the store directory (created, or resumed if it exists).
        device: ``auto``, ``cpu`` or ``cuda``.
        model_id: name recorded in meta.json (default: the source folder's name).
        tokens_per_step: tokens per optimizer step, for the ``tokens`` field
            (default: ``run.json``'s value if the source has one, else unknown).
        progress: show a progress bar on stderr.

    Returns:
        A `RunReport`; ``failed`` lists checkpoints that were skipped.

    Raises:
        CheckpointNotFoundError: no source folder or no checkpoints in it.
        UnknownArchitectureError: the model type has no adapter.
        SchemaVersionError: ``out`` was written by a newer schema (left untouched).
        StoreError: ``out`` holds a different model, or is locked by another run.
    """
    source, out = Path(source), Path(out)
    checkpoints, ignored = find_checkpoints(source)
    if ignored:
        log.info("ignoring folders that are not step<N>/checkpoint-<N>: %s", ", ".join(ignored[:10]))
    shape, config = _model_shape(checkpoints)
    run_info = _read_run_info(source)
    if tokens_per_step is None and run_info is not None:
        tokens_per_step = run_info.get("tokens_per_step")
    dev = resolve_device(device)
    settings = Settings(source=str(source.resolve()), device=dev.type, tokens_per_step=tokens_per_step)
    model = {"id": model_id or source.resolve().name, **shape.as_meta(), "config": config}

    with _store_lock(out):
        meta, heads = _open_or_create(out, model, settings)
        meta["settings"] = settings.as_meta()
        meta["software"] = software_versions()
        if run_info is not None:
            meta["training"] = run_info
        report = RunReport()
        listed = {c["step"] for c in meta["checkpoints"]}
        report.already_done = sorted(listed & {c.step for c in checkpoints})
        todo = [c for c in checkpoints if c.step not in listed]
        known = {c["sha256"]: c["step"] for c in meta["checkpoints"] if c.get("duplicate_of") is None}
        failed = {f["step"]: f for f in meta.get("failed", [])}
        bar = tqdm(todo, desc="checkpoints", unit="ckpt", disable=not progress or not todo, dynamic_ncols=True)
        for ck in bar:
            bar.set_postfix_str(ck.revision)
            try:
                entry, rows = _process(ck, shape, known, settings)
            except (CheckpointError, CheckpointNotFoundError) as exc:
                message = f"{ck.revision}: {exc}"
                tqdm.write(f"error: {message}")
                failed[ck.step] = {"step": ck.step, "revision": ck.revision, "error": str(exc)}
                report.failed.append(failed[ck.step])
            else:
                failed.pop(ck.step, None)
                meta["checkpoints"] = sorted(meta["checkpoints"] + [entry], key=lambda c: c["step"])
                if rows is None:
                    report.duplicates[ck.step] = entry["duplicate_of"]
                    tqdm.write(f"note: {ck.revision} has weights identical to step {entry['duplicate_of']}; marked duplicate_of")
                else:
                    known[entry["sha256"]] = ck.step
                    heads = sort_heads(pa.concat_tables([heads, rows]))
                    report.computed.append(ck.step)
            meta["failed"] = sorted(failed.values(), key=lambda f: f["step"])
            commit_store(out, meta, heads)
        if not out.exists():  # nothing to do and nothing listed: still leave a valid empty store
            commit_store(out, meta, heads)
    return report


def _process(
    ck: LocalCheckpoint, shape: ModelShape, known: dict[str, int], settings: Settings
) -> tuple[dict[str, Any], pa.Table | None]:
    """Hash one checkpoint and, unless it duplicates a known one, compute its rows."""
    files = weight_files(ck.path)
    digests = {f.name: file_sha256(f) for f in files}
    sha = weights_fingerprint(digests)
    tokens = ck.step * settings.tokens_per_step if settings.tokens_per_step else None
    entry = {
        "step": ck.step,
        "revision": ck.revision,
        "tokens": tokens,
        "sha256": sha,
        "files": digests,
        "duplicate_of": known.get(sha),
    }
    if entry["duplicate_of"] is not None:
        return entry, None
    this_shape = model_shape(read_config(ck.path))
    if this_shape != shape:
        raise CheckpointError(f"config.json describes {this_shape.as_meta()}, but the run's model is {shape.as_meta()}")
    where = tensor_names(files)
    tensors = read_tensors(where, attention_tensor_names(shape, where))
    w_q, w_k = extract_qk(shape, tensors)
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
    )
    return entry, heads_rows(ck.step, stats)


def _model_shape(checkpoints: list[LocalCheckpoint]) -> tuple[ModelShape, dict[str, Any]]:
    """The run's model, from the first checkpoint with a readable config.json."""
    errors = []
    for ck in checkpoints:
        try:
            config = read_config(ck.path)
        except (CheckpointError, CheckpointNotFoundError) as exc:
            errors.append(str(exc))
            continue
        return model_shape(config), config
    raise CheckpointNotFoundError("no checkpoint has a readable config.json: " + "; ".join(errors[:3]))


def _read_run_info(source: Path) -> dict[str, Any] | None:
    path = source / RUN_INFO_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is not valid JSON: {exc}") from exc


def _open_or_create(out: Path, model: dict[str, Any], settings: Settings) -> tuple[dict[str, Any], pa.Table]:
    """Resume an existing store (checking it is the same model) or start a new one."""
    if not (out / META_FILE).is_file():
        if out.exists() and any(out.iterdir()):
            raise StoreError(f"--out {str(out)!r} exists, is not empty and is not a store; choose a new path")
        return new_meta(model=model, settings=settings.as_meta(), software=software_versions()), empty_heads_table()
    meta = read_meta(out)  # refuses newer schema versions before anything is written
    keys = ("family", "n_layers", "n_heads", "n_kv_heads", "d_model", "d_head")
    theirs = {k: meta["model"].get(k) for k in keys}
    ours = {k: model[k] for k in keys}
    if theirs != ours:
        raise StoreError(
            f"store {str(out)!r} holds a different model ({theirs}) than {settings.source!r} ({ours}); "
            "write to a new --out"
        )
    steps = done_steps(meta)
    if (out / HEADS_FILE).is_file():
        heads = pq.read_table(out / HEADS_FILE)
        heads = heads.filter(pc.is_in(heads["step"], pa.array(steps, pa.int64())))
    else:
        heads = empty_heads_table()
    return meta, sort_heads(heads)


@contextmanager
def _store_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock so two runs never write one store."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.parent / f".{out.name}.lock"
    with open(lock_path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise StoreError(f"another precompute run is writing {str(out)!r} (lock {str(lock_path)!r} is held)") from exc
        yield
