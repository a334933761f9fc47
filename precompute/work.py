"""One checkpoint's work, the same under every executor, and how the driver settles it.

`checkpoint_work` turns a fetched checkpoint into its `Work`: the meta.json entry
(without ``duplicate_of``), its ``heads.parquet`` rows (one set per per-head matrix the
run computes, ``qk`` and/or ``ov``) and, when the run computes overlaps, what the
checkpoint's pairs need: each matrix's leading singular vectors and its factors. It runs wherever the executor runs it: in
the run's own thread (`precompute.executor.LocalExecutor`) or in a Ray task
(`precompute.ray_executor`). `Work.settle` is the driver's half: only the driver
knows which fingerprints are committed, so only it decides ``duplicate_of``; rows a
task computed for a checkpoint that turns out to duplicate an earlier one are
dropped there. Both executors share these two functions, which is why their stores
are identical.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import torch

from analysis.errors import CheckpointError, CheckpointNotFoundError, UnknownArchitectureError
from analysis.blocks import extract_blocks
from analysis.extract import ModelShape, extract_heads
from analysis.heads import checkpoint_statistics, checkpoint_vectors
from analysis.layer_matrices import layer_matrix_statistics
from analysis.store import CheckpointEntry
from analysis.store.format import HEADS
from precompute.lenses import overlaps as ovl
from precompute.lenses.forward import ForwardJob, forward_lens
from precompute.sources.revisions import CheckpointRef
from precompute.settings import Settings
from precompute.sources.source import CheckpointSource, Fetched
from precompute.store.tables import heads_rows, layers_rows

# Per-checkpoint failures: the checkpoint is listed under `failed` and the run goes on.
CHECKPOINT_ERRORS = (CheckpointError, CheckpointNotFoundError, UnknownArchitectureError)


@dataclass
class Work:
    """What computing one checkpoint produced.

    Attributes:
        entry: its meta.json entry, ``duplicate_of`` unset (the driver sets it).
        rows: its ``heads.parquet`` rows; None when its tensors were not read or not computed
            (its fingerprint was known where it ran).
        vectors: its leading singular vectors and factors by matrix (None when the run computes no
            overlaps, or no rows).
        fetched, requests, peak_disk: what its fetch moved, when it ran on a meter of its own
            (a Ray task); zero when the run's meter counted it.
        layer_rows: its ``layers.parquet`` rows when the run computes the whole-layer matrices
            (``--matrices`` with ``layers``), else None; dropped with ``rows`` for a duplicate.
        forward: its rows of the forward tables by registry name (`precompute.lenses.forward`), when the
            run computes a lens and ``rows`` were computed; dropped with them for a duplicate.
    """

    entry: CheckpointEntry
    rows: pa.Table | None
    vectors: ovl.Vectors | None
    fetched: int = 0
    requests: int = 0
    peak_disk: int = 0
    layer_rows: pa.Table | None = None
    forward: dict[str, pa.Table] | None = None

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
    fetched: Fetched, shape: ModelShape, settings: Settings, *, known: Mapping[str, int],
    forward: ForwardJob | None = None, src: CheckpointSource | None = None,
) -> Work:
    """Extract the factors of every per-head matrix of the run (``settings.head_matrices``), check
    them and compute every statistic, unless the checkpoint's fingerprint is in ``known`` or its
    tensors were not read (then ``rows`` is None); with a ``forward`` job, also load the whole
    checkpoint from ``src`` and compute its forward tables.

    Args:
        fetched: the checkpoint as fetched (`precompute.sources.source.CheckpointSource.fetch`).
        shape: the run's model.
        settings: the run's settings (device, dtypes, chunking, K).
        known: fingerprints whose statistics need not be computed again.
        forward: the forward-pass lens's job (None: no lens).
        src: the source, which provides the whole checkpoint for the lens.

    Raises:
        CheckpointError: non-finite weights, shapes the extraction refuses, or a checkpoint
            transformers cannot load for the lens.
    """
    ref = fetched.ref
    if ref.tokens is not None:
        tokens = ref.tokens
    else:
        tokens = ref.step * settings.tokens_per_step if settings.tokens_per_step else None
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
            device=settings.device,
            dtype=getattr(torch, settings.dtype),
            spectrum_dtype=getattr(torch, settings.spectrum_dtype),
            chunk_elements=settings.chunk_elements,
            vectors=settings.overlap_k,
        )
        if settings.overlap_k:
            vectors[matrix] = ovl.HeadVectors.of(stats.pop("u"), stats.pop("v"), left, right, stats["sv"])
        tables.append(heads_rows(ref.step, stats, d_model=shape.d_model, matrix=matrix))
    layer_rows = layer_work(fetched, shape, settings) if settings.layers else None
    return Work(entry, HEADS.sorted(pa.concat_tables(tables)), vectors if settings.overlap_k else None,
                layer_rows=layer_rows, forward=forward_work(src, ref, shape, forward) if forward else None)


def checked_factors(
    shape: ModelShape, tensors: Mapping[str, torch.Tensor], matrices: tuple[str, ...]
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Every per-head factor pair of ``matrices`` (`analysis.extract.extract_heads`), all finite.

    Raises:
        CheckpointError: non-finite values, or shapes the extraction refuses.
    """
    factors = extract_heads(shape, tensors, matrices=matrices)  # (n_layers, n_heads, d_head, d_model) each
    names = {"qk": ("W_Q", "W_K"), "ov": ("W_O", "W_V")}
    for matrix, pair in factors.items():
        for name, w in zip(names[matrix], pair):
            layer = first_non_finite(w)
            if layer is not None:
                raise CheckpointError(f"non-finite values in {name} of layer {layer}; the checkpoint is corrupt or diverged")
    return factors


