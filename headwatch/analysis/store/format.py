"""The statistics store's format: schema version, file names, columns, Arrow schemas and the table registry.

This module is the single definition of what a store directory holds. Every
table is one `TableSpec` in `TABLES` (file name, Arrow schema, row key and sort
order, row-group layout, what each column means); readers (`analysis.store.reader`),
the writer (`precompute.store.writer`), the dataset card (`precompute.publish`)
and the README's store section (checked by ``tests/unit/test_store.py``) all go
through it. A later table is one more entry here. It imports neither torch nor
streamlit, so the dashboard, the precompute job and anyone reading a store with
pandas agree on one description.
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

# overlaps.parquet: how the leading singular directions of each head move between
# consecutive checkpoints with statistics (analysis/stats/crossings.py uses them to tell a
# level crossing from a level repulsion), and how far the whole matrix moved.
# K = meta.json ``overlaps.k`` (8, or d_head if smaller).
OVERLAP_KEY_COLUMNS = ("matrix", "layer", "head", "step")
OVERLAP_COLUMN_DOCS: dict[str, str] = {
    "matrix": 'which product, "qk" or "ov", as in heads.parquet (string; version 3)',
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "prev_step": "the earlier checkpoint t (int64)",
    "step": "the next checkpoint with statistics after prev_step, t+1 (int64)",
    "overlap_u": "K x K row-major, entry a*K+b = |<u_a(t), u_b(t+1)>| for the left singular vectors of the matrix (float32)",
    "overlap_v": "the same for the right singular vectors v (float32)",
    "rel_change": "relative change ||W(t+1) - W(t)||_F / ||W(t)||_F of the matrix, from the factors "
    "(analysis/stats/circuits.py; float64, absolute error about 1e-8; version 3)",
}
OVERLAP_COLUMNS = tuple(OVERLAP_COLUMN_DOCS)

# embeddings.parquet: the trajectory maps precompute embeds (precompute/lenses/embeddings.py).
EMBEDDING_COLUMN_DOCS: dict[str, str] = {
    "matrix": 'which per-head product\'s trajectories, "qk" or "ov" (string; version 3: older files are "qk")',
    "statistic": "the heads.parquet column whose per-head trajectories were embedded (string)",
    "normalisation": "`zscore` or `global`: how each trajectory was normalised before embedding (string)",
    "layer": "layer index, 0-based (int32)",
    "head": "head index within the layer, 0-based (int32)",
    "x": "map coordinate 1 (float64, UMAP units: only distances on the map mean anything)",
    "y": "map coordinate 2 (float64)",
    "neighbors": "list<int32>: layer-major indices (layer * n_heads + head) of the head's k nearest "
    "trajectories in normalised space, nearest first",
}

# layers.parquet: every whole-layer weight matrix (analysis/weights/layers.py, docs/design-notes.md section 7).
LAYER_KEY_COLUMNS = ("step", "layer", "role")
# Every role a block weight can have, in display order (a store's roles are a subset;
# each family's adapter, `families.family.Family.blocks`, says which of its tensors play each).
LAYER_ROLES: tuple[str, ...] = ("attn_qkv", "attn_q", "attn_k", "attn_v", "attn_out", "mlp_gate", "mlp_in", "mlp_out")
LAYER_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "role": "which weight of the block (string): attn_qkv (fused Q, K, V as stored: GPT-NeoX, GPT-2), "
    "attn_q / attn_k / attn_v (Llama-style), attn_out, mlp_gate (Llama-style), mlp_in, mlp_out",
    "rows": "rows of the weight as the checkpoint stores it (int32; GPT-2's Conv1D weights are (in, out))",
    "cols": "columns of the weight as stored (int32); m = min(rows, cols), n = max(rows, cols)",
    "mean": "mean of the rows x cols entries",
    "std": "population standard deviation s of the entries",
    "skew": "skewness E[(w-mu)^3]/s^3 (NaN for a constant matrix)",
    "kurtosis": "excess kurtosis E[(w-mu)^4]/s^4 - 3 (NaN for a constant matrix)",
    "min": "smallest entry",
    "max": "largest entry",
    "kl_gauss": "D_KL(P || N(mu, s)) in nats over the hist_z bins, tails included",
    "hist_z": "probabilities of z = (w-mu)/s over hist_edges, underflow first, overflow last (float32)",
    "sv": "all m singular values s_k of the weight, descending (float32; from the float64 Gram eigensolve)",
    "frob_norm": "Frobenius norm sqrt(sum s_k^2)",
    "spectral_norm": "largest singular value s_max",
    "stable_rank": "sum(s_k^2) / s_max^2",
    "mp_kl": "D_KL(P(x) || Marchenko-Pastur law of ratio m/n) in nats on its 8 quantile bins, "
    "x_k = s_k^2 / (n s^2) (the law of a random matrix of the same shape and entry variance)",
    "mp_spikes": "how many x_k lie above the law's upper edge (1 + sqrt(m/n))^2 (int32)",
    "mp_below": "fraction of the m values x_k below the law's lower edge (1 - sqrt(m/n))^2 (0 for square weights)",
    "alpha": "power-law exponent of the tail of the eigenvalues s_k^2 (weightwatcher's alpha: powerlaw package fit, "
    "x_min by Kolmogorov-Smirnov distance, continuous MLE); NaN with fewer than 4 distinct values",
    "alpha_xmin": "the x_min of that fit, in units of s_k^2 (the tail is s_k^2 >= alpha_xmin)",
    "alpha_ks": "Kolmogorov-Smirnov distance D between the tail and the fitted power law",
}
# Rows per row group of layers.parquet: a row of Pythia-12B holds 5,120 + 202 float32 (about 21 kB).
LAYERS_ROW_GROUP_ROWS = 1024

# Rows per row group of heads.parquet: readers decode list columns one row group at a time, and
# one row group of the two list columns (16,384 x 330 float32) is about 20 MB in memory.
HEADS_ROW_GROUP_ROWS = 16384


def _fields(types: dict[str, pa.DataType]) -> pa.Schema:
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
    return _fields(types)


OVERLAPS_SCHEMA = _fields(
    {
        "matrix": pa.string(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "prev_step": pa.int64(),
        "step": pa.int64(),
        "overlap_u": pa.list_(pa.float32()),
        "overlap_v": pa.list_(pa.float32()),
        "rel_change": pa.float64(),
    }
)
EMBEDDINGS_SCHEMA = _fields(
    {
        "matrix": pa.string(),
        "statistic": pa.string(),
        "normalisation": pa.string(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "x": pa.float64(),
        "y": pa.float64(),
        "neighbors": pa.list_(pa.int32()),
    }
)
assert tuple(OVERLAPS_SCHEMA.names) == OVERLAP_COLUMNS
assert tuple(EMBEDDINGS_SCHEMA.names) == tuple(EMBEDDING_COLUMN_DOCS)

LAYERS_SCHEMA = _fields(
    {
        "step": pa.int64(),
        "layer": pa.int32(),
        "role": pa.string(),
        "rows": pa.int32(),
        "cols": pa.int32(),
        **{c: pa.float64() for c in ELEMENTWISE_COLUMNS},
        "hist_z": pa.list_(pa.float32()),
        "sv": pa.list_(pa.float32()),
        "frob_norm": pa.float64(),
        "spectral_norm": pa.float64(),
        "stable_rank": pa.float64(),
        "mp_kl": pa.float64(),
        "mp_spikes": pa.int32(),
        "mp_below": pa.float64(),
        "alpha": pa.float64(),
        "alpha_xmin": pa.float64(),
        "alpha_ks": pa.float64(),
    }
)
assert tuple(LAYERS_SCHEMA.names) == tuple(LAYER_COLUMN_DOCS)


@dataclass(frozen=True)
class TableSpec:
    """One Parquet table of a store.

    Attributes:
        name: the registry key (``heads``).
        file: its file name in the store directory.
        row: what one row is, for documentation (``one row per (step, layer, head, matrix)``).
        about: one paragraph on what the table is for.
        schema: its Arrow schema.
        docs: column -> one-line meaning (every column of ``schema``).
        sort: the row key, in sort order.
        required: every store with statistics has it (the others are optional).
        row_group_rows: rows per Parquet row group given (n_layers, n_heads, number of steps with
            rows), or None for pyarrow's default.
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

    def __post_init__(self) -> None:
        assert set(self.docs) == set(self.schema.names), (self.name, set(self.docs) ^ set(self.schema.names))

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
OVERLAPS = TableSpec(
    name="overlaps",
    file="overlaps.parquet",
    row="one row per (matrix, layer, head, consecutive pair of checkpoints with statistics; also of training states, "
    "around a mixed checkpoint)",
    about="The K x K overlaps of each head's K leading singular vectors between consecutive checkpoints, "
    "which tell a level crossing (the vectors swap) from a level repulsion (they keep their identity), "
    "and the relative change of the head's matrix between the two. "
    "Sorted by (matrix, layer, head, step) and written one row group per (matrix, layer), so one head "
    "is read without decoding the others.",
    schema=OVERLAPS_SCHEMA,
    docs=OVERLAP_COLUMN_DOCS,
    sort=OVERLAP_KEY_COLUMNS,
    row_group_rows=lambda n_layers, n_heads, n_steps: max(1, n_heads * max(n_steps - 1, 1)),
)
EMBEDDINGS = TableSpec(
    name="embeddings",
    file="embeddings.parquet",
    row="one row per (matrix, statistic, normalisation, head)",
    about="Precomputed trajectory maps (UMAP of each head's statistic over training) and each head's "
    "nearest trajectories; how they were made is in `meta.json` `embeddings`.",
    schema=EMBEDDINGS_SCHEMA,
    docs=EMBEDDING_COLUMN_DOCS,
    sort=("matrix", "statistic", "normalisation", "layer", "head"),
)

