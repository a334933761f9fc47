"""The similarity lens (``--lenses similarity``): how alike heads are, independently of the residual basis.

In the pass over each new checkpoint, `SimilarityJob` turns the per-head factors of W_QK and W_OV
(the fetch reads both: the lens needs ``--matrices`` with ``qk`` and ``ov``) into the checkpoint's
``similarity.parquet`` rows (`analysis.weights.similarity`: every unordered pair of heads) and its
``ultrametricity.parquet`` rows (`analysis.weights.ultrametric`: per layer and distance, the share of
ultrametric triangles beside that of random heads). `SimilarityComputation.begin` records in ``meta.json``
``similarity`` the tolerance, the random baselines for the model's shapes and the definitions;
`SimilarityComputation.fill` gives the store's checkpoints computed without the lens their rows, reading
each again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from headwatch.analysis.store import ModelInfo
from headwatch.analysis.store.lenses.similarity import (
    SIMILARITY,
    SIMILARITY_LENS,
    SIMILARITY_STATS,
    ULTRAMETRICITY,
    SimilarityOptions,
)
from headwatch.analysis.weights.similarity import (
    BASELINE_SEED,
    COLUMNS,
    baseline_layers,
    expected,
    layer_ultrametricity,
    random_baseline,
    similarity,
)
from headwatch.families.family import ModelShape
from headwatch.families.registry import folded_note
from headwatch.precompute.job.context import FactorsComputation
from headwatch.precompute.job.factors import pair_scores
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.source import CheckpointSource, Fetched
from headwatch.precompute.store.tables import head_pair_rows

log = logging.getLogger("precompute")

assert COLUMNS == SIMILARITY_STATS, "analysis.weights.similarity and the store format name the columns alike"

DEFINITIONS = {
    "frob": "<M_a, M_b>_F / (||M_a||_F ||M_b||_F) of the two heads' W_QK (= W_Q^T W_K) or W_OV (= W_O W_V)",
    "col": "mean of cos^2 over the principal angles between the column spaces of M_a and M_b "
    "(scipy.linalg.subspace_angles: min(rank_a, rank_b) angles, rank by scipy.linalg.orth's rule)",
    "row": "the same for the row spaces",
    "distance": "frob: sqrt(2 - 2 frob) (distance between the unit-norm matrices); col, row: sqrt(1 - x) "
    "(chordal distance ||P_a - P_b||_F / sqrt(2 d_head) between subspaces of dimension d_head)",
    "share": "share of the triangles of distinct heads of one layer, sides d1 <= d2 <= d3, with d3 - d2 <= tolerance * (d3 - d1)",
    "share_of_max": "share of those triangles with d3 - d2 <= tolerance * d3",
    "invariance": "unchanged by any orthogonal change of basis of the residual stream (every factor W -> W R^T); "
    "changed by a non-orthogonal one, such as a LayerNorm gain folded into the weights",
}


def similarity_rows(step: int, values: np.ndarray) -> pa.Table:
    """The ``similarity.parquet`` rows of one checkpoint, in the table's order.

    Args:
        step: the checkpoint's step.
        values: `analysis.weights.similarity.similarity`'s ``(6, n_layers, n_heads, n_layers, n_heads)``.
    """
    n_layers, n_heads = values.shape[1:3]
    upper = np.triu(np.ones((n_layers * n_heads,) * 2, dtype=bool), 1).reshape(n_layers, n_heads, n_layers, n_heads)
    return head_pair_rows(step, values, upper, COLUMNS, SIMILARITY.schema)


def ultrametricity_rows(step: int, values: np.ndarray, tol: float, baseline: Mapping[str, Any]) -> pa.Table:
    """The ``ultrametricity.parquet`` rows of one checkpoint: a row per layer and distance, for layers
    whose heads form a triangle (3 heads or more).

    Args:
        step: the checkpoint's step.
        values: `analysis.weights.similarity.similarity`'s ``(6, n_layers, n_heads, n_layers, n_heads)``, in float64
            (the shares are computed from these, not from the stored float32 values).
        tol: the tolerance.
        baseline: meta.json ``similarity`` ``baseline`` (`analysis.weights.similarity.random_baseline`).
    """
    u = layer_ultrametricity(values, tol)
    n_layers = u["share"].shape[1]
    columns: dict[str, list[Any]] = {name: [] for name in ULTRAMETRICITY.schema.names}
    if values.shape[2] >= 3:
        for layer in range(n_layers):
            for c, column in sorted(enumerate(COLUMNS), key=lambda item: item[1]):  # the table's order
                columns["step"].append(step)
                columns["layer"].append(layer)
                columns["distance"].append(column)
                columns["triangles"].append(int(u["triangles"][c, layer]))
                for key in ("share", "share_of_max"):
                    columns[key].append(float(u[key][c, layer]))
                    columns[key.replace("share", "baseline")].append(baseline[key][column])
    return pa.table(columns, schema=ULTRAMETRICITY.schema)


def similarity_work(
    fetched: Fetched, shape: ModelShape, settings: StoreSettings, *, tol: float, baseline: Mapping[str, Any]
) -> dict[str, pa.Table]:
    """Both tables' rows of a fetched checkpoint (read with ``qk`` and ``ov``).

    Raises:
        CheckpointError: the factors are missing, misshapen or non-finite.
    """
    values = pair_scores(fetched, shape, settings, similarity).numpy()
    step = fetched.ref.step
    return {
        SIMILARITY.name: similarity_rows(step, values),
        ULTRAMETRICITY.name: ultrametricity_rows(step, values, tol, baseline),
    }


@dataclass(frozen=True)
class SimilarityJob:
    """The lens's share of the pass over each checkpoint (`precompute.job.context.PassJob`)."""

    tol: float
    baseline: Mapping[str, Any]

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        return similarity_work(fetched, shape, settings, tol=self.tol, baseline=self.baseline)


class SimilarityComputation(FactorsComputation):
    """The similarity statistics: computed in the pass over each new checkpoint, filled afterwards for
    the store's others; the tolerance and the baselines recorded once per store (the pass job writes the
    baselines beside the shares)."""

    lens = SIMILARITY_LENS
    what = "head similarity"
    options: SimilarityOptions

    def describe(self, model: ModelInfo, settings: StoreSettings) -> dict[str, Any]:
        """The baselines (simulated: same shapes, same seed, same numbers) and the definitions."""
        layers = baseline_layers(model.n_heads)
        return {
            "baseline": random_baseline(
                model.n_heads,
                model.d_head,
                model.d_model,
                tol=self.options.tolerance,
                device=settings.device,
                chunk_elements=settings.chunk_elements,
            ),
            "expected": expected(model.d_head, model.d_model),
            "baseline_method": f"independent standard Gaussian W_Q, W_K, W_O, W_V of shape ({model.d_head}, "
            f"{model.d_model}): {max(1, layers)} layers of {model.n_heads} heads, pairs and triangles within each "
            f"layer, seed {BASELINE_SEED}, float64; 'mean' and 'rms' over the pairs, 'share' and 'share_of_max' "
            "over the triangles (None below 3 heads); 'expected' gives the exact moments",
            "definitions": DEFINITIONS,
            "layernorm": "not folded: the raw attention weights, as in heads.parquet (a uniform gain cancels)"
            + (f"; except: {folded}" if (folded := folded_note(model.family)) else ""),
            "dtype": settings.spectrum_dtype,
        }

    def make_job(self, record: Mapping[str, Any]) -> SimilarityJob:
        return SimilarityJob(self.options.tolerance, record["baseline"])
