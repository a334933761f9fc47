"""The statistics store's format: schema version, ``meta.json``, `TableSpec`, and the per-head table every store has.

A store directory holds ``meta.json`` (`META_FILE`), ``heads.parquet`` (`HEADS`: the per-head statistics, which
are no lens) and the tables of the lenses it was computed with. Each table is one `TableSpec` (file name, Arrow
schema, row key and sort order, row-group layout, what each column means), declared once: `HEADS` here, every
other table in its lens's declaration (`analysis.store.lenses`), which assembles them all into
`analysis.store.lenses.TABLES`. Readers (`analysis.store.reader`), the writer (`precompute.store.writer`), the
dataset card (`precompute.store.publish`) and the README's store section (checked by ``tests/unit/test_store.py``) all
go through it. It imports neither torch nor streamlit, so the dashboard, the precompute job and anyone reading a
store with pandas agree on one description.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from headwatch.analysis.stats.definitions import ELEMENTWISE_STATS, SPECTRAL_STATS
from headwatch.analysis.stats.definitions import HIST_Z_BINS as HIST_Z_BINS
from headwatch.analysis.stats.definitions import HIST_Z_EDGES as HIST_Z_EDGES
from headwatch.analysis.stats.definitions import HIST_Z_HI as HIST_Z_HI
from headwatch.analysis.stats.definitions import HIST_Z_LO as HIST_Z_LO

# Bumped whenever a reader of the previous version would misread a new store.
# 1: the first stores (heads.parquet without the null-model columns in the earliest ones).
# 2: checkpoints carry `shared_files` (weight files identical to another checkpoint's while the
#    whole differs); heads.parquet always has the null-model columns. `analysis.store.older_versions`
#    reads version 1 as version 2.
# 3: heads.parquet may hold "ov" rows beside "qk" and has the circuit columns (`CIRCUIT_COLUMNS`);
#    overlaps.parquet has a `matrix` column and the pair's `rel_change`. `analysis.store.older_versions`
#    reads versions 1 and 2 as 3 (the circuit columns and `rel_change` NaN until a rerun).
SCHEMA_VERSION = 3

META_FILE = "meta.json"

# Fixed standardized-histogram edges, shared by every head, step and model, are defined with the statistics
# (`analysis.stats.definitions`: z in [-10, 10], bin width 0.1, plus an underflow and an overflow bin, so
# `hist_z` has 202 probabilities) and re-exported here: HIST_Z_LO, HIST_Z_HI, HIST_Z_BINS, HIST_Z_EDGES.

# Which product a row describes: W_QK = W_Q^T W_K per query head, W_OV = W_O[:, h] W_V,h.
MATRICES = ("qk", "ov")

# Row key of heads.parquet, in sort order.
KEY_COLUMNS = ("step", "layer", "head", "matrix")

# Scalar statistics (float64 columns), in the order written. Definitions: docs/design-notes.md section 3.
ELEMENTWISE_COLUMNS = ELEMENTWISE_STATS  # the statistics' own names (`analysis.stats.definitions`)
SPECTRAL_COLUMNS = SPECTRAL_STATS
SCALAR_COLUMNS = ELEMENTWISE_COLUMNS + SPECTRAL_COLUMNS

# List columns (float32 lists): the standardized histogram and the singular values.
LIST_COLUMNS = ("hist_z", "sv")

# Departure from the random-matrix null model (analysis/rmt/nullmodel.py), float64. Stores of
# schema version 1 may lack them; `analysis.store.older_versions` derives them from `sv`.
NULL_COLUMNS = (
    "kl_null",
    "stable_rank_over_null",
    "spectral_entropy_over_null",
    "participation_ratio_over_null",
)

# Symmetry and eigenvalue signs of each head's circuit, from d_head x d_head cores
# (analysis/stats/circuits.py), float64. Stores before schema version 3 lack them (NaN when read).
CIRCUIT_COLUMNS = ("sym_frac", "eig_positivity")

# The columns every heads.parquet has (version 1 included).
HEADS_COLUMNS = KEY_COLUMNS + SCALAR_COLUMNS + LIST_COLUMNS

# One-line meaning of every column, used in the README and the dataset card.
COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "matrix": 'which product the row describes: "qk" is W_QK = W_Q^T W_K, "ov" is W_OV = W_O[:, h] W_V,h '
    "(W_V,h the value rows of head h, W_O[:, h] the output projection's d_head input columns that read it)",
    "mean": "mean of the d_model^2 entries",
    "std": "population standard deviation sigma of the entries",
    "skew": "skewness E[(w-mu)^3]/sigma^3 (NaN for a constant matrix)",
    "kurtosis": "excess kurtosis E[(w-mu)^4]/sigma^4 - 3 (NaN for a constant matrix)",
    "min": "smallest entry",
    "max": "largest entry",
    "kl_gauss": "D_KL(P || N(mu, sigma)) in nats over the hist_z bins, tails included",
    "hist_z": "probabilities of z = (w-mu)/sigma over hist_edges, underflow first, overflow last",
    "sv": "the d_head singular values s_k of the row's matrix (W_QK or W_OV), descending, never padded",
    "stable_rank": "sum(lambda) / lambda_max with lambda_k = s_k^2",
    "spectral_entropy": "-sum p_k ln p_k with p_k = lambda_k / sum(lambda), in nats",
    "participation_ratio": "(sum lambda)^2 / sum(lambda^2)",
    "condition_number": "s_max / s_min over the d_head values; inf when rank-deficient",
    "frob_norm": "Frobenius norm ||W||_F of the row's matrix = sqrt(sum lambda) = sqrt(sum of squared entries)",
    "spectral_norm": "largest singular value s_max",
    "kl_null": "D_KL(P(lambda) || free-product Marchenko-Pastur law) at matched scale, on 8 null-quantile bins",
    "stable_rank_over_null": "stable_rank / its expectation for a Gaussian head of the same shape",
    "spectral_entropy_over_null": "spectral_entropy / its expectation for a Gaussian head of the same shape",
    "participation_ratio_over_null": "participation_ratio / its expectation for a Gaussian head of the same shape",
    "sym_frac": "symmetric fraction ||(W+W^T)/2||_F^2 / ||W||_F^2 in [0, 1] = (1 + tr(M M)/||W||_F^2)/2 from the "
    "d_head x d_head core M = B^T A of W = A B^T (1: symmetric, 0: antisymmetric, about 1/2: random); "
    "NaN in stores made before schema version 3",
    "eig_positivity": "sum(Re mu_i) / sum(|mu_i|) over the non-zero eigenvalues mu_i of W (those of M), in [-1, 1]: "
    "for ov a copying score, for qk a preference for tokens like the query; NaN before schema version 3",
}
assert set(COLUMN_DOCS) == set(HEADS_COLUMNS + NULL_COLUMNS + CIRCUIT_COLUMNS)

# Rows per row group of heads.parquet: readers decode list columns one row group at a time, and
# one row group of the two list columns (16,384 x 330 float32) is about 20 MB in memory.
HEADS_ROW_GROUP_ROWS = 16384


def schema_of(types: dict[str, pa.DataType]) -> pa.Schema:
    """An Arrow schema of the columns ``types`` (name -> type), in order."""
    return pa.schema([pa.field(name, t) for name, t in types.items()])


def heads_arrow_schema(*, null_columns: bool = True, circuit_columns: bool = True) -> pa.Schema:
    """The pyarrow schema of ``heads.parquet`` (version 1 stores may lack the null-model columns,
    versions 1 and 2 the circuit columns)."""
    types = {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "matrix": pa.string()}
    types |= {c: pa.float64() for c in SCALAR_COLUMNS}
    types |= {c: pa.list_(pa.float32()) for c in LIST_COLUMNS}
    if null_columns:
        types |= {c: pa.float64() for c in NULL_COLUMNS}
    if circuit_columns:
        types |= {c: pa.float64() for c in CIRCUIT_COLUMNS}
    return schema_of(types)


@dataclass(frozen=True)
class TableSpec:
    """One Parquet table of a store.

    Attributes:
        name: its key in `analysis.store.lenses.TABLES` (``heads``).
        file: its file name in the store directory.
        row: what one row is, for documentation (``one row per (step, layer, head, matrix)``).
        about: one paragraph on what the table is for.
        schema: its Arrow schema.
        docs: column -> one-line meaning (every column of ``schema``).
        sort: the row key, in sort order.
        required: every store with statistics has it (the others are optional).
        row_group_rows: rows per Parquet row group given (n_layers, n_heads, number of steps with
            rows), or None for pyarrow's default.
        unit: the key columns whose values a run computes and replaces together (``("step",)``; the refined
            LLC's ``("step", "data")``: one checkpoint under one distribution).
        pick: for a table keyed by a string column besides step, layer and head, the values of those columns
            `analysis.store.reader.Store.dense` takes when its ``at`` does not name them, given the table
            (the refined LLC's: the store's default distribution).
        some_steps: its rows are at a chosen subset of the steps its lens's other tables have rows at
            (head_contexts.parquet: the tokens in context at the context steps), not at every one of them.
    """

    name: str
    file: str
    row: str
    about: str
    schema: pa.Schema
    docs: dict[str, str]
    sort: tuple[str, ...]
    required: bool = False
    row_group_rows: Callable[[int, int, int], int | None] = lambda n_layers, n_heads, n_steps: None
    unit: tuple[str, ...] = ("step",)
    pick: Callable[[pa.Table], dict[str, str]] | None = None
    some_steps: bool = False

    def __post_init__(self) -> None:
        assert set(self.docs) == set(self.schema.names), (self.name, set(self.docs) ^ set(self.schema.names))
        assert self.unit == ("step",) or set(self.unit) <= set(self.sort), (self.name, self.unit)

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def sorted(self, table: pa.Table) -> pa.Table:
        """Rows in the table's canonical order."""
        return table.sort_by([(c, "ascending") for c in self.sort])


HEADS = TableSpec(
    name="heads",
    file="heads.parquet",
    row="one row per (step, layer, head, matrix)",
    about="The statistics of every head at every checkpoint with statistics: element-wise, spectral, "
    "null-model departures, and the standardized histogram and singular values as list columns.",
    schema=heads_arrow_schema(),
    docs={c: COLUMN_DOCS[c] for c in heads_arrow_schema().names},
    sort=KEY_COLUMNS,
    required=True,
    row_group_rows=lambda n_layers, n_heads, n_steps: HEADS_ROW_GROUP_ROWS,
)