LAYERS = TableSpec(
    name="layers",
    file="layers.parquet",
    row="one row per (step, layer, role)",
    about="Every 2-D weight of every block as the checkpoint stores it (attention QKV, output, MLP in, gate, out): "
    "element-wise statistics, all singular values, and their departure from the Marchenko-Pastur law of a "
    "random matrix of the same shape and entry variance. Optional: written by runs with `--matrices` "
    "including `layers` (the default).",
    schema=LAYERS_SCHEMA,
    docs=LAYER_COLUMN_DOCS,
    sort=LAYER_KEY_COLUMNS,
    row_group_rows=lambda n_layers, n_heads, n_steps: LAYERS_ROW_GROUP_ROWS,
)

# Forward-pass lenses (docs/design-notes.md section 8; `python -m headwatch.precompute --lenses attention`): what the
# heads do on a fixed evaluation set, per checkpoint with statistics. meta.json ``forward``
# (`analysis.store.meta.ForwardInfo`) says which sequences; ``analysis/attention/patterns.py`` holds the math.
ATTENTION_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "entropy": "attention entropy H_i = -sum_j a_ij log2 a_ij in bits, mean over query positions i and sequences "
    "(uniform causal attention: mean_i log2 i)",
    "entropy_std": "standard deviation of H_i over query positions and sequences (bits)",
    "span": "attention-weighted distance sum_j a_ij (i - j), mean over queries and sequences (uniform: mean_i (i-1)/2)",
    "sink": "attention on the first position a_i1, mean over queries (all i) and sequences",
    "prev_token": "attention on the previous position a_i,i-1, mean over queries i > 1 and sequences",
    "induction": "on R random tokens repeated twice, mean attention from position R+k to k+1 (the token after "
    "the first occurrence), k = 1..R-1",
}
ATTENTION_STATISTICS = tuple(ATTENTION_COLUMN_DOCS)[3:]  # the per-head forward statistics
LAYER_DIVERGENCE_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer_a": "first layer, 0-based (int32)",
    "layer_b": "second layer, 0-based (int32); every ordered pair, a == b included (0)",
    "jsd": "Jensen-Shannon divergence in bits (0..1) between the layers' mean attention distributions over "
    "relative offset d = i - j (mean over heads, queries and sequences)",
}
EVAL_LOSS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "loss": "mean next-token cross-entropy on the evaluation sequences, nats per token (float64)",
    "tokens": "predicted tokens it averages over: sequences x (T - 1) (int64)",
    "probe_copy_loss": "mean next-token cross-entropy on the second copy of the induction probe (R random tokens "
    "repeated twice): the predictions of positions R+1..2R-1 (0-based), which only copying from the first copy "
    "can make; nats per token (ln vocab: no copying). NaN in stores written before it was recorded (float64)",
}
ATTENTION_SCHEMA = _fields(
    {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32()} | {c: pa.float64() for c in ATTENTION_STATISTICS}
)
LAYER_DIVERGENCE_SCHEMA = _fields({"step": pa.int64(), "layer_a": pa.int32(), "layer_b": pa.int32(), "jsd": pa.float64()})
EVAL_LOSS_SCHEMA = _fields({"step": pa.int64(), "loss": pa.float64(), "tokens": pa.int64(), "probe_copy_loss": pa.float64()})

