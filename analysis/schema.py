"""The statistics store's format: schema version, columns and the fixed histogram bins.

This module is the single definition of what a store contains. It imports
neither torch nor streamlit, so the dashboard, the precompute job and anyone
reading a store with pandas agree on one description. The README's column
table documents the same names (a test keeps the two in step).
"""

from __future__ import annotations

import numpy as np

# Bumped whenever a reader of the previous version would misread a new store.
SCHEMA_VERSION = 1

# Fixed standardized-histogram edges, shared by every head, step and model:
# z = (w - mu) / sigma in [-10, 10] with bin width 0.1 (200 bins). Two more
# bins catch z < -10 (underflow, first) and z >= 10 (overflow, last), so
# `hist_z` has 202 probabilities that sum to 1 and nothing is dropped.
HIST_Z_LO = -10.0
HIST_Z_HI = 10.0
HIST_Z_BINS = 200
HIST_Z_EDGES = np.linspace(HIST_Z_LO, HIST_Z_HI, HIST_Z_BINS + 1)

# Which product a row describes; only W_QK = W_Q^T W_K for now.
MATRICES = ("qk",)

# Row key of heads.parquet, in sort order.
KEY_COLUMNS = ("step", "layer", "head", "matrix")

# Scalar statistics (float64 columns), in the order written. Definitions: DESIGN.md s.3.
ELEMENTWISE_COLUMNS = ("mean", "std", "skew", "kurtosis", "min", "max", "kl_gauss")
SPECTRAL_COLUMNS = (
    "stable_rank",
    "spectral_entropy",
    "participation_ratio",
    "condition_number",
    "frob_norm",
    "spectral_norm",
)
SCALAR_COLUMNS = ELEMENTWISE_COLUMNS + SPECTRAL_COLUMNS

# List columns (float32 lists): the standardized histogram and the singular values.
LIST_COLUMNS = ("hist_z", "sv")

HEADS_COLUMNS = KEY_COLUMNS + SCALAR_COLUMNS + LIST_COLUMNS

# Departure from the random-matrix null model (analysis/nullmodel.py), float64.
# Added after the first stores: precompute writes them, and the reader derives
# them from `sv` for a store that lacks them, so older stores still open.
NULL_COLUMNS = (
    "kl_null",
    "stable_rank_over_null",
    "spectral_entropy_over_null",
    "participation_ratio_over_null",
)

# One-line meaning of every column, used in the README and the dataset card.
COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "matrix": 'which product the row describes; "qk" is W_QK = W_Q^T W_K',
    "mean": "mean of the d_model^2 entries",
    "std": "population standard deviation sigma of the entries",
    "skew": "skewness E[(w-mu)^3]/sigma^3 (NaN for a constant matrix)",
    "kurtosis": "excess kurtosis E[(w-mu)^4]/sigma^4 - 3 (NaN for a constant matrix)",
    "min": "smallest entry",
    "max": "largest entry",
    "kl_gauss": "D_KL(P || N(mu, sigma)) in nats over the hist_z bins, tails included",
    "hist_z": "probabilities of z = (w-mu)/sigma over hist_edges, underflow first, overflow last",
    "sv": "the d_head singular values s_k of W_QK, descending, never padded",
    "stable_rank": "sum(lambda) / lambda_max with lambda_k = s_k^2",
    "spectral_entropy": "-sum p_k ln p_k with p_k = lambda_k / sum(lambda), in nats",
    "participation_ratio": "(sum lambda)^2 / sum(lambda^2)",
    "condition_number": "s_max / s_min over the d_head values; inf when rank-deficient",
    "frob_norm": "Frobenius norm ||W_QK||_F = sqrt(sum lambda) = sqrt(sum of squared entries)",
    "spectral_norm": "largest singular value s_max",
    "kl_null": "D_KL(P(lambda) || free-product Marchenko-Pastur law) at matched scale, on 8 null-quantile bins",
    "stable_rank_over_null": "stable_rank / its expectation for a Gaussian head of the same shape",
    "spectral_entropy_over_null": "spectral_entropy / its expectation for a Gaussian head of the same shape",
    "participation_ratio_over_null": "participation_ratio / its expectation for a Gaussian head of the same shape",
}
assert set(COLUMN_DOCS) == set(HEADS_COLUMNS + NULL_COLUMNS)

# overlaps.parquet: how the leading singular directions of each head move between
# consecutive checkpoints with statistics (analysis/crossings.py uses them to tell a
# level crossing from a level repulsion). One row per (layer, head, pair of checkpoints),
# sorted by (layer, head, step) and written one row group per layer, so one head's rows
# are read without decoding the others'. K = meta.json ``overlaps.k`` (8, or d_head if smaller).
OVERLAPS_FILE = "overlaps.parquet"
OVERLAP_KEY_COLUMNS = ("layer", "head", "step")
OVERLAP_COLUMNS = ("layer", "head", "prev_step", "step", "overlap_u", "overlap_v")
OVERLAP_COLUMN_DOCS: dict[str, str] = {
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "prev_step": "the earlier checkpoint t (int64)",
    "step": "the next checkpoint with statistics after prev_step, t+1 (int64)",
    "overlap_u": "K x K row-major, entry a*K+b = |<u_a(t), u_b(t+1)>| for the left singular vectors of W_QK (float32)",
    "overlap_v": "the same for the right singular vectors v (float32)",
}
assert tuple(OVERLAP_COLUMN_DOCS) == OVERLAP_COLUMNS


def hist_z_centers() -> np.ndarray:
    """Centres of the 200 interior bins of the standardized histogram (tails excluded)."""
    return 0.5 * (HIST_Z_EDGES[1:] + HIST_Z_EDGES[:-1])
