"""Head types and their emergence steps, written into a store from its forward statistics.

The `types` lens reads ``attention.parquet`` (the ``prev_token``, ``induction`` and ``sink`` scores of every
head at every checkpoint) and ``meta.json`` ``forward`` (the sequence length T and the induction probe's R),
decides each head's types at each checkpoint against the uniform-attention nulls with the thresholds and
hysteresis of `analysis.attention.head_types` (docs/head-types.md), and commits ``head_types.parquet``,
``head_emergence.parquet`` and ``meta.json`` ``types`` in one atomic commit. It needs no checkpoint: a run with
``--lenses attention`` ends with it (``--no-types`` skips it), and an existing store gains it with

    python -m headwatch.precompute.lenses.types STORE
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from headwatch.analysis.attention.head_types import (
    ABSOLUTE,
    EXIT_FRACTION,
    RATIO,
    RULE,
    TypeRule,
    head_type_frames,
    type_rules,
)
from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.store.lenses.types import HEAD_EMERGENCE, HEAD_TYPES, HEAD_TYPES_TABLE, TYPES_LENS
from headwatch.precompute.job.context import BaseComputation, RunContext
from headwatch.precompute.store.writer import commit_store

log = logging.getLogger("precompute")


def types_meta(
    rules: dict[str, TypeRule], *, seq_len: int, repeat: int, steps: list[int], absent: dict[str, str] | None = None
) -> dict[str, Any]:
    """What ``meta.json`` ``types`` records: per type decided its score column, null, threshold and exit level; per
    attention type not decided, why (``absent``); the rule in words; the T and R the nulls are derived for; the
    checkpoints typed."""
    return {
        "files": [HEAD_TYPES_TABLE.file, HEAD_EMERGENCE.file],
        "types": {name: rule.as_dict() for name, rule in rules.items()},
        "absent": dict(absent or {}),
        "absolute": ABSOLUTE,
        "ratio": RATIO,
        "exit_fraction": EXIT_FRACTION,
        "rule": RULE.format(absolute=ABSOLUTE, ratio=RATIO, exit_fraction=EXIT_FRACTION),
        "null": "uniform causal attention (query i spreads 1/i over keys 1..i), averaged as the forward lens "
        "averages each score (docs/head-types.md)",
        "seq_len": seq_len,
        "induction_repeat": repeat,
        "steps": steps,
    }


def absent_score(store: Store, column: str) -> str | None:
    """Why the store's attention.parquet cannot type by ``column`` (None: it can): a score a forward lens written
    before the column was recorded lacks (read as NaN, `analysis.store.older_versions`)."""
    values = store.require(ATTENTION, column)
    if np.isfinite(values[np.isin(store.steps, store.steps_with(ATTENTION))]).all():
        return None
    return (
        f"attention.parquet has no {column} scores at every checkpoint (its forward lens was computed before they "
        f"were recorded); recompute the forward lens to have them: python -m headwatch.precompute --source "
        f"CHECKPOINTS --out {store.path} --lenses attention"
    )


def _inputs(store: Store) -> tuple[np.ndarray, dict[str, TypeRule], dict[str, Any]]:
    """The typed steps, the rules of the types its scores decide and the meta record of a store.

    Raises:
        StoreError: the store has no forward statistics.
    """
    if store.meta.forward is None or not store.has(ATTENTION):
        raise StoreError(
            f"store {str(store.path)!r} has no forward statistics (attention.parquet and meta.json 'forward'); "
            "compute them first with `python -m headwatch.precompute --source CHECKPOINTS --out STORE --lenses attention`"
        )
    info = store.meta.forward
    steps = store.steps_with(ATTENTION)
    rules, absent = {}, {}
    for name, rule in type_rules(info.seq_len, info.induction_repeat).items():
        why = absent_score(store, rule.score)
        if why is None:
            rules[name] = rule
        else:
            absent[name] = why
    record = types_meta(
        rules, seq_len=info.seq_len, repeat=info.induction_repeat, steps=[int(s) for s in steps], absent=absent
    )
    return steps, rules, record


def head_type_tables(store: Store) -> tuple[pa.Table, pa.Table, dict[str, Any]]:
    """``head_types`` and ``head_emergence`` rows of a store, and its ``meta.json`` ``types`` record.

    Raises:
        StoreError: no forward statistics, or non-finite scores.
    """
    steps, rules, record = _inputs(store)
    rows = np.isin(store.steps, steps)
    scores = {}
    for rule in rules.values():
        values = store.require(ATTENTION, rule.score)[rows]  # (S, n_layers, n_heads)
        scores[rule.score] = values
    try:
        types, emergence = head_type_frames(steps, scores, rules)
    except ValueError as exc:
        raise StoreError(f"store {str(store.path)!r}: {exc}") from exc
    return (
        pa.Table.from_pandas(types, schema=HEAD_TYPES_TABLE.schema, preserve_index=False),
        pa.Table.from_pandas(emergence, schema=HEAD_EMERGENCE.schema, preserve_index=False),
        record,
    )


def types_current(store: Store) -> bool:
    """Whether the store's head types were made by these rules from its present forward statistics."""
    if store.meta.types is None or not (store.has(HEAD_TYPES_TABLE) and store.has(HEAD_EMERGENCE)):
        return False
    return store.meta.types == _inputs(store)[2]


