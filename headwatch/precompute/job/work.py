"""One checkpoint's work, the same under every executor, and how the driver settles it.

`checkpoint_work` turns a fetched checkpoint into its `Work`: the meta.json entry
(without ``duplicate_of``), its ``heads.parquet`` rows (one set per per-head matrix the
run computes, ``qk`` and/or ``ov``) and, when the run computes overlaps, what the
checkpoint's pairs need: each matrix's leading singular vectors and its factors. It runs wherever the executor runs it: in
the run's own thread (`precompute.job.executor.LocalExecutor`) or in a Ray task
(`precompute.job.ray_executor`). `Work.settle` is the driver's half: only the driver
knows which fingerprints are committed, so only it decides ``duplicate_of``; rows a
task computed for a checkpoint that turns out to duplicate an earlier one are
dropped there. Both executors share these two functions, which is why their stores
are identical.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

import pyarrow as pa
import torch

from headwatch.analysis.store import CheckpointEntry
from headwatch.analysis.store.format import HEADS
from headwatch.analysis.weights.heads import Device, checkpoint_statistics
from headwatch.families.family import ModelShape
from headwatch.precompute.job.context import PassJob, TaskExecutor
from headwatch.precompute.job.factors import checked_factors
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched
from headwatch.precompute.store import pairs as ovl
from headwatch.precompute.store.tables import heads_rows


@dataclass
class Work:
    """What computing one checkpoint produced.

    Attributes:
        entry: its meta.json entry, ``duplicate_of`` unset (the driver sets it).
        rows: its ``heads.parquet`` rows; None when its tensors were not read or not computed
            (its fingerprint was known where it ran).
        vectors: its leading singular vectors and factors by matrix (None when the run computes no
            overlaps, or no rows).
        lens_rows: its rows of the tables of the lenses computed in the same pass (`precompute.job.context.PassJob`:
            the whole-layer matrices, the forward lens) by table name, when ``rows`` were computed;
            dropped with them for a duplicate.
    """

    entry: CheckpointEntry
    rows: pa.Table | None
    vectors: ovl.Vectors | None
    lens_rows: dict[str, pa.Table] | None = None

    def settle(self, known: Mapping[str, int]) -> tuple[CheckpointEntry, pa.Table | None, ovl.Vectors | None]:
        """The entry, rows and vectors to record, given the fingerprints committed so far: a
        checkpoint whose weights equal a committed one's gets ``duplicate_of`` and no rows.

        Raises:
            AssertionError: no rows although the checkpoint duplicates nothing (recompute it first).
        """
        duplicate_of = known.get(self.entry.sha256)
        if duplicate_of is not None:
            return dataclasses.replace(self.entry, duplicate_of=duplicate_of), None, None
        assert self.rows is not None, f"step {self.entry.step}: no rows and no duplicate"
        return self.entry, self.rows, self.vectors


def checkpoint_work(
    fetched: Fetched,
    shape: ModelShape,
    settings: StoreSettings,
    *,
    known: Mapping[str, int],
    jobs: Mapping[str, PassJob] | None = None,
    src: CheckpointSource | None = None,
) -> Work:
    """Extract the factors of every per-head matrix of the run (``settings.head_matrices``), check
    them and compute every statistic, unless the checkpoint's fingerprint is in ``known`` or its
    tensors were not read (then ``rows`` is None); then each lens job's rows (``jobs``, by lens name:
    the whole-layer matrices from the fetched tensors, the forward lens from the whole checkpoint).

    Args:
        fetched: the checkpoint as fetched (`precompute.sources.source.CheckpointSource.fetch`).
        shape: the run's model.
        settings: the run's settings (device, dtypes, chunking, K).
        known: fingerprints whose statistics need not be computed again.
        jobs: the pass jobs of the lenses computed with the heads (`precompute.job.context.PassJob`).
        src: the source, which provides the whole checkpoint for a lens that loads it.

    Raises:
        CheckpointError: non-finite weights, shapes the extraction refuses, or a checkpoint
            transformers cannot load for the lens.
    """
    ref = fetched.ref
    tokens = ref.tokens if ref.tokens is not None else ref.step * settings.tokens_per_step if settings.tokens_per_step else None
    entry = CheckpointEntry(
        step=ref.step,
        revision=ref.revision,
        tokens=tokens,
        sha256=fetched.sha256,
        sha256_source=fetched.sha256_source,
        files=dict(fetched.files),
        commit=fetched.commit,
    )
    if fetched.tensors is None or fetched.sha256 in known:
        return Work(entry, None, None)
    factors = checked_factors(shape, fetched.tensors, settings.head_matrices)
    tables = []
    vectors: ovl.Vectors = {}
    for matrix, (left, right) in factors.items():
        stats = checkpoint_statistics(
            left,
            right,
            device=cast(Device, settings.device),
            dtype=getattr(torch, settings.dtype),
            spectrum_dtype=getattr(torch, settings.spectrum_dtype),
            chunk_elements=settings.chunk_elements,
            vectors=settings.overlap_k,
        )
        if settings.overlap_k:
            vectors[matrix] = ovl.HeadVectors.of(stats.pop("u"), stats.pop("v"), left, right, stats["sv"])
        tables.append(heads_rows(ref.step, stats, d_model=shape.d_model, matrix=matrix))
    lens_rows: dict[str, pa.Table] = {}
    for job in (jobs or {}).values():
        lens_rows |= job.checkpoint_rows(fetched, shape, settings, src)
    return Work(entry, HEADS.sorted(pa.concat_tables(tables)), vectors if settings.overlap_k else None, lens_rows=lens_rows)


# What an executor hands the driver per checkpoint, in step order: the checkpoint and a
# call that returns its `Work` or raises its per-checkpoint error (`CHECKPOINT_ERRORS`).
Results = Generator[tuple[CheckpointRef, Callable[[], Work]], None, None]


class Executor(TaskExecutor, Protocol):
    """Runs `checkpoint_work` for a list of checkpoints and yields the results in step order
    (`precompute.job.executor.LocalExecutor`, `precompute.job.ray_executor.RayExecutor`); and, for the
    computations' fills, any other per-checkpoint work (`precompute.job.context.TaskExecutor.each`)."""

    def results(
        self,
        todo: list[CheckpointRef],
        *,
        shape: ModelShape,
        settings: StoreSettings,
        known: Callable[[], Mapping[str, int]],
        jobs: Mapping[str, PassJob] | None = None,
    ) -> Results:
        """One ``(ref, result)`` per checkpoint of ``todo``, in order; ``known()`` gives the
        fingerprints committed so far (a hint: `Work.settle` decides); ``jobs``, the lens pass
        jobs for every checkpoint computed. Closing the iterator abandons the work still in flight."""
        ...
