"""The statistics a view can show: URL name, widget label, axis symbol and unit.

One table for every page. Names are the store's column names (``stat=std``),
plus ``lambda``: lambda_k = s_k^2 for the singular-value index picked with the
``k`` parameter. Definitions live in ``analysis/store/format.py`` (COLUMN_DOCS) and
docs/design-notes.md section 3; this module only says how to label them.

"raw units" are the units of W_QK = W_Q^T W_K built from the checkpoint's
weights as stored: no 1/sqrt(d_head) factor, rotary position encoding ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headwatch.analysis.findings.values import FORWARD_STATS, LAMBDA, LLC_STAT
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import CIRCUIT_COLUMNS, COLUMN_DOCS, NULL_COLUMNS, SCALAR_COLUMNS
from headwatch.analysis.store.lenses.attention import ATTENTION, ATTENTION_COLUMN_DOCS, ATTENTION_STATISTICS
from headwatch.analysis.store.lenses.layers import LAYER_COLUMN_DOCS
from headwatch.analysis.store.lenses.llc import LLC, LLC_COLUMN_DOCS
from headwatch.analysis.store.lenses.overlaps import OVERLAP_COLUMN_DOCS

REL_CHANGE = "rel_change"  # from overlaps.parquet, laid out per checkpoint by analysis.store.Store.array


@dataclass(frozen=True)
class Stat:
    """How one statistic is named and labelled.

    Attributes:
        name: URL value and store column (``lambda``: s_k^2 from the ``sv`` column).
        label: what a select box shows.
        symbol: short symbol for axis titles and hover.
        unit: unit for axis titles.
        positive: values are >= 0, so a log axis or log colour makes sense.
        doc: one-line meaning.
        forward: a forward-lens statistic (``attention.parquet``), offered only for stores that have it.
        llc: the refined LLC (``llc.parquet``), offered only for stores that have it; estimated at a
            subset of the checkpoints, so figures draw it as markers (NaN elsewhere).
    """

    name: str
    label: str
    symbol: str
    unit: str
    positive: bool
    doc: str
    forward: bool = False
    llc: bool = False

    def title(self, k: int | None = None) -> str:
        """Axis title with unit: ``σ (raw units)``; ``λ_3 (raw units²)`` for lambda with k=3."""
        sym = self.symbol.replace("_k", f"_{k}") if k is not None else self.symbol
        return f"{sym} ({self.unit})"

    def short(self, k: int | None = None) -> str:
        return self.symbol.replace("_k", f"_{k}") if k is not None else self.symbol


RAW = "raw units"
_STATS = [
    Stat("std", "σ: standard deviation of entries", "σ", RAW, True, COLUMN_DOCS["std"]),
    Stat("kl_gauss", "D_KL(P‖N): distance from a Gaussian", "D_KL(P‖N(μ,σ))", "nats", True, COLUMN_DOCS["kl_gauss"]),
    Stat("kurtosis", "excess kurtosis of entries", "excess kurtosis", "dimensionless", False, COLUMN_DOCS["kurtosis"]),
    Stat("skew", "skewness of entries", "skewness", "dimensionless", False, COLUMN_DOCS["skew"]),
    Stat("mean", "μ: mean of entries", "μ", RAW, False, COLUMN_DOCS["mean"]),
    Stat("min", "smallest entry", "min w", RAW, False, COLUMN_DOCS["min"]),
    Stat("max", "largest entry", "max w", RAW, False, COLUMN_DOCS["max"]),
    Stat("stable_rank", "stable rank r_s", "r_s", "dimensionless", True, COLUMN_DOCS["stable_rank"]),
    Stat("spectral_entropy", "spectral entropy S", "S", "nats", True, COLUMN_DOCS["spectral_entropy"]),
    Stat("participation_ratio", "participation ratio", "PR", "dimensionless", True, COLUMN_DOCS["participation_ratio"]),
    Stat(
        "condition_number", "condition number s_max/s_min", "s_max/s_min", "dimensionless", True, COLUMN_DOCS["condition_number"]
    ),
    Stat("frob_norm", "Frobenius norm ‖W‖_F", "‖W‖_F", RAW, True, COLUMN_DOCS["frob_norm"]),
    Stat("spectral_norm", "spectral norm s_max", "s_max", RAW, True, COLUMN_DOCS["spectral_norm"]),
    Stat(
        LAMBDA,
        "λ_k = s_k²: k-th squared singular value",
        "λ_k",
        "raw units²",
        True,
        "the k-th largest squared singular value of the head's matrix, W_QK or W_OV (pick k with the slider)",
    ),
    # departures from the random-matrix null model (analysis/rmt/nullmodel.py)
    Stat("kl_null", "D_KL(P(λ)‖null): spectrum vs random heads", "D_KL(P(λ)‖null)", "nats", True, COLUMN_DOCS["kl_null"]),
    Stat(
        "stable_rank_over_null",
        "stable rank / random-head value",
        "r_s / r_s,null",
        "dimensionless",
        True,
        COLUMN_DOCS["stable_rank_over_null"],
    ),
    Stat(
        "spectral_entropy_over_null",
        "spectral entropy / random-head value",
        "S / S_null",
        "dimensionless",
        True,
        COLUMN_DOCS["spectral_entropy_over_null"],
    ),
    Stat(
        "participation_ratio_over_null",
        "participation ratio / random-head value",
        "PR / PR_null",
        "dimensionless",
        True,
        COLUMN_DOCS["participation_ratio_over_null"],
    ),
    # the circuit's symmetry, eigenvalue signs and movement (analysis/stats/circuits.py)
    Stat(
        "sym_frac", "symmetric fraction ‖(W+Wᵀ)/2‖²/‖W‖²", "sym. fraction", "dimensionless, 0 to 1", True, COLUMN_DOCS["sym_frac"]
    ),
    Stat(
        "eig_positivity",
        "eigenvalue positivity Σ Re μ / Σ |μ|",
        "Σ Re μ / Σ |μ|",
        "dimensionless, -1 to 1",
        False,
        COLUMN_DOCS["eig_positivity"],
    ),
    Stat(
        REL_CHANGE,
        "relative change to the next checkpoint ‖W(t′)−W(t)‖/‖W(t)‖",
        "‖ΔW‖_F/‖W‖_F",
        "dimensionless",
        True,
        OVERLAP_COLUMN_DOCS["rel_change"],
    ),
]
# forward-pass lenses (attention.parquet; analysis/attention/patterns.py): what the head does on text
_A = ATTENTION_COLUMN_DOCS
_STATS += [
    Stat("entropy", "attention entropy H (forward)", "H_attn", "bits", True, _A["entropy"], forward=True),
    Stat("entropy_std", "spread of attention entropy (forward)", "sd(H_attn)", "bits", True, _A["entropy_std"], forward=True),
    Stat("span", "attention span (forward)", "span", "positions", True, _A["span"], forward=True),
    Stat("sink", "sink mass: attention on position 1 (forward)", "sink", "attention", True, _A["sink"], forward=True),
    Stat("prev_token", "previous-token score (forward)", "prev", "attention", True, _A["prev_token"], forward=True),
    Stat("induction", "induction score (forward)", "induction", "attention", True, _A["induction"], forward=True),
    Stat("current_token", "current-token score (forward)", "current", "attention", True, _A["current_token"], forward=True),
]
# refined local learning coefficient (llc.parquet; precompute/lenses/llc.py): the loss landscape around the head
_STATS += [
    Stat(
        LLC_STAT, "refined LLC (SGLD; a subset of checkpoints)", "rLLC", "dimensionless", False, LLC_COLUMN_DOCS["llc"], llc=True
    )
]
STATS: dict[str, Stat] = {s.name: s for s in _STATS}
assert set(STATS) - {LAMBDA} == set(
    SCALAR_COLUMNS + NULL_COLUMNS + CIRCUIT_COLUMNS + (REL_CHANGE,) + ATTENTION_STATISTICS + (LLC_STAT,)
)
PER_HEAD_STATS = (*FORWARD_STATS, LLC_STAT)  # one value per head, whatever the matrix (qk / ov)

# The per-head products a store can hold, as the matrix choice (URL ``matrix=qk|ov``) names them.
MATRIX_LABELS = {"qk": "W_QK = W_Qᵀ W_K (where a head looks)", "ov": "W_OV = W_O,h W_V,h (what a head writes)"}


def _available(stat: Stat, store: Store) -> bool:
    return (not stat.forward or _recorded(stat.name, store)) and (not stat.llc or store.has(LLC))


def _recorded(name: str, store: Store) -> bool:
    """Whether the store's forward lens recorded ``name`` (a store written before the current-token score reads it
    as NaN: `analysis.store.older_versions`)."""
    if not store.has(ATTENTION):
        return False
    values = store.dense(ATTENTION, name)
    return values is not None and bool(np.isfinite(values).any())


def stats_for(store: Store) -> list[str]:
    """The statistics a picker offers for ``store``: the forward ones only when it has the lens, the
    refined LLC only when it has ``llc.parquet``."""
    return [name for name, s in STATS.items() if _available(s, store)]


# Statistics offered for trajectory embeddings: finite, smooth, one number per head.
TRAJECTORY_STATS = (
    "kl_gauss",
    "spectral_entropy",
    "std",
    "stable_rank",
    "kurtosis",
    "participation_ratio",
    "spectral_norm",
    "kl_null",
    "entropy",
    "span",
    "prev_token",
    "induction",
    LLC_STAT,
)


def trajectory_stats_for(store: Store) -> list[str]:
    """`TRAJECTORY_STATS` less the forward ones (the refined LLC) for a store without the lens (the table)."""
    return [name for name in TRAJECTORY_STATS if _available(STATS[name], store)]


# Whole-layer weight matrices (layers.parquet, one value per (step, layer, role)), as the Compare runs page
# offers them: URL ``stat=layer_<column>`` with the weight chosen as ``role``. Not per head, so not in STATS.
_L = LAYER_COLUMN_DOCS
LAYER_STATS: dict[str, Stat] = {
    s.name: s
    for s in (
        Stat("layer_frob_norm", "Frobenius norm of a layer weight (per layer)", "‖W‖_F", RAW, True, _L["frob_norm"]),
        Stat("layer_spectral_norm", "spectral norm of a layer weight (per layer)", "s_max(W)", RAW, True, _L["spectral_norm"]),
        Stat(
            "layer_stable_rank", "stable rank of a layer weight (per layer)", "r_s(W)", "dimensionless", True, _L["stable_rank"]
        ),
        Stat("layer_std", "σ of a layer weight's entries (per layer)", "σ(W)", RAW, True, _L["std"]),
        Stat(
            "layer_kurtosis",
            "excess kurtosis of a layer weight (per layer)",
            "excess kurtosis (W)",
            "dimensionless",
            False,
            _L["kurtosis"],
        ),
        Stat("layer_mp_kl", "D_KL from Marchenko-Pastur of a layer weight (per layer)", "D_KL(P‖MP)", "nats", True, _L["mp_kl"]),
        Stat(
            "layer_mp_spikes",
            "spikes above Marchenko-Pastur of a layer weight (per layer)",
            "MP spikes",
            "count",
            True,
            _L["mp_spikes"],
        ),
        Stat("layer_alpha", "power-law tail exponent α of a layer weight (per layer)", "α", "dimensionless", True, _L["alpha"]),
    )
}


def layer_column(name: str) -> str:
    """The layers.parquet column of a `LAYER_STATS` name (``layer_alpha`` -> ``alpha``)."""
    return name.removeprefix("layer_")
