"""The whole-layer matrices lens (``--matrices layers``): every 2-D weight of every block.

In the pass over each new checkpoint, `LayersJob` turns the block weights the fetch read
(``layers=True``) into the checkpoint's ``layers.parquet`` rows (`analysis.weights.layers`:
element-wise statistics, all singular values, their Marchenko-Pastur departure and
weightwatcher's alpha). `LayersComputation.fill` gives the store's checkpoints that have statistics
but no layer rows (a store computed without ``layers``) theirs, reading each again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import torch

from headwatch.analysis.errors import CheckpointError
from headwatch.analysis.store.lenses.layers import LAYERS, LAYERS_LENS
from headwatch.analysis.weights.heads import Device
from headwatch.analysis.weights.layers import layer_matrix_statistics
from headwatch.families.blocks import extract_blocks
from headwatch.families.family import ModelShape
from headwatch.precompute.job.context import BaseComputation, ComputationSetup, RunContext, refill
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.source import CheckpointSource, Fetched
from headwatch.precompute.store.tables import layers_rows

log = logging.getLogger("precompute")


def layer_work(fetched: Fetched, shape: ModelShape, settings: StoreSettings) -> pa.Table:
    """The ``layers.parquet`` rows of a fetched checkpoint (read with ``layers=True``): every 2-D
    weight of every block (`families.blocks`), checked finite, with its statistics.

    Raises:
        CheckpointError: a block weight is missing, misshapen or non-finite.
    """
    assert fetched.tensors is not None
    blocks = extract_blocks(shape, fetched.tensors)  # role -> n_layers x (rows, cols)
    for role, mats in blocks.items():
        for layer, w in enumerate(mats):
            if not bool(torch.isfinite(w).all()):
                raise CheckpointError(
                    f"non-finite values in the {role} weight of layer {layer}; the checkpoint is corrupt or diverged"
                )
    records = layer_matrix_statistics(blocks, device=cast(Device, settings.device))
    return layers_rows(fetched.ref.step, records)


@dataclass(frozen=True)
class LayersJob:
    """The lens's share of the pass over each checkpoint (`precompute.job.context.PassJob`)."""

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        return {LAYERS.name: layer_work(fetched, shape, settings)}


class LayersComputation(BaseComputation):
    """The whole-layer matrices: computed in the pass over each new checkpoint (the fetch reads the
    block weights when the settings ask for ``layers``), filled afterwards for the store's others."""

    lens = LAYERS_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        super().__init__(setup)
        self.pass_job = LayersJob()

    def fill(self, run: RunContext) -> None:
        refill(
            run,
            self.lens,
            lambda fetched: {LAYERS.name: layer_work(fetched, run.plan.shape, run.settings)},
            what="layer matrices",
            rows_name="layer-matrix",
            desc="layer matrices",
            layers=True,
        )
