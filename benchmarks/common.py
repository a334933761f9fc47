"""What several benchmarks share: the machine line above their results, a table's bytes as the store writes it,
random per-head factors of a Pythia shape and the timed rows of a computation over every pair of heads, a
measurement run in a worker process of its own, and the Chromium the browser benchmarks (and tests) start.

torch is imported where a function needs it, so that the dashboard's benchmarks, which import this module, time
their pages without it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent  # the repository: the worker processes run in it

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [  # a headless Chromium that draws in software and fetches nothing of its own
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Pythia-1.4B's attention: 24 layers of 16 heads, d_head 128, d_model 2048
PYTHIA_1_4B = {"n_layers": 24, "n_heads": 16, "d_head": 128, "d_model": 2048}


def parquet_bytes(table: Any) -> int:
    """The bytes of ``table`` (a pyarrow Table) written as Parquet with zstd, as the store writes its files."""
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.tell()


def factor_benchmark(doc: str, *, dtypes: str) -> tuple[argparse.Namespace, dict[str, int], list[Any]]:
    """The command line of a benchmark over one checkpoint's per-head factors (``--device``, ``--dtypes``,
    ``--layers``) and its inputs: the shape (Pythia-1.4B's with ``--layers`` layers) and four random per-head
    factors, each ``(n_layers, n_heads, d_head, d_model)``, seeded, rounded through fp16 as a checkpoint stores them
    and extracted to float32 (`families.extract`)."""
    import torch

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtypes", default=dtypes)
    p.add_argument("--layers", type=int, default=PYTHIA_1_4B["n_layers"])
    args = p.parse_args()
    shape = dict(PYTHIA_1_4B, n_layers=args.layers)
    gen = torch.Generator().manual_seed(0)
    size = (shape["n_layers"], shape["n_heads"], shape["d_head"], shape["d_model"])
    factors = [(0.02 * torch.randn(size, generator=gen)).half().float() for _ in range(4)]
    return args, shape, factors


T = TypeVar("T")


def every_pair(dtypes: str, compute: Callable[[Any], T], rows: Callable[[T], Any]) -> T:
    """Time ``compute(dtype)`` in each of ``dtypes`` (torch dtype names, comma-separated) and print its Markdown row:
    ``every pair``, the dtype, wall seconds, and the rows ``rows`` makes of the result with their bytes; returns the
    last dtype's result."""
    import torch

    result: T | None = None
    for name in dtypes.split(","):
        t0 = time.perf_counter()
        result = compute(getattr(torch, name))
        seconds = time.perf_counter() - t0
        table = rows(result)
        print(f"| every pair | {name} | {seconds:.1f} | {table.num_rows:,} | {parquet_bytes(table):,} |", flush=True)
    assert result is not None
    return result


def torch_machine() -> str:
    """The processor, torch's version and threads and the 1-minute load average, as a results line opens."""
    import torch

    return (
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load average {os.getloadavg()[0]:.1f}"
    )


def in_worker(module: str, *args: str) -> dict[str, Any]:
    """Run the benchmark ``module`` (``benchmarks.bench_dashboard``) again as a fresh Python process in the
    repository, ``python -m module args`` (its worker mode), and return the JSON object its last line prints.

    Raises:
        SystemExit: with the worker's exit status, after printing the tail of its stderr, when it fails.
    """
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(proc.returncode)
    return json.loads(proc.stdout.strip().splitlines()[-1])
