"""Benchmark: seconds per checkpoint with the local executor and with Ray, same checkpoints, one run.

Writes a suite of synthetic GPT-NeoX checkpoints with transformers (random weights,
each step moved a little from the last), then computes its store three ways on this
machine: the local executor (fetch one ahead, compute here), Ray on a local cluster
of ``--cpus`` CPUs with the default CPUs per task (the driver's torch threads: the
store is bit-identical to the local one, checked), and Ray with 1 CPU per task (more
tasks at once, fewer threads each: not bit-identical, so only timed). Cluster start-up
and the workers' warm-up (a two-checkpoint run that makes them import torch) are
reported apart; the per-checkpoint times are end to end (hash, read, extract,
every statistic, overlaps, commit). Prints a Markdown table for the README.

Usage: python -m benchmarks.bench_ray [--workdir /tmp/headwatch-bench-ray] [--checkpoints 8] [--cpus 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch

from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RayOptions, RunOptions

# A small-to-medium GPT-NeoX: 8 layers, 16 heads, d_model 1024 (d_head 64), MLP 2048, vocab 512.
SHAPE: dict[str, Any] = {
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "intermediate_size": 2048,
    "vocab_size": 512,
    "max_position_embeddings": 128,
    "rotary_pct": 0.25,
}


def write_suite(root: Path, n: int) -> list[int]:
    """``n`` checkpoints ``step0, step1000, ...`` (written once, reused)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    steps = [1000 * i for i in range(n)]
    if all((root / f"step{s}" / "model.safetensors").is_file() for s in steps):
        return steps
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(**SHAPE))
    for step in steps:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.02 * torch.randn_like(p))
        model.save_pretrained(root / f"step{step}")
    return steps


def timed_run(suite: Path, out: Path, options: RunOptions) -> float:
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    report = run_precompute(suite, out, options)
    seconds = time.perf_counter() - started
    assert not report.failed, report.failed
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/headwatch-bench-ray"))
    ap.add_argument("--checkpoints", type=int, default=8)
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    args = ap.parse_args()
    import ray

    suite = args.workdir / "suite"
    steps = write_suite(suite, args.checkpoints)
    n = len(steps)
    base: dict[str, Any] = dict(device="cpu", progress=False, lens_options={"embeddings": {"on": False}})
    rows = []
    local = timed_run(suite, args.workdir / "local", RunOptions(**base))
    rows.append(("local executor (fetch one ahead, compute here)", torch.get_num_threads(), 1, local))

    started = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level=logging.WARNING)
    # warm the workers (each imports torch once): two checkpoints at 1 CPU each start two of them
    timed_run(
        suite,
        args.workdir / "warmup",
        RunOptions(**base, executor="ray", revisions=f"step{steps[0]},step{steps[1]}", ray=RayOptions(cpus_per_task=1)),
    )
    startup = time.perf_counter() - started
    same = timed_run(suite, args.workdir / "ray", RunOptions(**base, executor="ray"))
    rows.append(
        (
            f"Ray, local {args.cpus}-CPU cluster, default CPUs per task",
            torch.get_num_threads(),
            max(1, args.cpus // torch.get_num_threads()),
            same,
        )
    )
    one = timed_run(suite, args.workdir / "ray1", RunOptions(**base, executor="ray", ray=RayOptions(cpus_per_task=1)))
    rows.append((f"Ray, local {args.cpus}-CPU cluster, 1 CPU per task", 1, args.cpus, one))
    ray.shutdown()

    identical = all(
        pq.read_table(args.workdir / "local" / name).equals(pq.read_table(args.workdir / "ray" / name))
        for name in ("heads.parquet", "overlaps.parquet")
    )
    print(
        f"{n} checkpoints, GPT-NeoX {SHAPE['num_hidden_layers']} layers x {SHAPE['num_attention_heads']} heads, "
        f"d_model {SHAPE['hidden_size']}; {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end; torch {torch.__version__}, ray {ray.__version__}"
    )
    print(
        f"Ray cluster start-up and worker warm-up (not in the times below): {startup:.1f} s; "
        f"default-CPUs store identical to the local one: {identical}\n"
    )
    print("| executor | torch threads per checkpoint | checkpoints at once | seconds, whole run | seconds per checkpoint |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, threads, at_once, seconds in rows:
        print(f"| {name} | {threads} | {at_once} | {seconds:.1f} | {seconds / n:.2f} |")


if __name__ == "__main__":
    main()
