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

import argparse
import io
import os
import platform
import time

import pyarrow.parquet as pq
import torch

from headwatch.analysis.weights.composition import composition_scores, random_baseline, strongest_sources
from headwatch.precompute.lenses.composition import composition_rows

PYTHIA_1_4B = {"n_layers": 24, "n_heads": 16, "d_head": 128, "d_model": 2048}


def parquet_bytes(table) -> int:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.tell()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--layers", type=int, default=PYTHIA_1_4B["n_layers"])
    args = p.parse_args()
    shape = dict(PYTHIA_1_4B, n_layers=args.layers)
    n_layers, n_heads, d_head, d_model = shape["n_layers"], shape["n_heads"], shape["d_head"], shape["d_model"]
    pairs = n_heads**2 * n_layers * (n_layers - 1) // 2
    gen = torch.Generator().manual_seed(0)
    # as a checkpoint stores them (fp16), extracted to float32 (`analysis.extract`)
    w = [(0.02 * torch.randn((n_layers, n_heads, d_head, d_model), generator=gen)).half().float() for _ in range(4)]
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load average {os.getloadavg()[0]:.1f}; {n_layers} layers x {n_heads} heads, d_head {d_head}, d_model {d_model}: "
        f"{pairs:,} pairs x 3; {2 * d_head**2 * d_model * pairs * 3 / 1e12:.2f} Tflop in the pair products"
    )
    print("| what | dtype | seconds | rows | composition.parquet bytes |")
    print("| --- | --- | ---: | ---: | ---: |")
    scores = None
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        t0 = time.perf_counter()
        scores = composition_scores((w[0], w[1]), (w[2], w[3]), dtype=dtype, device=args.device)
        seconds = time.perf_counter() - t0
        table = composition_rows(0, scores)
        print(f"| every pair | {name} | {seconds:.1f} | {table.num_rows:,} | {parquet_bytes(table):,} |", flush=True)
    assert scores is not None
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
