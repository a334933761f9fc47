"""Benchmark: the whole-layer matrices of one checkpoint (layers.parquet), at Pythia-1.4B and -12B shapes.

Measures, on this machine:
  (a) all 96 block weights of a Pythia-1.4B-shaped checkpoint (24 layers x attn_qkv
      6144 x 2048, attn_out 2048 x 2048, mlp_in 8192 x 2048, mlp_out 2048 x 8192; random
      fp16, as checkpoints store them) through `layer_matrix_statistics`, per role;
  (b) one dense float32 ``svdvals`` of an mlp_in weight, what the Gram eigensolve replaces,
      and the largest difference between the two spectra (relative to s_max);
  (c) with ``--twelve-b``: the largest Pythia-12B weight (mlp_in, 20480 x 5120) alone in a
      fresh process, its time and the process's peak resident memory (VmHWM) above the
      memory of the weight itself.
Prints Markdown rows for the README.

Usage: python -m benchmarks.bench_layers [--device cpu|cuda] [--twelve-b] [--skip-dense]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from headwatch.analysis.weights.layers import gram_eigenvalues, layer_matrix_statistics

PYTHIA_1_4B = {"n_layers": 24, "d_model": 2048, "d_mlp": 8192}
PYTHIA_12B = {"n_layers": 36, "d_model": 5120, "d_mlp": 20480}


def roles(d_model: int, d_mlp: int) -> dict[str, tuple[int, int]]:
    return {
        "attn_qkv": (3 * d_model, d_model),
        "attn_out": (d_model, d_model),
        "mlp_in": (d_mlp, d_model),
        "mlp_out": (d_model, d_mlp),
    }


def vm_hwm_bytes() -> int:
    """Peak resident memory of this process so far (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def twelve_b(device: Literal["auto", "cpu", "cuda"]) -> None:
    rows, cols = roles(PYTHIA_12B["d_model"], PYTHIA_12B["d_mlp"])["mlp_in"]
    w = (torch.randn(rows, cols) * 0.02).half()
    base = vm_hwm_bytes()
    t0 = time.perf_counter()
    layer_matrix_statistics({"mlp_in": [w]}, device=device)
    dt = time.perf_counter() - t0
    if device == "cuda":
        print(f"cuda peak allocated: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    extra = vm_hwm_bytes() - base
    print(
        f"12b mlp_in {rows}x{cols}: {dt:.1f} s, peak resident memory above the fp16 weight "
        f"({w.numel() * 2 / 2**30:.2f} GiB): {extra / 2**30:.2f} GiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--twelve-b", action="store_true")
    ap.add_argument("--skip-dense", action="store_true")
    ap.add_argument(
        "--layers",
        type=int,
        default=PYTHIA_1_4B["n_layers"],
        help="layers per role to time (fewer on a loaded machine: the per-matrix time is extrapolated to 24)",
    )
    ap.add_argument("--only-12b", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only_12b:
        twelve_b(args.device)
        return
    print(
        f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    gen = torch.Generator().manual_seed(0)
    shapes = roles(PYTHIA_1_4B["d_model"], PYTHIA_1_4B["d_mlp"])
    blocks = {
        role: [(torch.randn(r, c, generator=gen) * 0.02).half() for _ in range(args.layers)] for role, (r, c) in shapes.items()
    }
    scale = PYTHIA_1_4B["n_layers"] / args.layers
    held = sum(t.numel() * t.element_size() for mats in blocks.values() for t in mats)
    base = vm_hwm_bytes()
    total = cpu_total = 0.0
    for role, mats in blocks.items():
        t0, c0 = time.perf_counter(), time.process_time()
        layer_matrix_statistics({role: mats}, device=args.device)
        if args.device == "cuda":
            torch.cuda.synchronize()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        total += dt
        cpu_total += cpu
        print(
            f"| {role} {shapes[role][0]} x {shapes[role][1]}, {args.layers} layers | wall {dt:.1f} s | "
            f"CPU {cpu:.1f} s | 24 layers: wall {dt * scale:.1f} s, CPU {cpu * scale:.1f} s |",
            flush=True,
        )
    print(
        f"| all {4 * args.layers} matrices | wall {total:.1f} s | CPU {cpu_total:.1f} s | all 96: wall "
        f"{total * scale:.1f} s, CPU {cpu_total * scale:.1f} s (process CPU time, all threads) | "
        f"(load average now {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    print(
        f"peak resident memory above the {held / 2**30:.2f} GiB of fp16 weights held: {(vm_hwm_bytes() - base) / 2**30:.2f} GiB",
        flush=True,
    )
    if not args.skip_dense:
        w = blocks["mlp_in"][0]
        t0, c0 = time.perf_counter(), time.process_time()
        dense = torch.linalg.svdvals(w.float())
        dt, ct = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        gram = gram_eigenvalues(w[None])[0].sqrt()
        dg, cg = time.perf_counter() - t0, time.process_time() - c0
        ref = np.linalg.svd(w.double().numpy(), compute_uv=False)
        print(
            f"| one mlp_in: dense float32 svdvals | wall {dt:.1f} s, CPU {ct:.1f} s | max |s - s_float64 SVD| / s_max = "
            f"{float(np.abs(dense.double().numpy() - ref).max() / ref[0]):.1e} |"
        )
        print(
            f"| one mlp_in: float64 Gram eigensolve | wall {dg:.1f} s, CPU {cg:.1f} s | max |s - s_float64 SVD| / s_max = "
            f"{float(np.abs(gram.numpy() - ref).max() / ref[0]):.1e} |",
            flush=True,
        )
    if args.twelve_b:
        del blocks
        subprocess.run([sys.executable, __file__, "--only-12b", "--device", args.device], check=True)


if __name__ == "__main__":
    main()