ATTENTION = TableSpec(
    name="attention",
    file="attention.parquet",
    row="one row per (step, layer, head)",
    about="Forward-pass statistics of every head on the store's evaluation sequences (meta.json `forward`): "
    "attention entropy and its spread, span, sink mass, previous-token score, and the induction score "
    "on repeated random tokens. Present when the store was computed with `--lenses attention`.",
    schema=ATTENTION_SCHEMA,
    docs=ATTENTION_COLUMN_DOCS,
    sort=("step", "layer", "head"),
)
LAYER_DIVERGENCE = TableSpec(
    name="layer_divergence",
    file="layer_divergence.parquet",
    row="one row per (step, layer_a, layer_b)",
    about="How differently the layers attend: the Jensen-Shannon divergence between two layers' mean "
    "attention over relative offset, on the evaluation sequences. Written with `attention`.",
    schema=LAYER_DIVERGENCE_SCHEMA,
    docs=LAYER_DIVERGENCE_COLUMN_DOCS,
    sort=("step", "layer_a", "layer_b"),
)
EVAL_LOSS = TableSpec(
    name="eval_loss",
    file="eval_loss.parquet",
    row="one row per step",
    about="The model's loss on the evaluation sequences at each checkpoint with statistics, the curve "
    "the dashboard overlays on its time axes, and its loss on the induction probe's second copy (the "
    "in-context copying signal that drops when induction heads form). Written with `attention`.",
    schema=EVAL_LOSS_SCHEMA,
    docs=EVAL_LOSS_COLUMN_DOCS,
    sort=("step",),
)
# The tables the attention lens writes, committed together with heads.parquet.
FORWARD_TABLES = (ATTENTION, LAYER_DIVERGENCE, EVAL_LOSS)

