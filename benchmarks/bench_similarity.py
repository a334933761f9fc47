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

import argparse
import io
import os
import platform
import time

import pyarrow.parquet as pq
import torch

from headwatch.analysis.weights.similarity import layer_ultrametricity, random_baseline, similarity
from headwatch.analysis.weights.ultrametric import TOLERANCE
from headwatch.precompute.lenses.similarity import similarity_rows, ultrametricity_rows

PYTHIA_1_4B = {"n_layers": 24, "n_heads": 16, "d_head": 128, "d_model": 2048}


def parquet_bytes(table) -> int:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.tell()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtypes", default="float64")
    p.add_argument("--layers", type=int, default=PYTHIA_1_4B["n_layers"])
    args = p.parse_args()
    shape = dict(PYTHIA_1_4B, n_layers=args.layers)
    n_layers, n_heads, d_head, d_model = shape["n_layers"], shape["n_heads"], shape["d_head"], shape["d_model"]
    heads = n_layers * n_heads
    pairs = heads * (heads - 1) // 2
    gen = torch.Generator().manual_seed(0)
    # as a checkpoint stores them (fp16), extracted to float32 (`analysis.extract`)
    w = [(0.02 * torch.randn((n_layers, n_heads, d_head, d_model), generator=gen)).half().float() for _ in range(4)]
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load average {os.getloadavg()[0]:.1f}; {n_layers} layers x {n_heads} heads, d_head {d_head}, d_model {d_model}: "
        f"{pairs:,} pairs x 2 products; {4 * d_head**2 * d_model * pairs * 2 / 1e12:.2f} Tflop in the pair Gram products"
    )
    print("| what | dtype | seconds | rows | bytes (zstd) |")
    print("| --- | --- | ---: | ---: | ---: |")
    values = None
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        t0 = time.perf_counter()
        values = similarity((w[0], w[1]), (w[2], w[3]), dtype=dtype, device=args.device).numpy()
        seconds = time.perf_counter() - t0
        table = similarity_rows(0, values)
        print(f"| every pair | {name} | {seconds:.1f} | {table.num_rows:,} | {parquet_bytes(table):,} |", flush=True)
    assert values is not None
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