def add_types(store_path: str | Path) -> dict[str, Any]:
    """Decide the head types of an existing store and commit them into it atomically.

    Args:
        store_path: the store directory (it needs attention.parquet and meta.json ``forward``; no checkpoints).

    Returns:
        The ``meta.json`` ``types`` record written.

    Raises:
        StoreError: the store cannot be opened or has no forward statistics.
    """
    store = open_store(store_path)
    types, emergence, record = head_type_tables(store)
    commit_store(
        store_path, store.meta.with_record("types", record), {HEAD_TYPES_TABLE.name: types, HEAD_EMERGENCE.name: emergence}
    )
    return record


class TypesComputation(BaseComputation):
    """The head types, after a run with the forward lens: written when the store's forward statistics changed
    since they were made (or they never were). A failure is logged and leaves the store as it is."""

    lens = TYPES_LENS

    def fill(self, run: RunContext) -> None:
        out = run.state.out
        try:
            store = open_store(out)
            if store.meta.forward is None or not store.has(ATTENTION):
                return
            if types_current(store):
                return
            record = add_types(out)
        except (StoreError, ValueError, OSError) as exc:
            log.warning("head types failed (%s); retry with `python -m headwatch.precompute.lenses.types %s`", exc, out)
            run.report.notes.append(f"note: head types were not written ({exc})")
            return
        run.report.notes.append(
            f"head types: written for {len(record['steps'])} checkpoints ({', '.join(record['types'])})"
            + "".join(f"; no {name} type: {why}" for name, why in record["absent"].items())
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwatch.precompute.lenses.types", description=__doc__.splitlines()[0])
    parser.add_argument(
        "store", help="store directory with attention.parquet (python -m headwatch.precompute --lenses attention)"
    )
    args = parser.parse_args(argv)
    try:
        record = add_types(args.store)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    store = open_store(args.store)
    emergence = store.frame(HEAD_EMERGENCE)
    assert emergence is not None
    held = emergence[emergence["emergence_step"].notna()]
    decided = [name for name in HEAD_TYPES if name in record["types"]]
    summary = ", ".join(f"{name} {int((held['type'] == name).sum())}" for name in decided)
    print(
        f"wrote {Path(args.store) / HEAD_TYPES_TABLE.file} and {HEAD_EMERGENCE.file}: {len(record['steps'])} checkpoints; "
        f"heads holding each type at the last one: {summary}"
    )
    for name in decided:
        rule = record["types"][name]
        best = emergence[emergence["type"] == name].sort_values("peak_score", ascending=False).iloc[0]
        print(
            f"  {name}: null {rule['null']:.4g}, threshold {rule['threshold']:.3g}, exit {rule['exit']:.3g}; "
            f"highest score L{int(best['layer'])} H{int(best['head'])} {best['peak_score']:.4g} at step {int(best['peak_step'])}"
        )
    for name, why in record["absent"].items():
        print(f"  {name}: not decided: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