# Refined local learning coefficient (docs/design-notes.md section 9; `python -m headwatch.precompute --lenses llc`): devinterp's
# SGLD estimate n beta (E[L_n(w)] - L_n(w*)) restricted to one head's weights, and to the whole model.
# meta.json ``llc`` says with which sampler settings and on which sequences; precompute/lenses/llc.py computes it.
LLC_MODEL = -1  # layer and head of the whole-model row
LLC_WHOLE_MODEL = {"layer": LLC_MODEL, "head": LLC_MODEL}  # the row's key, for `analysis.store.reader.Store.dense`
LLC_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32); -1 on the whole-model row",
    "head": "query-head index within the layer, 0-based (int32); -1 on the whole-model row",
    "llc": "refined LLC n beta (mean SGLD loss - initial loss), averaged over chains: SGLD moves only the head's "
    "Q, K, V rows and output-projection columns (every parameter on the whole-model row)",
    "llc_std": "standard deviation of the per-chain estimates over the chains",
    "init_loss": "loss at the checkpoint's own weights on the sampler's batches, nats per token",
    "params": "number of parameters the sampler moved (int64)",
}
LLC_SCHEMA = _fields(
    {
        "step": pa.int64(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "llc": pa.float64(),
        "llc_std": pa.float64(),
        "init_loss": pa.float64(),
        "params": pa.int64(),
    }
)
LLC = TableSpec(
    name="llc",
    file="llc.parquet",
    row="one row per (step, layer, head), plus one whole-model row (layer = head = -1) per step",
    about="The weight-refined local learning coefficient of every head at a subset of checkpoints (about 8, "
    "log-spaced, unless chosen), and the whole model's LLC beside it, estimated with devinterp's SGLD on the "
    "store's evaluation sequences under the sampler settings in meta.json `llc`. Present when the store was "
    "computed with `--lenses llc`.",
    schema=LLC_SCHEMA,
    docs=LLC_COLUMN_DOCS,
    sort=("step", "layer", "head"),
)

# Convergence diagnostics of every refined-LLC estimate (analysis/llc/diagnostics.py states the rule that
# flags an estimate from them), one row per chain, written with llc.parquet.
LLC_CHAINS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32); -1 on the whole-model rows",
    "head": "query-head index within the layer, 0-based (int32); -1 on the whole-model rows",
    "chain": "chain index, 0-based (int32)",
    "llc": "this chain's estimate n beta (mean sampled loss after the burn-in - initial loss)",
    "first_half": "mean sampled loss over the first half of the passes (blocks of sequences / batch size draws) after the "
    "burn-in, nats per token",
    "second_half": "mean sampled loss over the second half of the passes, nats per token",
    "slope": "least-squares slope of the pass means over the second half, nats per token per draw",
    "half_se": "standard error of second_half - first_half from the spread of the pass means within each half, nats per token",
    "trace": "the sampled loss of every SGLD step, burn-in included, nats per token (float32)",
}
LLC_CHAINS_SCHEMA = _fields(
    {
        "step": pa.int64(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "chain": pa.int32(),
        "llc": pa.float64(),
        "first_half": pa.float64(),
        "second_half": pa.float64(),
        "slope": pa.float64(),
        "half_se": pa.float64(),
        "trace": pa.list_(pa.float32()),
    }
)
LLC_CHAINS = TableSpec(
    name="llc_chains",
    file="llc_chains.parquet",
    row="one row per (step, layer, head, chain), the whole-model rows (layer = head = -1) included",
    about="The chains behind every estimate of llc.parquet: each chain's estimate, the mean sampled loss over the "
    "first and second half of its passes over the sampler's sequences, the slope over the second half and the "
    "whole loss trace. The flag "
    "of an estimate (converged, still rising, diverged) follows from them by the rule in "
    "analysis/llc/diagnostics.py. Written with llc.parquet.",
    schema=LLC_CHAINS_SCHEMA,
    docs=LLC_CHAINS_COLUMN_DOCS,
    sort=("step", "layer", "head", "chain"),
)

# Composition between heads (analysis/weights/composition.py; `python -m headwatch.precompute --lenses composition`): how much a
# head B in a later layer reads, through its queries, keys or values, what a head A in an earlier layer writes.
# meta.json ``composition`` holds the random baseline a score is compared with and which pairs were kept.
COMPOSITION_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer_a": "layer of the source head A, 0-based (int32)",
    "head_a": "query-head index of A within its layer, 0-based (int32)",
    "layer_b": "layer of the target head B, 0-based (int32); always > layer_a",
    "head_b": "query-head index of B within its layer, 0-based (int32)",
    "q": "Q-composition ||W_QK,B^T W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F), in [0, 1] (float32)",
    "k": "K-composition ||W_QK,B W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F), in [0, 1] (float32)",
    "v": "V-composition ||W_OV,B W_OV,A||_F / (||W_OV,B||_F ||W_OV,A||_F), in [0, 1] (float32)",
}
COMPOSITION_KINDS = ("q", "k", "v")
COMPOSITION_SCHEMA = _fields(
    {"step": pa.int64(), "layer_a": pa.int32(), "head_a": pa.int32(), "layer_b": pa.int32(), "head_b": pa.int32()}
    | {c: pa.float32() for c in COMPOSITION_KINDS}
)
COMPOSITION = TableSpec(
    name="composition",
    file="composition.parquet",
    row="one row per (step, layer_a, head_a, layer_b, head_b) with layer_a < layer_b",
    about="Q-, K- and V-composition scores (Elhage et al. 2021) of every ordered pair of heads in different "
    "layers, from the raw weights (LayerNorm not folded), at every checkpoint with statistics; with "
    "`--composition-top K` only the pairs whose source is among the K strongest of its target head for q, k or v. meta.json "
    "`composition` gives the score of random Gaussian heads of the same shapes (a score / it reads as "
    "'x times random'). Present when the store was computed with `--lenses composition`.",
    schema=COMPOSITION_SCHEMA,
    docs=COMPOSITION_COLUMN_DOCS,
    sort=("step", "layer_a", "head_a", "layer_b", "head_b"),
)

