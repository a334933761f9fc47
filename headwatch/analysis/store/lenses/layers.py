"""The layer matrices lens, declared: every 2-D weight of every block against its Marchenko-Pastur law (docs/design-
notes.md section 7).

Its tables, its cost figures, and the lens itself. analysis/weights/layers.py holds the maths;
`precompute.lenses.layers` computes it.
"""

from __future__ import annotations

import pyarrow as pa

from headwatch.analysis.store.format import ELEMENTWISE_COLUMNS, TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Seconds, StoreBytes

# ------------------------------------------------------------------ its tables

# layers.parquet: every whole-layer weight matrix (analysis/weights/layers.py, docs/design-notes.md section 7).
LAYER_KEY_COLUMNS = ("step", "layer", "role")
# Every role a block weight can have, in display order (a store's roles are a subset;
# `families.blocks` says which tensors of which family play each).
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

LAYERS_SCHEMA = schema_of(
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


# ------------------------------------------------------------------ the lens

LAYERS_LENS = Lens(
    name="layers",
    title="layer matrices",
    summary="every 2-D weight of every block (attention QKV, output, MLP in, gate, out) against its "
    "Marchenko-Pastur law, with weightwatcher's alpha",
    tables=(LAYERS,),
    asked_by="--matrices",
    needs=("tensors",),
    seconds=Seconds(
        "LAYERS_SECONDS_1_4B",
        88.6,
        "layers",
        'docs/benchmarks.md "The figures headwatch plan prices with", LAYERS_SECONDS_1_4B',
    ),
    store_bytes=StoreBytes(
        (LAYERS,),
        3536.7,
        "layers",
        "layer",
        'docs/benchmarks.md "The figures headwatch plan prices with", layers.parquet',
    ),
)
