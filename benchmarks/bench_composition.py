"""Benchmark: the composition scores of one Pythia-1.4B-shaped checkpoint (composition.parquet).

Measures, on this machine, for random per-head factors of Pythia-1.4B's shape (24 layers x 16
heads, d_head 128, d_model 2048; 70,656 ordered pairs of heads in different layers, times
three kinds):
  (a) `analysis.weights.composition.composition_scores` in the dtype the lens uses (float64, the
      store's ``spectrum_dtype``) and, for comparison, float32, wall seconds;
  (b) the rows it writes: every pair, and with ``--composition-top 8``; the bytes of one
      checkpoint's ``composition.parquet`` (zstd, as the store writes it) for each;
  (c) the random baseline of the shape (`analysis.weights.composition.random_baseline`), its seconds.
Prints Markdown rows for docs/benchmarks.md.

Usage: python -m benchmarks.bench_composition [--device cpu|cuda] [--dtypes float64,float32] [--layers N]
(``--layers`` fewer than 24 for a quick look; the figure recorded is the full shape's)
"""

from __future__ import annotations

import time

from benchmarks.common import every_pair, factor_benchmark, parquet_bytes, torch_machine
from headwatch.analysis.weights.composition import composition_scores, random_baseline, strongest_sources
from headwatch.precompute.lenses.composition import composition_rows


def main() -> None:
    args, shape, w = factor_benchmark(__doc__, dtypes="float64,float32")
    n_layers, n_heads, d_head, d_model = shape["n_layers"], shape["n_heads"], shape["d_head"], shape["d_model"]
    pairs = n_heads**2 * n_layers * (n_layers - 1) // 2
    print(
        f"# {torch_machine()}; {n_layers} layers x {n_heads} heads, d_head {d_head}, d_model {d_model}: "
        f"{pairs:,} pairs x 3; {2 * d_head**2 * d_model * pairs * 3 / 1e12:.2f} Tflop in the pair products"
    )
    print("| what | dtype | seconds | rows | composition.parquet bytes |")
    print("| --- | --- | ---: | ---: | ---: |")
    scores = every_pair(
        args.dtypes,
        lambda dtype: composition_scores((w[0], w[1]), (w[2], w[3]), dtype=dtype, device=args.device),
        lambda scores: composition_rows(0, scores),
    )
    t0 = time.perf_counter()
    keep = strongest_sources(scores, 8)
    table = composition_rows(0, scores, keep)
    seconds = time.perf_counter() - t0
    print(f"| --composition-top 8 (selection only) | - | {seconds:.2f} | {table.num_rows:,} | {parquet_bytes(table):,} |")
    t0 = time.perf_counter()
    baseline = random_baseline(d_head, d_model, device=args.device)
    seconds = time.perf_counter() - t0
    print(f"| random baseline ({', '.join(f'{k} {v:.5f}' for k, v in baseline.items())}) | float64 | {seconds:.1f} | - | - |")


if __name__ == "__main__":
    main()