# Head types (analysis/attention/head_types.py; the `types` lens, made from attention.parquet after a run or on an existing
# store): which heads are previous-token, induction or sink heads at each checkpoint, each decided by its forward
# score against the value under uniform causal attention (the null) and a threshold; meta.json ``types`` records
# the nulls, the thresholds and the hysteresis rule.
HEAD_TYPES = ("previous_token", "induction", "sink")  # the types, in display order
HEAD_TYPE_SCORES = {"previous_token": "prev_token", "induction": "induction", "sink": "sink"}  # attention.parquet column
HEAD_TYPES_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "type": "head type: previous_token, induction or sink (string)",
    "score": "the type's forward score (attention.parquet prev_token, induction or sink) at this checkpoint",
    "null": "the score under uniform causal attention on the same sequences (docs/head-types.md derives it)",
    "ratio": "score / null: how many times uniform attention",
    "above": "score >= the type's threshold at this checkpoint alone (bool)",
    "holds": "the head holds the type at this checkpoint under the hysteresis rule (bool)",
}
HEAD_TYPES_SCHEMA = _fields(
    {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "type": pa.string()}
    | {"score": pa.float64(), "null": pa.float64(), "ratio": pa.float64(), "above": pa.bool_(), "holds": pa.bool_()}
)
HEAD_TYPES_TABLE = TableSpec(
    name="head_types",
    file="head_types.parquet",
    row="one row per (step, layer, head, type) at every checkpoint with forward statistics",
    about="Which type each head holds at each checkpoint: its forward score against the uniform-attention null "
    "and the type's threshold (meta.json `types`), with the hysteresis rule that keeps noise from making a head "
    "flicker. Made from attention.parquet by the `types` lens.",
    schema=HEAD_TYPES_SCHEMA,
    docs=HEAD_TYPES_COLUMN_DOCS,
    sort=("step", "layer", "head", "type"),
)
HEAD_EMERGENCE_COLUMN_DOCS: dict[str, str] = {
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "type": "head type: previous_token, induction or sink (string)",
    "emergence_step": "first checkpoint from which the head holds the type for the rest of training "
    "(null: it does not hold it at the last checkpoint) (int64)",
    "first_step": "first checkpoint at which the score reaches the threshold at all (null: never) (int64)",
    "peak_score": "largest score over training",
    "peak_step": "checkpoint of the largest score (int64)",
    "final_score": "score at the last checkpoint with forward statistics",
}
HEAD_EMERGENCE_SCHEMA = _fields(
    {"layer": pa.int32(), "head": pa.int32(), "type": pa.string(), "emergence_step": pa.int64(), "first_step": pa.int64()}
    | {"peak_score": pa.float64(), "peak_step": pa.int64(), "final_score": pa.float64()}
)
HEAD_EMERGENCE = TableSpec(
    name="head_emergence",
    file="head_emergence.parquet",
    row="one row per (layer, head, type)",
    about="When each head became each type: the emergence step (the first checkpoint from which it holds the type "
    "to the end of training, under the hysteresis rule of meta.json `types`), the first crossing of the threshold, "
    "and the peak and final scores. Written with head_types.parquet.",
    schema=HEAD_EMERGENCE_SCHEMA,
    docs=HEAD_EMERGENCE_COLUMN_DOCS,
    sort=("layer", "head", "type"),
)

