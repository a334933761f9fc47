"""The composition lens (``--lenses composition``): Q-, K- and V-composition between heads.

In the pass over each new checkpoint, `CompositionJob` turns the per-head factors of W_QK and
W_OV (the fetch reads both: the lens needs ``--matrices`` with ``qk`` and ``ov``) into the
checkpoint's ``composition.parquet`` rows (`analysis.weights.composition`: every ordered pair of heads
in different layers, or with ``--composition-top K`` the K strongest sources of each target
head per kind). `CompositionComputation.begin` records in ``meta.json`` ``composition`` the random
baseline for the model's shapes and which pairs are kept; `CompositionComputation.fill` gives the
store's checkpoints computed without the lens their rows, reading each again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from headwatch.analysis.store import ModelInfo
from headwatch.analysis.store.lenses.composition import COMPOSITION, COMPOSITION_LENS, CompositionOptions
from headwatch.analysis.weights.composition import (
    BASELINE_HEADS,
    BASELINE_SEED,
    KINDS,
    baseline_draws,
    baseline_rms,
    composition_scores,
    random_baseline,
    strongest_sources,
)
from headwatch.families.family import ModelShape
from headwatch.families.registry import folded_note
from headwatch.precompute.job.context import FactorsComputation
from headwatch.precompute.job.factors import pair_scores
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.source import CheckpointSource, Fetched
from headwatch.precompute.store.tables import head_pair_rows

log = logging.getLogger("precompute")


def composition_rows(step: int, scores: torch.Tensor, keep: torch.Tensor | None = None) -> pa.Table:
    """The ``composition.parquet`` rows of one checkpoint, in the table's order.

    Args:
        step: the checkpoint's step.
        scores: `analysis.weights.composition.composition_scores`' ``(3, n_layers, n_heads, n_layers, n_heads)``.
        keep: bool ``(n_layers, n_heads, n_layers, n_heads)``: the pairs to write (None: every pair with scores).
    """
    values = scores.numpy()
    mask = ~np.isnan(values).all(axis=0)  # (layer_a, head_a, layer_b, head_b): pairs with a < b
    if keep is not None:
        mask &= keep.numpy()
    return head_pair_rows(step, values, mask, KINDS, COMPOSITION.schema)


def composition_work(fetched: Fetched, shape: ModelShape, settings: StoreSettings, *, top: int | None) -> pa.Table:
    """The ``composition.parquet`` rows of a fetched checkpoint (read with ``qk`` and ``ov``).

    Raises:
        CheckpointError: the factors are missing, misshapen or non-finite.
    """
    scores = pair_scores(fetched, shape, settings, composition_scores)
    return composition_rows(fetched.ref.step, scores, None if top is None else strongest_sources(scores, top))


@dataclass(frozen=True)
class CompositionJob:
    """The lens's share of the pass over each checkpoint (`precompute.job.context.PassJob`)."""

    top: int | None

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        return {COMPOSITION.name: composition_work(fetched, shape, settings, top=self.top)}


class CompositionComputation(FactorsComputation):
    """The composition scores: computed in the pass over each new checkpoint, filled afterwards for
    the store's others; the kept pairs and the baseline recorded once per store."""

    lens = COMPOSITION_LENS
    what = "composition scores"
    options: CompositionOptions

    def describe(self, model: ModelInfo, settings: StoreSettings) -> dict[str, Any]:
        """The baseline (simulated: same shapes, same seed, same numbers) and how the scores are computed."""
        baseline = random_baseline(model.d_head, model.d_model, device=settings.device)
        draws = baseline_draws(model.d_head, model.d_model)
        return {
            "baseline": baseline,
            "baseline_rms": baseline_rms(model.d_model),
            "baseline_method": f"mean score of independent standard Gaussian W_Q, W_K, W_O, W_V of shape "
            f"({model.d_head}, {model.d_model}): {draws} two-layer models of {BASELINE_HEADS} x {BASELINE_HEADS} head "
            f"pairs, seed {BASELINE_SEED}, float64; baseline_rms = 1/sqrt(d_model), the exact root mean square",
            "layernorm": "not folded: the raw attention weights, as in heads.parquet (a scalar gain cancels)"
            + (f"; except: {folded}" if (folded := folded_note(model.family)) else ""),
            "dtype": settings.spectrum_dtype,
        }

    def make_job(self, record: Mapping[str, Any]) -> CompositionJob:
        return CompositionJob(self.options.top)
