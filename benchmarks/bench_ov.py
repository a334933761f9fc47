"""Benchmark: what OV circuits and the circuit statistics cost per checkpoint, at Pythia-1.4B shape.

Writes two full-size fp16 GPT-NeoX checkpoints (24 layers, 16 heads, d_model 2048,
d_head 128; random Q/K/V and attention-output weights at Pythia's init scale, zeros
elsewhere; 2.64 GiB each) and runs the whole precompute job on them (hash, read,
extract, every statistic, the overlap pair with its relative change, commit), each
run in a fresh process whose peak resident memory is read from the kernel
(``wait4``): alternating

  - ``today``: the qk-only pipeline as it was before OV existed (a copy of that
    commit's code, ``--baseline DIR``: ``git archive e801fe0 | tar -x -C DIR``), if given;
  - ``qk``: this code with ``--matrices qk`` (W_QK plus its circuit columns and change);
  - ``qk+ov``: this code with ``--matrices qk,ov``;

best of ``--rounds`` each, seconds per checkpoint = wall time / 2. Prints a Markdown table.

Each run's CPU time (user + system, from ``wait4``) is printed beside its wall time: with
``--threads 1`` it is the figure a shared machine disturbs least.

With ``--twelve-b A,B`` it instead measures the peak memory of a qk+ov run at Pythia-12B
shape (d_model 5120, 40 heads, MLP 20480), whose 36 layers do not fit this machine's disk and
memory twice over: checkpoints of A and of B layers, one run each, and the peak extrapolated
linearly to 36 layers (everything that grows with the model, the weights read, the factors,
the previous checkpoint's factors and the next one fetched ahead, is per layer; the work
buffers are per core).

Usage: python -m benchmarks.bench_ov [--workdir /tmp/headwatch-bench-ov] [--baseline DIR] [--rounds 2] [--threads N]
       python -m benchmarks.bench_ov --twelve-b 2,4
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]

from benchmarks.bench_pipeline import CONFIG, write_checkpoint  # noqa: E402

STEPS = (1000, 2000)
# Pythia-12B: 36 layers, 40 heads, d_model 5120, d_head 128, MLP 20480, vocab 50688.
CONFIG_12B: dict[str, Any] = {
    **CONFIG,
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "num_hidden_layers": 36,
    "intermediate_size": 20480,
    "vocab_size": 50688,
}


RUN = """
import sys
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
kw = dict(device="cpu", progress=False, lens_options={"embeddings": {"on": False}, "overlaps": {"k": 8}})
if sys.argv[3]:
    kw["matrices"] = tuple(sys.argv[3].split(","))
run_precompute(sys.argv[1], sys.argv[2], RunOptions(**kw))
"""


def timed_run(code_root: Path, src: Path, out: Path, matrices: str, threads: int | None = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system, all threads) and peak resident bytes of one
    precompute run in a fresh process. On a shared machine the CPU time is the steadier figure."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(code_root), "HEADWATCH_EMBEDDINGS": "0"}
    if threads:  # torch's intra-op threads and the BLAS / LAPACK behind it
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(src), str(out), matrices], cwd=code_root, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"precompute run ({code_root}, {matrices or 'defaults'}) failed")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "headwatch-bench-ov"))
    ap.add_argument("--baseline", default=None, help="a copy of the qk-only code (before OV) to time as 'today'")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of each run (default: torch's own); 1 gives CPU times that a shared machine barely disturbs",
    )
    ap.add_argument("--only", default=None, help="comma-separated configurations to run: today, qk, qk+ov")
    ap.add_argument(
        "--twelve-b",
        default=None,
        metavar="A,B",
        help="peak memory of qk+ov at Pythia-12B shape from checkpoints of A and B layers, extrapolated to 36",
    )
    args = ap.parse_args()
    if args.twelve_b:
        twelve_b_memory(Path(args.workdir), [int(n) for n in args.twelve_b.split(",")], args.threads)
        return
    work = Path(args.workdir)
    src = work / "src"
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for i, step in enumerate(STEPS):
        # the output projection at Pythia's init scale 2 / (n_layers sqrt(d_model))
        write_checkpoint(src / f"step{step}", seed=i, attn_out_std=2 / (24 * 2048**0.5))
    configs = [("qk", REPO, "qk"), ("qk+ov", REPO, "qk,ov")]
    if args.baseline:
        configs.insert(0, ("today (qk only, before OV)", Path(args.baseline).resolve(), ""))
    if args.only:
        configs = [c for c in configs if c[0].split(" ")[0] in args.only.split(",")]
    best: dict[str, tuple[float, float, int]] = {}
    for r in range(args.rounds):
        for name, root, matrices in configs:
            t, cpu, rss = timed_run(root, src, work / "store", matrices, args.threads)
            print(
                f"round {r}: {name}: {t:.1f} s ({cpu:.1f} CPU-s) for {len(STEPS)} checkpoints, peak RSS "
                f"{rss / 2**30:.2f} GiB; load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            old = best.get(name)
            best[name] = (min(t, old[0]), min(cpu, old[1]), max(rss, old[2])) if old else (t, cpu, rss)
    base, base_cpu = best[configs[0][0]][:2]
    print(
        f"\n| pipeline, {len(STEPS)} checkpoints, best of {args.rounds} | seconds per checkpoint | x {configs[0][0]} "
        f"| CPU-s per checkpoint | x (CPU) | peak RSS |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    )
    for name, _, _ in configs:
        t, cpu, rss = best[name]
        print(
            f"| {name} | {t / len(STEPS):.1f} | {t / base:.2f} | {cpu / len(STEPS):.1f} | {cpu / base_cpu:.2f} "
            f"| {rss / 2**30:.2f} GiB |"
        )


def twelve_b_memory(work: Path, layer_counts: list[int], threads: int | None) -> None:
    """Peak resident memory of a qk+ov run at Pythia-12B shape with each number of layers, and
    the line through the two extrapolated to the full 36. Each count's checkpoints are removed
    after its run (about 3 GB each at 4 layers)."""
    if len(layer_counts) != 2 or layer_counts[0] == layer_counts[1]:
        raise SystemExit("--twelve-b takes two different layer counts, e.g. 2,4")
    peaks = {}
    for n in layer_counts:
        src = work / f"src-12b-{n}"
        config = {**CONFIG_12B, "num_hidden_layers": n}
        d = config["hidden_size"]
        for i, step in enumerate(STEPS):
            write_checkpoint(src / f"step{step}", seed=i, attn_out_std=2 / (36 * d**0.5), config=config)
        t, cpu, rss = timed_run(REPO, src, work / "store-12b", "qk,ov", threads)
        peaks[n] = rss
        print(
            f"12B shape, {n} layers, qk+ov: {t:.1f} s ({cpu:.1f} CPU-s) for {len(STEPS)} checkpoints, "
            f"peak RSS {rss / 2**30:.2f} GiB; load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        shutil.rmtree(src)
    (a, pa), (b, pb) = sorted(peaks.items())
    per_layer = (pb - pa) / (b - a)
    full = pa + (CONFIG_12B["num_hidden_layers"] - a) * per_layer
    print(
        f"\n| Pythia-12B shape, qk+ov | peak RSS |\n| --- | ---: |\n| {a} layers | {pa / 2**30:.2f} GiB |\n"
        f"| {b} layers | {pb / 2**30:.2f} GiB |\n| per layer | {per_layer / 2**30:.3f} GiB |\n"
        f"| 36 layers (extrapolated) | {full / 2**30:.1f} GiB |"
    )


if __name__ == "__main__":
    main()
