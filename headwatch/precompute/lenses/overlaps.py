"""The overlaps lens: singular-vector overlaps and relative change between consecutive checkpoints.

The pass over each checkpoint keeps its leading singular vectors and factors
(`precompute.job.work.checkpoint_work`); the run state pairs them with the previous checkpoint's
(`precompute.job.state.RunState`) and `OverlapsComputation.fill` computes the pairs still missing by
reading checkpoints again (`pair_vectors`). What a pair's rows are, which pairs a store needs
and how they are filled: `precompute.store.pairs`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import cast

import pyarrow as pa
import torch

from headwatch.analysis.store.lenses.overlaps import OVERLAPS_LENS
from headwatch.analysis.weights.heads import Device, checkpoint_vectors
from headwatch.families.family import ModelShape
from headwatch.precompute.job.context import CHECKPOINT_ERRORS, BaseComputation, RunContext, fetch_again
from headwatch.precompute.job.factors import checked_factors
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.store.pairs import HeadVectors, OverlapFiller, Vectors, overlaps_meta

log = logging.getLogger("precompute")


def pair_vectors(shape: ModelShape, tensors: Mapping[str, torch.Tensor], settings: StoreSettings) -> Vectors:
    """What a checkpoint's overlap pairs need, for a checkpoint read again: the same vectors, bit for
    bit, as `precompute.job.work.checkpoint_work` returns, without the other statistics.

    Raises:
        CheckpointError: as `precompute.job.factors.checked_factors`.
    """
    out: Vectors = {}
    for matrix, (left, right) in checked_factors(shape, tensors, settings.head_matrices).items():
        u, v, sv = checkpoint_vectors(
            left,
            right,
            settings.overlap_k,
            device=cast(Device, settings.device),
            spectrum_dtype=getattr(torch, settings.spectrum_dtype),
            values=True,
        )
        out[matrix] = HeadVectors.of(u, v, left, right, sv)
    return out


class OverlapsComputation(BaseComputation):
    """The overlaps lens: the pass over each checkpoint keeps its vectors (`precompute.job.state.RunState.add`
    pairs them with the previous checkpoint's); `fill` computes the pairs still missing (a resumed run,
    a checkpoint filled in between two others, a store from before overlaps existed) by re-reading the
    checkpoints concerned."""

    lens = OVERLAPS_LENS

    def begin(self, run: RunContext) -> None:
        if run.settings.overlap_k:
            run.state.meta.overlaps = overlaps_meta(run.settings.overlap_k)

    def fill(self, run: RunContext) -> None:
        plan, settings, state = run.plan, run.settings, run.state
        if not settings.overlap_k:
            return
        src, shape = plan.src, plan.shape
        src.stop.clear()  # set when the prefetcher closed; these reads are wanted

        def load(step: int) -> Vectors | None:
            entry = state.meta.entry(step)
            try:
                fetched = fetch_again(
                    plan, entry, then="recompute the store to get its overlaps", matrices=settings.head_matrices
                )
                assert fetched.tensors is not None
                return pair_vectors(shape, fetched.tensors, settings)
            except CHECKPOINT_ERRORS as exc:
                log.warning(
                    "%s: cannot re-read it for singular-vector overlaps (%s); its pairs are left out", entry.revision, exc
                )
                return None

        def commit(table: pa.Table) -> None:
            state.overlaps = table
            state.commit(heads=False)

        filler = OverlapFiller(load, commit, held=state.finish_vectors())
        _, left_out = filler.fill(state.overlaps, state.meta.done_steps, settings.head_matrices, state.meta.state_steps)
        if left_out:
            pairs = ", ".join(f"{a}->{b}" for a, b in left_out[:5])
            run.report.notes.append(
                f"note: {len(left_out)} checkpoint pairs have no singular-vector overlaps ({pairs}"
                f"{', ...' if len(left_out) > 5 else ''}): their checkpoints could not be re-read (see the warnings "
                "above); the level-crossing view marks those approaches unresolved"
            )