# Developmental stages (analysis/stages/curve.py states the rule for one curve, analysis/stages/run.py how the curves' boundaries
# merge into the run's and are named, docs/stages.md explains it; the `stages` lens, made from llc.parquet,
# eval_loss.parquet and the head types after a run or on an existing store): each curve cut where its trend or its
# rate changes by more than k standard errors, and the run cut at the merged boundaries of all of them. meta.json
# ``stages`` records the rule, its parameters, the noise levels it used and which basis the dashboard shades
# (``primary``).
STAGE_BASES = ("run", "llc", "loss", "copy_loss", "heads_previous_token", "heads_induction", "heads_sink")
STAGES_COLUMN_DOCS: dict[str, str] = {
    "basis": "which curve the stages were read from: run (the run's own, between the merged boundaries of every "
    "curve), llc (the whole-model LLC, llc.parquet), loss or copy_loss (eval_loss.parquet's loss and probe_copy_loss), "
    "heads_<type> (the number of heads holding the type, head_types.parquet) (string)",
    "stage": "0-based position of the stage among its basis's stages (int32)",
    "start_step": "checkpoint that begins the stage (int64; a boundary belongs to both stages it separates)",
    "end_step": "checkpoint that ends the stage (int64)",
    "trend": "llc and heads_<type>: rising, falling or flat; loss and copy_loss: drop, plateau or rise; run: the "
    "trend of the LLC (or, without it, the loss) over the stage (string)",
    "boundary": "what begins the stage: start of training; on a curve, the kind of boundary (LLC peak, LLC "
    "accelerates, LLC slows, loss drop begins, copy loss drop speeds up, ...); on run, what forms in the stage it "
    "opens (induction heads form (L1 H0, ...); no event coincides) (string)",
    "start_value": "the basis curve at start_step (LLC, loss or copy loss in nats per token, number of heads; run: "
    "the LLC's, or the loss's, interpolated on log10(1 + step))",
    "end_value": "the basis curve at end_step",
    "change": "fitted change of the basis curve across the stage (sum of its straight stretches in log10(1 + step)); "
    "run: end_value - start_value",
    "change_se": "standard error of change, from the chains' pooled spread (llc) or the curve's noise (the others); NaN for run",
    "loss_change": "eval loss at end_step minus at start_step, nats per token (NaN without eval_loss.parquet)",
    "support": "run: the curves' boundaries merged into the boundary that begins the stage, as kind (step); ... "
    "(empty for the first stage and for every other basis) (string)",
}
STAGES_SCHEMA = _fields(
    {"basis": pa.string(), "stage": pa.int32(), "start_step": pa.int64(), "end_step": pa.int64()}
    | {"trend": pa.string(), "boundary": pa.string()}
    | {c: pa.float64() for c in ("start_value", "end_value", "change", "change_se", "loss_change")}
    | {"support": pa.string()}
)
STAGES = TableSpec(
    name="stages",
    file="stages.parquet",
    row="one row per (basis, stage)",
    about="Developmental stages of the run. Each curve (the whole-model LLC, the loss, the probe's copy loss, the "
    "number of heads holding each type) is cut where its trend or its rate changes by more than k standard errors "
    "(a peak, a trough, a start or stop, an acceleration or a slowing); boundaries of several curves within a few "
    "checkpoints are one boundary of the run (basis run), supported by those curves and named after the heads that "
    "form in the stage it opens. Made from llc.parquet, eval_loss.parquet and the head types by the `stages` lens; "
    "the rule and its parameters are in meta.json `stages`.",
    schema=STAGES_SCHEMA,
    docs=STAGES_COLUMN_DOCS,
    sort=("basis", "stage"),
)

