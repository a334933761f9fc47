"""The recorded benchmark figures `headwatch plan` estimates run time and store size from.

Every figure was measured on the 2-core development machine (AMD EPYC, torch 2.13.0 CPU,
2 threads) and is recorded in docs/benchmarks.md; each constant cites its
table. `headwatch.plan` scales them to the model planned for and prints which it used.
"""

from __future__ import annotations

# ------------------------------------------------------------------ the shapes measured at

# Pythia-1.4B: 24 layers x 16 heads, d_model 2048 (docs/benchmarks.md "Statistics pipeline, one Pythia-1.4B-shaped checkpoint")
PYTHIA_1_4B = {"n_layers": 24, "n_heads": 16, "d_model": 2048, "d_head": 128}
# Pythia-160M-shaped GPT-NeoX with random weights: 162,322,944 parameters
# (docs/benchmarks.md "Performance: the forward-pass lens" and "Performance: the refined LLC")
PYTHIA_160M_PARAMETERS = 162_322_944

# ------------------------------------------------------------------ seconds per checkpoint

# qk: whole pipeline per checkpoint (hash + read + extract + statistics + 8 singular vectors + commit),
# best of 2, machine idle; docs/benchmarks.md "Statistics pipeline, one Pythia-1.4B-shaped checkpoint", row (a).
QK_SECONDS_1_4B = 10.62
# ov: "qk and ov each cost one set of heads.parquet rows per checkpoint and about the same time"
# (docs/precompute.md, --matrices; 154 checkpoints: about 27 min of qk, about 55 with ov): the qk figure again.
OV_SECONDS_1_4B = QK_SECONDS_1_4B
# layers: all 96 block matrices of a checkpoint, wall, machine idle;
# docs/benchmarks.md "Whole-layer matrices, one Pythia-1.4B-shaped checkpoint", bold row.
LAYERS_SECONDS_1_4B = 88.6
# the forward-pass lens (--lenses attention), wall, first run (machine shared, load 11 to 18);
# docs/benchmarks.md "Performance: the forward-pass lens, seconds per checkpoint", Pythia-160M-shaped row.
FORWARD_SECONDS_160M = 113.6
# the refined LLC (--lenses llc): implied seconds per estimated checkpoint (every head plus the whole
# model); docs/benchmarks.md "Performance: the refined LLC, seconds per estimate", Pythia-160M-shaped row.
LLC_SECONDS_PER_CHECKPOINT_160M = 5582.0
# checkpoints the LLC estimates by default: "about 8, log-spaced" (python -m precompute --help, --llc-steps)
LLC_DEFAULT_CHECKPOINTS = 8

# composition (--lenses composition): every cross-layer pair of a Pythia-1.4B-shaped checkpoint's heads, float64,
# wall, machine shared; docs/benchmarks.md "Composition scores, one Pythia-1.4B-shaped checkpoint", bold row (run 2).
COMPOSITION_SECONDS_1_4B = 532.6
# head similarity (--lenses similarity): every unordered pair of a Pythia-1.4B-shaped checkpoint's 384 heads, W_QK and
# W_OV, float64, wall, machine shared; docs/benchmarks.md "Head similarity, one Pythia-1.4B-shaped checkpoint".
SIMILARITY_SECONDS_1_4B = 873.3

# Seconds per checkpoint of each lens (`precompute.registry.Lens.cost_scale` says what the figure
# scales with: "heads", "layers", "head_pairs" and "all_head_pairs" from Pythia-1.4B, "parameters" from the
# Pythia-160M shape). A lens missing here has no recorded figure; `headwatch plan` says so.
SECONDS_PER_CHECKPOINT: dict[str, tuple[str, float]] = {
    "layers": ("LAYERS_SECONDS_1_4B", LAYERS_SECONDS_1_4B),
    "attention": ("FORWARD_SECONDS_160M", FORWARD_SECONDS_160M),
    "llc": ("LLC_SECONDS_PER_CHECKPOINT_160M", LLC_SECONDS_PER_CHECKPOINT_160M),
    "composition": ("COMPOSITION_SECONDS_1_4B", COMPOSITION_SECONDS_1_4B),
    "similarity": ("SIMILARITY_SECONDS_1_4B", SIMILARITY_SECONDS_1_4B),
}

# ------------------------------------------------------------------ bytes in a store

# Measured on the shipped store data/shakespeare-pythia-6x8 (6 x 8 heads, d_head 32, 43 checkpoints,
# qk and ov): heads.parquet 1,934,124 B / (43 x 48 x 2) rows; overlaps.parquet 2,933,596 B /
# (42 pairs x 48 x 2) head-matrices, K = 8; layers.parquet 1,815,782 B / (43 x 6) layers.
HEADS_BYTES_PER_ROW = 468.6
OVERLAPS_BYTES_PER_HEAD_PAIR = 727.6
LAYERS_BYTES_PER_LAYER = 7038.0
# composition.parquet: one Pythia-1.4B-shaped checkpoint's 70,656 rows (every pair) in 963,766 B (zstd);
# docs/benchmarks.md "Composition scores, one Pythia-1.4B-shaped checkpoint".
COMPOSITION_BYTES_PER_PAIR = 13.64
# similarity.parquet and ultrametricity.parquet: one Pythia-1.4B-shaped checkpoint's 73,536 pairs in
# 2,243,497 B plus 144 ultrametricity rows in 3,189 B (zstd); docs/benchmarks.md "Head similarity".
SIMILARITY_BYTES_PER_PAIR = 30.55