def first_non_finite(w: torch.Tensor) -> int | None:
    """The first index along ``w``'s first axis whose entries are not all finite, or None.

    One summing pass finds the candidates (a NaN or an infinity makes a sum non-finite; a
    sum of finite values can overflow only where they are huge), and an exact test of
    those candidates alone decides: many times faster than testing every entry.
    """
    suspect = (~torch.isfinite(w.flatten(1).sum(dim=1))).nonzero().flatten().tolist()
    return next((i for i in suspect if not bool(torch.isfinite(w[i]).all())), None)


def pair_vectors(shape: ModelShape, tensors: Mapping[str, torch.Tensor], settings: Settings) -> ovl.Vectors:
    """What a checkpoint's overlap pairs need, for a checkpoint read again (`precompute.run`): the same
    vectors, bit for bit, as `checkpoint_work` returns, without the other statistics.

    Raises:
        CheckpointError: as `checked_factors`.
    """
    out: ovl.Vectors = {}
    for matrix, (left, right) in checked_factors(shape, tensors, settings.head_matrices).items():
        u, v, sv = checkpoint_vectors(left, right, settings.overlap_k, device=settings.device,
                                      spectrum_dtype=getattr(torch, settings.spectrum_dtype), values=True)
        out[matrix] = ovl.HeadVectors.of(u, v, left, right, sv)
    return out


def layer_work(fetched: Fetched, shape: ModelShape, settings: Settings) -> pa.Table:
    """The ``layers.parquet`` rows of a fetched checkpoint (read with ``layers=True``): every 2-D
    weight of every block (`analysis.blocks`), checked finite, with its statistics.

    Raises:
        CheckpointError: a block weight is missing, misshapen or non-finite.
    """
    assert fetched.tensors is not None
    blocks = extract_blocks(shape, fetched.tensors)  # role -> n_layers x (rows, cols)
    for role, mats in blocks.items():
        for layer, w in enumerate(mats):
            if not bool(torch.isfinite(w).all()):
                raise CheckpointError(f"non-finite values in the {role} weight of layer {layer}; the checkpoint is corrupt or diverged")
    records = layer_matrix_statistics(blocks, device=settings.device)
    return layers_rows(fetched.ref.step, records)


def forward_work(src: CheckpointSource | None, ref: CheckpointRef, shape: ModelShape, forward: ForwardJob) -> dict[str, pa.Table]:
    """One checkpoint's forward-table rows: the whole checkpoint, held only while it is evaluated.

    Raises:
        CheckpointError: it cannot be loaded or evaluated.
    """
    assert src is not None, "the forward lens needs the source"
    with src.checkpoint_folder(ref) as folder:
        return forward_lens(folder, ref.step, forward, n_layers=shape.n_layers, n_heads=shape.n_heads)


# What an executor hands the driver per checkpoint, in step order: the checkpoint and a
# call that returns its `Work` or raises its per-checkpoint error (`CHECKPOINT_ERRORS`).
Results = Iterator[tuple[CheckpointRef, Callable[[], Work]]]


class Executor(Protocol):
    """Runs `checkpoint_work` for a list of checkpoints and yields the results in step order
    (`precompute.executor.LocalExecutor`, `precompute.ray_executor.RayExecutor`)."""

    def results(
        self, todo: list[CheckpointRef], *, shape: ModelShape, settings: Settings,
        known: Callable[[], Mapping[str, int]], forward: ForwardJob | None = None,
    ) -> Results:
        """One ``(ref, result)`` per checkpoint of ``todo``, in order; ``known()`` gives the
        fingerprints committed so far (a hint: `Work.settle` decides); ``forward``, the lens's
        job for every checkpoint computed. Closing the iterator abandons the work still in flight."""
        ...