# Essential dynamics (analysis/stages/essential.py; `python -m headwatch.precompute --lenses essential`): per checkpoint,
# the model's next-token log-probabilities on a fixed sample (meta.json ``essential`` records it), and their trajectory
# in its leading principal components over the checkpoints, with its cusps.
ESSENTIAL_OUTPUTS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "logprobs": "the model's next-token log-probabilities (nats) on the sample of meta.json essential, in (sequence, "
    "position, token) order: sequences x positions x tokens values (list<float32>)",
}
ESSENTIAL_OUTPUTS = TableSpec(
    name="essential_outputs",
    file="essential_outputs.parquet",
    row="one row per step",
    about="The outputs the essential-dynamics lens reads: per checkpoint, the log-probabilities of a fixed subset of "
    "tokens at fixed positions of fixed sequences (the sample and how it was chosen are in meta.json `essential`).",
    schema=_fields({"step": pa.int64(), "logprobs": pa.list_(pa.float32())}),
    docs=ESSENTIAL_OUTPUTS_COLUMN_DOCS,
    sort=("step",),
)
ESSENTIAL_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "component": "0-based index of the principal component over checkpoints (int32)",
    "score": "the checkpoint's coordinate on the component: U[t, j] S[j] of the thin SVD of the centred outputs "
    "(nats; each component's sign makes its largest-magnitude score positive)",
    "explained": "fraction of the outputs' variance over checkpoints the component explains, S[j]^2 / sum(S^2) "
    "(the same in every row of the component)",
    "turn": "degrees the trajectory turns at the checkpoint, between x_t - x_(t-w) and x_(t+w) - x_t in the stored "
    "components (NaN within w checkpoints of either end; the same in every row of the step)",
    "cusp": "the checkpoint is a turning point: turn above 90 degrees, both displacements at least a quarter of the "
    "path's largest over w checkpoints, and the largest turn within w checkpoints (bool)",
}
ESSENTIAL = TableSpec(
    name="essential",
    file="essential.parquet",
    row="one row per (step, component)",
    about="Essential dynamics: the trajectory of the model's outputs on fixed inputs (essential_outputs.parquet) in "
    "its leading principal components over the checkpoints, the variance each explains, and the trajectory's cusps "
    "(turning points; the rule is in meta.json `essential`). Made again from essential_outputs.parquet by every run "
    "of the `essential` lens.",
    schema=_fields(
        {"step": pa.int64(), "component": pa.int32(), "score": pa.float64(), "explained": pa.float64()}
        | {"turn": pa.float64(), "cusp": pa.bool_()}
    ),
    docs=ESSENTIAL_COLUMN_DOCS,
    sort=("step", "component"),
)

