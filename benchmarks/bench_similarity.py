"""Benchmark: the head similarity of one Pythia-1.4B-shaped checkpoint (similarity.parquet, ultrametricity.parquet).

Measures, on this machine, for random per-head factors of Pythia-1.4B's shape (24 layers x 16
heads, d_head 128, d_model 2048; 384 heads, 73,536 unordered pairs, W_QK and W_OV each):
  (a) `analysis.weights.similarity.similarity` in the dtype the lens uses (float64, the store's
      ``spectrum_dtype``) and, with ``--dtypes float64,float32``, float32, wall seconds;
  (b) the per-layer ultrametricity (`analysis.weights.similarity.layer_ultrametricity`), its seconds;
  (c) the rows both tables get and the bytes of one checkpoint's files (zstd, as the store writes them);
  (d) the random baseline of the shape (`analysis.weights.similarity.random_baseline`, once per store), its seconds.
Prints Markdown rows for docs/benchmarks.md.

Usage: python -m benchmarks.bench_similarity [--device cpu|cuda] [--dtypes float64] [--layers N]
(``--layers`` fewer than 24 for a quick look; the figure recorded is the full shape's)
"""

from __future__ import annotations

import time

from benchmarks.common import every_pair, factor_benchmark, parquet_bytes, torch_machine
from headwatch.analysis.weights.similarity import layer_ultrametricity, random_baseline, similarity
from headwatch.analysis.weights.ultrametric import TOLERANCE
from headwatch.precompute.lenses.similarity import similarity_rows, ultrametricity_rows


def main() -> None:
    args, shape, w = factor_benchmark(__doc__, dtypes="float64")
    n_layers, n_heads, d_head, d_model = shape["n_layers"], shape["n_heads"], shape["d_head"], shape["d_model"]
    heads = n_layers * n_heads
    pairs = heads * (heads - 1) // 2
    print(
        f"# {torch_machine()}; {n_layers} layers x {n_heads} heads, d_head {d_head}, d_model {d_model}: "
        f"{pairs:,} pairs x 2 products; {4 * d_head**2 * d_model * pairs * 2 / 1e12:.2f} Tflop in the pair Gram products"
    )
    print("| what | dtype | seconds | rows | bytes (zstd) |")
    print("| --- | --- | ---: | ---: | ---: |")
    values = every_pair(
        args.dtypes,
        lambda dtype: similarity((w[0], w[1]), (w[2], w[3]), dtype=dtype, device=args.device).numpy(),
        lambda values: similarity_rows(0, values),
    )
    t0 = time.perf_counter()
    layer_ultrametricity(values, TOLERANCE)
    seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    baseline = random_baseline(n_heads, d_head, d_model, device=args.device)
    baseline_seconds = time.perf_counter() - t0
    table = ultrametricity_rows(0, values, TOLERANCE, baseline)
    print(
        f"| ultrametricity, every layer and distance | float64 | {seconds:.2f} | {table.num_rows:,} | {parquet_bytes(table):,} |"
    )
    shares = ", ".join(f"{k} {v:.3f}" for k, v in baseline["share"].items() if v is not None)
    print(f"| random baseline (share: {shares}) | float64 | {baseline_seconds:.1f} | - | - |")


if __name__ == "__main__":
    main()
