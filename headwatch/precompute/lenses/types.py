"""Head types and their emergence steps, written into a store from its forward statistics and its ablations.

The `types` lens reads ``attention.parquet`` (the ``prev_token``, ``induction``, ``sink`` and ``current_token``
scores of every head at every checkpoint) and ``meta.json`` ``forward`` (the sequence length T and the induction
probe's R), and decides each head's attention types at each checkpoint against the uniform-attention nulls with the
thresholds and hysteresis of `analysis.attention.head_types` (docs/head-types.md). Where the store has the ablation
lens (``ablation.parquet``, ``head_contexts.parquet``) and a training text is at hand (`precompute.ngrams`), it also
decides the multigram and other heads at the checkpoints with tokens in context (`analysis.attention.function_types`)
and records the n-gram check of every context (``context_ngrams.parquet``); without the text, a store that holds that
check and the record of the decision that made it (meta.json ``types`` ``function``) is decided again from them (the
same tables), and one that does not keeps its check and leaves the two types undecided. It commits the tables and
``meta.json``
``types`` in one atomic commit. It needs no checkpoint: a run with ``--lenses attention`` or ``ablation`` ends with it
(``--no-types`` skips it), and an existing store gains it with

    python -m headwatch.precompute.lenses.types STORE [--source RUN | --ngram-text FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from headwatch.analysis.attention.function_types import (
    ALPHA,
    COVERAGE,
    FLOOR,
    K_SE,
    MIN_SHARE,
    MIN_TEXT_CONTEXTS,
    NGRAM_ORDERS,
    function_type_frames,
    lookup,
    multigram_rule,
    ngram_counts,
    rule_text,
)
from headwatch.analysis.attention.head_types import (
    ABSOLUTE,
    EXIT_FRACTION,
    RATIO,
    RULE,
    TypeRule,
    head_type_frames,
    hysteresis,
    sorted_frames,
    type_rules,
)
from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.store.lenses.ablation import ABLATION, HEAD_CONTEXTS
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.store.lenses.types import (
    CONTEXT_NGRAMS,
    FUNCTION_TYPES,
    HEAD_EMERGENCE,
    HEAD_TYPES,
    HEAD_TYPES_TABLE,
    TYPES_LENS,
)
from headwatch.precompute.evalset import BYTE_TOKENIZER
from headwatch.precompute.job.context import BaseComputation, RunContext
from headwatch.precompute.ngrams import NgramText, NgramTextError, ngram_text
from headwatch.precompute.store.writer import commit_store

log = logging.getLogger("precompute")

# Why a store has no multigram or other heads when no training text was given.
NO_TEXT = (
    "no training text for the multigram rule: a run trained here uses its training split (give the job its run folder, "
    "or `python -m headwatch.precompute.lenses.types STORE --source RUN`); another gives one with --types-ngram-text "
    "FILE (the module: --ngram-text FILE)"
)


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
        f"CHECKPOINTS --out STORE --lenses attention"
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
    record = types_meta(rules, seq_len=info.seq_len, repeat=info.induction_repeat, steps=[int(s) for s in steps], absent=absent)
    return steps, rules, record


def function_types(
    store: Store, held: dict[str, np.ndarray], typed_steps: np.ndarray, ngram: NgramText | None, no_text: str
) -> tuple[list[pd.DataFrame], list[pd.DataFrame], pa.Table, dict[str, Any] | None, str | None]:
    """The multigram and other heads of a store (`analysis.attention.function_types`).

    Args:
        store: the store (its ablation.parquet and head_contexts.parquet).
        held: attention type decided -> ``(S, n_layers, n_heads)`` bool over ``typed_steps``, whether the head holds it.
        typed_steps: the checkpoints the attention types were decided at.
        ngram: the training-text sample (None: none at hand, ``no_text`` says why).

    Returns:
        ``(types, emergence, context_ngrams, record, absent)``: the two types' rows, the n-gram check of every
        context, the ``meta.json`` ``types`` ``function`` record, and why they were not decided (None: they were).
    """
    none: tuple[list[pd.DataFrame], list[pd.DataFrame], pa.Table, None] = ([], [], CONTEXT_NGRAMS.empty(), None)
    rebuild = "python -m headwatch.precompute --source CHECKPOINTS --out STORE --lenses ablation"
    if not store.has(ABLATION) or not store.has(HEAD_CONTEXTS):
        return (*none, f"the store has no ablation lens (ablation.parquet, head_contexts.parquet); add it with {rebuild}")
    steps = store.steps_with(ABLATION)
    contexts = store.frame(HEAD_CONTEXTS, columns=["set", "tokens"])
    assert contexts is not None
    context_steps = np.array(sorted(set(contexts["step"].tolist()) & set(steps.tolist()) & set(typed_steps.tolist())))
    if not len(context_steps):
        return (*none, "no checkpoint has both tokens in context (head_contexts.parquet) and attention types")
    contexts = contexts[contexts["step"].isin(context_steps)]
    earlier = None if ngram is not None else stored_check(store, contexts)
    if ngram is None and earlier is None:
        return (*none, no_text)
    if ngram is not None:
        counts = ngram_counts(ngram.segments)
        found = [counts.explained_order(lookup(list(tokens), ngram.index)) for tokens in contexts["tokens"]]
        order = np.array([f[0] for f in found], dtype=np.int32)
        count = np.array([f[1] for f in found], dtype=np.int64)
        base_rate, frequent, text = counts.base_rate, {str(n): len(f) for n, f in counts.frequent.items()}, ngram.record
    else:
        assert earlier is not None
        order, count, before = earlier
        base_rate, frequent, text = before["base_rate"], before["frequent"], before["text"]
    rows = np.isin(store.steps, steps)
    increase = store.require(ABLATION, "text_increase")[rows]
    sem = store.require(ABLATION, "text_increase_sem")[rows]
    shape = (len(context_steps), store.n_layers, store.n_heads)
    checked = pa.table(
        {
            "step": pa.array(contexts["step"].to_numpy(np.int64)),
            "layer": pa.array(contexts["layer"].to_numpy(np.int32)),
            "head": pa.array(contexts["head"].to_numpy(np.int32)),
            "rank": pa.array(contexts["rank"].to_numpy(np.int32)),
            "order": pa.array(order),
            "count": pa.array(count),
        },
        schema=CONTEXT_NGRAMS.schema,
    )
    multigram = np.zeros(shape, dtype=bool)
    where = {int(s): i for i, s in enumerate(context_steps)}
    # decided on the text contexts only (a probe context's random tokens continue no n-gram of the training text)
    n_text = np.zeros(shape, dtype=np.int64)
    frame = contexts[["step", "layer", "head"]].assign(explained=order > 0, text=(contexts["set"] == "text").to_numpy())
    for (step, layer, head), group in frame.groupby(["step", "layer", "head"]):
        decision = multigram_rule(group.loc[group["text"], "explained"].to_numpy(), base_rate)
        multigram[where[int(step)], int(layer), int(head)] = decision.multigram
        n_text[where[int(step)], int(layer), int(head)] = decision.contexts
    at_typed = np.searchsorted(typed_steps, context_steps)
    untyped = ~np.any([h[at_typed] for h in held.values()], axis=0) if held else np.ones(shape, dtype=bool)
    few = untyped & (n_text < MIN_TEXT_CONTEXTS)  # judged other for want of text contexts (if measurable)
    types, emergence = function_type_frames(steps, increase, sem, np.searchsorted(steps, context_steps), untyped, multigram)
    record = {
        "types": list(FUNCTION_TYPES),
        "rule": rule_text(),
        "floor": FLOOR,
        "k_se": K_SE,
        "exit_fraction": EXIT_FRACTION,
        "orders": list(NGRAM_ORDERS),
        "coverage": COVERAGE,
        "min_share": MIN_SHARE,
        "alpha": ALPHA,
        "base_rate": base_rate,
        "frequent": frequent,
        "untyped_by": list(held),
        "effect": "ablation.parquet text_increase and text_increase_sem, "
        f"{((store.meta.ablation or {}).get('method') or 'mean')} ablation",
        "context_steps": [int(s) for s in context_steps],
        "contexts": "the head's top contexts on the evaluation text only (set text of head_contexts.parquet)",
        "min_text_contexts": MIN_TEXT_CONTEXTS,
        "few_text_contexts": [
            {"step": int(context_steps[i]), "layer": int(layer), "head": int(head), "text_contexts": int(n_text[i, layer, head])}
            for i, layer, head in zip(*np.nonzero(few), strict=True)
        ],
        "text": text,
    }
    return types, emergence, checked, record, None


def stored_check(store: Store, contexts: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
    """The n-gram check the store already holds for ``contexts`` (head_contexts.parquet rows), where no training text
    is at hand: each context's ``order`` and ``count`` from context_ngrams.parquet, in ``contexts``' order, and the
    meta.json ``types`` ``function`` record that made them (its base rate, frequent n-grams and text). None when the
    store has no such record, the record's n-gram orders or coverage are not this rule's (its ``order`` column would
    mean another check), or its check lacks a context: the multigram rule is then not decided, as before."""
    before = (store.meta.types or {}).get("function")
    if not before or not store.has(CONTEXT_NGRAMS) or not all(k in before for k in ("base_rate", "frequent", "text")):
        return None
    if before.get("orders") != list(NGRAM_ORDERS) or before.get("coverage") != COVERAGE:
        return None
    table = store.frame(CONTEXT_NGRAMS)
    if table is None or not len(contexts):
        return None
    keys = ["step", "layer", "head", "rank"]
    joined = contexts[keys].merge(table[[*keys, "order", "count"]], on=keys, how="left", validate="one_to_one")
    if joined["order"].isna().any():
        return None
    return joined["order"].to_numpy(np.int32), joined["count"].to_numpy(np.int64), before


def head_type_tables(
    store: Store, ngram: NgramText | None = None, *, no_text: str = NO_TEXT
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The types lens's tables of a store by name, and its ``meta.json`` ``types`` record.

    Args:
        store: the store.
        ngram: the training-text sample for the multigram rule (None: no multigram or other heads, ``no_text``
            says why).

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
        held = {name: hysteresis(scores[rule.score], enter=rule.threshold, exit=rule.exit) for name, rule in rules.items()}
        more_types, more_emergence, checked, function, absent = function_types(store, held, steps, ngram, no_text)
        types, emergence = sorted_frames([types, *more_types], [emergence, *more_emergence])
    except ValueError as exc:
        raise StoreError(f"store {str(store.path)!r}: {exc}") from exc
    record["files"] = [*record["files"], CONTEXT_NGRAMS.file]
    record["function"] = function
    if absent is not None:
        record["absent"] |= {name: absent for name in FUNCTION_TYPES}
    tables = {
        HEAD_TYPES_TABLE.name: pa.Table.from_pandas(types, schema=HEAD_TYPES_TABLE.schema, preserve_index=False),
        HEAD_EMERGENCE.name: pa.Table.from_pandas(emergence, schema=HEAD_EMERGENCE.schema, preserve_index=False),
    }
    if absent is None or not store.has(CONTEXT_NGRAMS):  # undecided: an earlier check the store holds is kept
        tables[CONTEXT_NGRAMS.name] = checked
    return tables, record


def types_current(store: Store, record: dict[str, Any]) -> bool:
    """Whether the store's head types are ``record``'s (made by these rules from its present tables)."""
    if store.meta.types is None or not (store.has(HEAD_TYPES_TABLE) and store.has(HEAD_EMERGENCE)):
        return False
    return bool(json.loads(json.dumps(store.meta.types)) == json.loads(json.dumps(record)))


def add_types(
    store_path: str | Path, ngram: NgramText | None = None, *, no_text: str = NO_TEXT, unless_current: bool = False
) -> dict[str, Any] | None:
    """Decide the head types of an existing store and commit them into it atomically.

    Args:
        store_path: the store directory (it needs attention.parquet and meta.json ``forward``; no checkpoints).
        ngram: the training-text sample for the multigram rule (`precompute.ngrams.ngram_text`).
        unless_current: write nothing when the store's types are what this would write.

    Returns:
        The ``meta.json`` ``types`` record written (None: nothing written).

    Raises:
        StoreError: the store cannot be opened or has no forward statistics.
    """
    store = open_store(store_path)
    tables, record = head_type_tables(store, ngram, no_text=no_text)
    if unless_current and types_current(store, record):
        return None
    commit_store(store_path, store.meta.with_record("types", record), tables)
    return record


class TypesComputation(BaseComputation):
    """The head types, after a run with the forward or the ablation lens: written when the store's tables changed
    since they were made (or they never were). A failure is logged and leaves the store as it is."""

    lens = TYPES_LENS

    def fill(self, run: RunContext) -> None:
        out = run.state.out
        try:
            store = open_store(out)
            if store.meta.forward is None or not store.has(ATTENTION):
                return
            ngram, no_text = self._ngram_text(store)
            record = add_types(out, ngram, no_text=no_text, unless_current=True)
        except (StoreError, ValueError, OSError) as exc:
            log.warning("head types failed (%s); retry with `python -m headwatch.precompute.lenses.types %s`", exc, out)
            run.report.notes.append(f"note: head types were not written ({exc})")
            return
        if record is None:
            return
        run.report.notes.append(
            f"head types: written for {len(record['steps'])} checkpoints ({', '.join(record['types'])}"
            + (", multigram, other" if record["function"] else "")
            + ")"
            + "".join(f"; no {name} type: {why}" for name, why in record["absent"].items())
        )

    def finish(self, run: RunContext) -> None:
        """The types again once every lens has filled: the ablation lens keeps its tokens in context at the stages'
        boundaries, known only after the stages, which are made from the attention types this lens wrote first."""
        self.fill(run)

    def _ngram_text(self, store: Store) -> tuple[NgramText | None, str]:
        """The n-gram text of this run's source, or None and why (nothing is read without the ablation lens; read once
        per run)."""
        if not store.has(HEAD_CONTEXTS):
            return None, NO_TEXT
        if self._text is None:
            self._text = self._read_ngram_text(store)
        return self._text

    _text: tuple[NgramText | None, str] | None = None

    def _read_ngram_text(self, store: Store) -> tuple[NgramText | None, str]:
        options = self.setup.options.lens_options_for("types")
        src = self.setup.plan.src
        folder = Path(self.setup.source) if Path(self.setup.source).is_dir() else None
        forward = store.meta.forward
        at = src.tokenizer_location(self.setup.plan.todo[0]) if self.setup.plan.todo else (src.name, {})
        try:
            ngram = ngram_text(
                text_file=options.ngram_text,
                run_info=src.run_info(),
                run_folder=folder,
                tokenizer_at=at,
                byte_tokens=forward is not None and forward.tokenizer == BYTE_TOKENIZER,
            )
        except NgramTextError as exc:
            return None, f"no training text for the multigram rule: {exc}"
        return ngram, NO_TEXT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwatch.precompute.lenses.types", description=__doc__.splitlines()[0])
    parser.add_argument(
        "store", help="store directory with attention.parquet (python -m headwatch.precompute --lenses attention)"
    )
    parser.add_argument(
        "--source",
        metavar="RUN",
        help="the run folder a store of a run trained here was made from: its training split decides multigram heads",
    )
    parser.add_argument(
        "--ngram-text",
        metavar="FILE",
        help="UTF-8 text whose frequent n-grams decide multigram heads, tokenized with the tokenizer meta.json "
        "forward names (as --eval-text was)",
    )
    args = parser.parse_args(argv)
    try:
        store = open_store(args.store)
        ngram = None
        if (args.source or args.ngram_text) and store.has(HEAD_CONTEXTS) and store.meta.forward is not None:
            ngram = standalone_ngram_text(store, source=args.source, text_file=args.ngram_text)
        record = add_types(args.store, ngram)
    except (StoreError, NgramTextError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    assert record is not None
    store = open_store(args.store)
    emergence = store.frame(HEAD_EMERGENCE)
    assert emergence is not None
    held = emergence[emergence["emergence_step"].notna()]
    decided = [name for name in HEAD_TYPES if name in record["types"] or (record["function"] and name in FUNCTION_TYPES)]
    summary = ", ".join(f"{name} {int((held['type'] == name).sum())}" for name in decided)
    print(
        f"wrote {Path(args.store) / HEAD_TYPES_TABLE.file} and {HEAD_EMERGENCE.file}: {len(record['steps'])} checkpoints; "
        f"heads holding each type at the last one: {summary}"
    )
    for name in decided:
        rows = emergence[emergence["type"] == name]
        if name in FUNCTION_TYPES:  # of the heads that hold it (every head has a row, its effect whatever its type)
            rows = rows[rows["emergence_step"].notna()]
            if rows.empty:
                print(f"  {name}: no head holds it at a checkpoint with tokens in context")
                continue
        best = rows.sort_values("peak_score", ascending=False).iloc[0]
        where = f"L{int(best['layer'])} H{int(best['head'])} {best['peak_score']:.4g} at step {int(best['peak_step'])}"
        if name in FUNCTION_TYPES:
            print(f"  {name}: largest ablation effect of a head that holds it: {where} nats")
            continue
        rule = record["types"][name]
        print(
            f"  {name}: null {rule['null']:.4g}, threshold {rule['threshold']:.3g}, exit {rule['exit']:.3g}; "
            f"highest score {where}"
        )
    if record["function"]:
        fn = record["function"]
        print(
            f"  multigram rule: base rate {fn['base_rate']:.3f} of the sample's tokens continue a frequent n-gram "
            f"({fn['text']['text']}, {fn['text']['sample_tokens']:,} tokens); contexts checked at steps "
            f"{', '.join(map(str, fn['context_steps']))}, on each head's text contexts only"
            + (
                ""
                if ngram is not None
                else "; no training text given: each context's check is the store's own "
                "(context_ngrams.parquet, made with that text)"
            )
        )
        if fn.get("few_text_contexts"):
            few = fn["few_text_contexts"]
            print(
                f"  {len(few)} (checkpoint, head) pairs of heads with no attention type have fewer than "
                f"{fn['min_text_contexts']} text contexts among their top 20 (the rest on the probe): not judged by "
                "the n-gram rule, an other head where their ablation effect is measurable"
            )
    for name, why in record["absent"].items():
        print(f"  {name}: not decided: {why}")
    return 0


def standalone_ngram_text(store: Store, *, source: str | None, text_file: str | None) -> NgramText | None:
    """The n-gram text of ``python -m headwatch.precompute.lenses.types STORE --source RUN | --ngram-text FILE``.

    Raises:
        NgramTextError: the run folder has no run.json, or the text cannot be had.
    """
    forward = store.meta.forward
    assert forward is not None
    run_info = None
    if source is not None:
        path = Path(source) / "run.json"
        if not path.is_file():
            raise NgramTextError(f"{source!r} has no run.json: --source names a run trained here; pass --ngram-text FILE")
        run_info = json.loads(path.read_text())
    byte_tokens = forward.tokenizer == BYTE_TOKENIZER
    return ngram_text(
        text_file=text_file,
        run_info=run_info,
        run_folder=Path(source) if source else None,
        tokenizer_at=None if byte_tokens else (forward.tokenizer, {}),
        byte_tokens=byte_tokens,
    )


if __name__ == "__main__":
    sys.exit(main())