# Head similarity that does not depend on the residual basis (analysis/weights/similarity.py; `python -m headwatch.precompute
# --lenses similarity`): for every unordered pair of heads, how alike their W_QK and their W_OV are as matrices
# and how close their column and row spaces are; per layer, how ultrametric (hierarchical) the heads' distances
# are (analysis/weights/ultrametric.py). meta.json ``similarity`` holds the random baselines and the tolerance.
SIMILARITY_STATS = ("qk_frob", "qk_col", "qk_row", "ov_frob", "ov_col", "ov_row")
SIMILARITY_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer_a": "layer of head a, 0-based (int32)",
    "head_a": "query-head index of a within its layer, 0-based (int32)",
    "layer_b": "layer of head b, 0-based (int32); (layer_a, head_a) < (layer_b, head_b) in layer-major order",
    "head_b": "query-head index of b within its layer, 0-based (int32)",
    "qk_frob": "<W_QK,a, W_QK,b>_F / (||W_QK,a||_F ||W_QK,b||_F), in [-1, 1] (float32)",
    "qk_col": "mean cos^2 of the principal angles between the column spaces of W_QK,a and W_QK,b "
    "(what the queries read), in [0, 1] (float32)",
    "qk_row": "mean cos^2 of the principal angles between the row spaces of W_QK,a and W_QK,b "
    "(what the keys read), in [0, 1] (float32)",
    "ov_frob": "<W_OV,a, W_OV,b>_F / (||W_OV,a||_F ||W_OV,b||_F), in [-1, 1] (float32)",
    "ov_col": "mean cos^2 of the principal angles between the column spaces of W_OV,a and W_OV,b "
    "(where the heads write), in [0, 1] (float32)",
    "ov_row": "mean cos^2 of the principal angles between the row spaces of W_OV,a and W_OV,b "
    "(what the values read), in [0, 1] (float32)",
}
SIMILARITY_SCHEMA = _fields(
    {"step": pa.int64(), "layer_a": pa.int32(), "head_a": pa.int32(), "layer_b": pa.int32(), "head_b": pa.int32()}
    | {c: pa.float32() for c in SIMILARITY_STATS}
)
SIMILARITY = TableSpec(
    name="similarity",
    file="similarity.parquet",
    row="one row per (step, layer_a, head_a, layer_b, head_b) with (layer_a, head_a) < (layer_b, head_b)",
    about="How alike every unordered pair of heads is (within a layer and across layers), in ways invariant under "
    "an orthogonal change of basis of the residual stream: the normalized Frobenius inner product of their W_QK "
    "and of their W_OV, and the mean cos^2 of the principal angles between their column and their row spaces; "
    "from the raw weights (LayerNorm not folded), at every checkpoint with statistics. meta.json `similarity` "
    "gives the values of random Gaussian heads of the same shapes. Present when the store was computed with "
    "`--lenses similarity`.",
    schema=SIMILARITY_SCHEMA,
    docs=SIMILARITY_COLUMN_DOCS,
    sort=("step", "layer_a", "head_a", "layer_b", "head_b"),
)
ULTRAMETRICITY_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "distance": "which similarity.parquet column the distance comes from: qk_frob, qk_col, qk_row, ov_frob, "
    "ov_col or ov_row (string); frob: sqrt(2 - 2 x), col and row: sqrt(1 - x)",
    "triangles": "triangles of distinct heads of the layer with three finite sides (int32)",
    "share": "share of those triangles, sides d1 <= d2 <= d3, with d3 - d2 <= tolerance * (d3 - d1) (float64)",
    "baseline": "share for random Gaussian heads of the same shapes (meta.json similarity) (float64)",
    "share_of_max": "share of the triangles with d3 - d2 <= tolerance * d3 (float64)",
    "baseline_of_max": "share_of_max for random Gaussian heads of the same shapes (float64)",
}
ULTRAMETRICITY_SCHEMA = _fields(
    {"step": pa.int64(), "layer": pa.int32(), "distance": pa.string(), "triangles": pa.int32()}
    | {c: pa.float64() for c in ("share", "baseline", "share_of_max", "baseline_of_max")}
)
ULTRAMETRICITY = TableSpec(
    name="ultrametricity",
    file="ultrametricity.parquet",
    row="one row per (step, layer, distance) at every checkpoint with similarity rows (layers of 3 heads or more)",
    about="How ultrametric (hierarchical) each layer's heads are under each similarity's distance: the share of "
    "triangles of heads whose two largest sides are equal within the tolerance of meta.json `similarity`, "
    "beside the same share for random heads of the same shapes. Written with similarity.parquet.",
    schema=ULTRAMETRICITY_SCHEMA,
    docs=ULTRAMETRICITY_COLUMN_DOCS,
    sort=("step", "layer", "distance"),
)

# Every table a store may hold, by name. A new table is one more entry.
TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        HEADS,
        OVERLAPS,
        EMBEDDINGS,
        LAYERS,
        *FORWARD_TABLES,
        LLC,
        LLC_CHAINS,
        COMPOSITION,
        HEAD_TYPES_TABLE,
        HEAD_EMERGENCE,
        STAGES,
        SIMILARITY,
        ULTRAMETRICITY,
        ESSENTIAL_OUTPUTS,
        ESSENTIAL,
    )
}
FILES: tuple[str, ...] = (META_FILE, *(spec.file for spec in TABLES.values()))
