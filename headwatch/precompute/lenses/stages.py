"""Developmental stages of a run, written into its store as ``stages.parquet`` (docs/stages.md).

Made from the store's own tables after a run (the whole-model rows of ``llc.parquet``, with
``llc_chains.parquet`` when present, ``eval_loss.parquet``'s loss and probe copy loss, ``head_types.parquet``
and ``head_emergence.parquet``) by the rule of `analysis.stages.curve` and the merging and naming of
`analysis.stages.run`, in one atomic commit with ``meta.json`` ``stages`` (the rule, its parameters, the
noise levels, the checkpoints used, the basis the dashboard shades). It needs no checkpoint: run it on an
existing store with

    python -m headwatch.precompute.lenses.stages STORE [--k 3] [--plateau-ratio 0.5] [--merge 1] [--count-noise 0.5]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pyarrow as pa

from headwatch.analysis.errors import StoreError
from headwatch.analysis.stages.curve import StageRule
from headwatch.analysis.stages.run import RunStages, best_supported, store_stages
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.stages import STAGES, STAGES_LENS
from headwatch.precompute.job.context import BaseComputation, RunContext
from headwatch.precompute.store.writer import commit_store

log = logging.getLogger("precompute")
DEFAULT_RULE = StageRule()


def stages_table(stages: RunStages) -> pa.Table:
    """The rows of ``stages.parquet``: every stage of every basis (the run's with the boundaries that support it)."""
    rows = [(basis, s) for basis, found in stages.bases().items() for s in found]
    support = [""] + [b.support_text() for b in stages.boundaries]
    run_low = [-1] + [b.low for b in stages.boundaries]
    run_high = [-1] + [b.high for b in stages.boundaries]
    best = [float("nan")] + [best_supported(b.support).strength for b in stages.boundaries]
    columns = {
        "basis": [b for b, _ in rows],
        "stage": [s.index for _, s in rows],
        "start_step": [s.start_step for _, s in rows],
        "end_step": [s.end_step for _, s in rows],
        "trend": [s.trend for _, s in rows],
        "boundary": [s.boundary for _, s in rows],
        "start_value": [s.start_value for _, s in rows],
        "end_value": [s.end_value for _, s in rows],
        "change": [s.change for _, s in rows],
        "change_se": [s.change_se for _, s in rows],
        "loss_change": [stages.loss_change(s) for _, s in rows],
        "support": [support[s.index] if basis == "run" else "" for basis, s in rows],
        "low_step": [run_low[s.index] if basis == "run" else s.low_step for basis, s in rows],
        "high_step": [run_high[s.index] if basis == "run" else s.high_step for basis, s in rows],
        "evidence": [best[s.index] if basis == "run" else s.evidence for basis, s in rows],
    }
    return STAGES.sorted(pa.table(columns, schema=STAGES.schema))


def add_stages(store_path: str | Path, *, rule: StageRule = DEFAULT_RULE) -> RunStages:
    """Read the stages of an existing store and commit them into it atomically.

    Returns:
        The stages (``meta`` is what ``meta.json`` ``stages`` now holds).

    Raises:
        StoreError: the store cannot be opened or a table read.
    """
    store = open_store(store_path)
    stages = store_stages(store, rule)
    commit_store(store_path, store.meta.with_record("stages", stages.meta), {STAGES.name: stages_table(stages)})
    return stages


class StagesComputation(BaseComputation):
    """The stages, read again from the store after a run that computed rows (or when it has none yet).
    A failure is logged and leaves the store as it is: it is complete without them."""

    lens = STAGES_LENS

    def fill(self, run: RunContext) -> None:
        if not (run.report.computed or any(run.report.lenses.values()) or run.state.meta.stages is None):
            return
        out = run.state.out
        try:
            found = add_stages(out)
        except Exception as exc:  # the store is complete without them
            log.warning(
                "developmental stages failed (%s: %s); the store is complete without them. "
                "Retry with `python -m headwatch.precompute.lenses.stages %s`",
                type(exc).__name__,
                exc,
                out,
            )
            run.report.notes.append(f"stages failed ({type(exc).__name__}: {exc})")
        else:
            for note in found.meta["notes"]:
                run.report.notes.append(f"stages: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwatch.precompute.lenses.stages", description=__doc__.splitlines()[0])
    parser.add_argument("store", help="store directory (meta.json + heads.parquet)")
    parser.add_argument("--k", type=float, default=StageRule.k, help="standard errors a change must exceed (default %(default)s)")
    parser.add_argument(
        "--plateau-ratio",
        type=float,
        default=StageRule.plateau_ratio,
        help="a loss drop slower than this fraction of the drops on both sides is a plateau (default %(default)s)",
    )
    parser.add_argument(
        "--merge",
        type=int,
        default=StageRule.merge,
        help="boundaries of different curves at most this many checkpoints apart are one (default %(default)s)",
    )
    parser.add_argument(
        "--count-noise",
        type=float,
        default=StageRule.count_noise,
        help="the noise floor of a count of heads holding a type, in heads (default %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        rule = StageRule(k=args.k, plateau_ratio=args.plateau_ratio, merge=args.merge, count_noise=args.count_noise)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        found = add_stages(args.store, rule=rule)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {Path(args.store) / STAGES.file}: {len(found.run)} stage(s) of the run, "
        + ", ".join(f"{len(rows)} of {basis}" for basis, rows in found.bases().items() if basis != "run")
    )
    for b in found.boundaries:
        print(f"boundary at step {b.step:,} (checkpoints {b.low:,} to {b.high:,}): {b.forms} ({b.support_text()})")
    for note in found.meta["notes"]:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
