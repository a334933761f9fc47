"""Command line: ``python -m precompute --source DIR --out STORE [--device auto|cpu|cuda]``.

Exit status: 0 when every checkpoint is in the store, 1 when some checkpoints
failed (listed on stderr and in meta.json; the rest were processed), 2 when the
run could not start (bad source, unknown architecture, incompatible store),
130 when interrupted (the store keeps every committed checkpoint; rerun to resume).
"""

from __future__ import annotations

import argparse
import logging
import sys

from analysis.errors import CheckpointError, CheckpointNotFoundError, StoreError, UnknownArchitectureError
from precompute.settings import DEFAULT_DEVICE


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m precompute",
        description="Compute per-head W_QK statistics for every checkpoint under a folder and write a store.",
    )
    p.add_argument("--source", required=True, help="folder with one step<N>/ or checkpoint-<N>/ sub-folder per checkpoint")
    p.add_argument("--out", required=True, help="store directory to create, or to resume")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=DEFAULT_DEVICE, help="default: auto ($HEADWATCH_DEVICE)")
    p.add_argument("--model-id", default=None, help="model name recorded in the store (default: the source folder name)")
    p.add_argument("--tokens-per-step", type=int, default=None, help="tokens per training step, to record tokens seen")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    from precompute.run import run_precompute  # imports torch; keep --help fast

    try:
        report = run_precompute(
            args.source,
            args.out,
            device=args.device,
            model_id=args.model_id,
            tokens_per_step=args.tokens_per_step,
            progress=not args.no_progress,
        )
    except (CheckpointNotFoundError, UnknownArchitectureError, StoreError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: {args.out} keeps every finished checkpoint; run the same command to resume", file=sys.stderr)
        return 130
    print(
        f"{args.out}: {len(report.computed)} computed, {len(report.already_done)} already done, "
        f"{len(report.duplicates)} duplicates, {len(report.failed)} failed",
        file=sys.stderr,
    )
    if report.failed:
        print("failed checkpoints (rerun to retry them):", file=sys.stderr)
        for f in report.failed:
            print(f"  {f['revision']}: {f['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
