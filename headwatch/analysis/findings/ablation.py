"""What the loss needs of each head, as the views and ``headwatch report`` read it: the in-context-learning scores over
training (icl.parquet), each head's ablation effect over training (ablation.parquet) and its tokens in context at
chosen checkpoints (head_contexts.parquet), with what a view says of a store without them.

The tables are the losses lens's and the ablation lens's (`analysis.store.lenses.losses`, `.ablation`; docs/store.md
defines every column); this module only reads them through the store's one accessor (`Store.dense`, `Store.frame`),
aligned with the store's steps, and never computes a loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.findings.held_types import TYPE_LABELS, head_types
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.ablation import ABLATION, HEAD_CONTEXTS
from headwatch.analysis.store.lenses.losses import ICL, LOSS_SETS

# How the views and the report name each score and loss set.
SET_LABELS = {"text": "text", "probe": "probe"}
ICL_LABELS = {
    "text": "text ICL score",
    "probe": "probe ICL score",
}


def missing_lens_text(path: Any, lens: str, tables: str, what: str) -> str:
    """What a panel says about a store without a lens's tables: the files, what they hold and the command that adds
    them (the run's checkpoints are needed: the lens runs the model)."""
    return (
        f"This store has no {what} ({tables}). Add them with `python -m headwatch.precompute --source SOURCE "
        f"--out {path} --lenses {lens}` on the run's checkpoints (the lens runs the model on the store's evaluation "
        "sequences; a store without them cannot have it): checkpoints already in the store get their rows, the other "
        "tables stay as they are."
    )


def missing_icl_text(path: Any) -> str:
    """What a view says about a store without the losses lens."""
    return missing_lens_text(
        path, "losses", "icl.parquet, position_loss.parquet", "in-context-learning scores or losses by position"
    )


def missing_ablation_text(path: Any) -> str:
    """What a view says about a store without the ablation lens."""
    return missing_lens_text(path, "ablation", "ablation.parquet, head_contexts.parquet", "head ablations or tokens in context")


@dataclass(frozen=True)
class IclScores:
    """A run's two in-context-learning scores over its steps (icl.parquet; NaN at a step without rows).

    Attributes:
        steps: ``(S,)`` the store's steps.
        score, se: set (``text``, ``probe``) -> ``(S,)`` the score (late minus early loss, nats) and its standard error
            over sequences.
        positions: set -> what the score compares, in words (``positions 62 − 5 of 64``).
    """

    steps: np.ndarray
    score: dict[str, np.ndarray]
    se: dict[str, np.ndarray]
    positions: dict[str, str]


def positions_text(store: Store) -> dict[str, str]:
    """What each ICL score compares, from meta.json ``losses`` (else from the forward lens's sequences), in words:
    ``loss at position 62 minus at 5 (0-based) of 64 tokens`` and ``mean loss over positions 33–63 minus 1–31``."""
    from headwatch.analysis.store.lenses.losses import icl_positions, probe_positions

    forward = store.meta.forward
    record = store.meta.records.get("losses") or {}
    seq_len = record.get("seq_len", int(forward.seq_len) if forward is not None else None)
    repeat = int(forward.induction_repeat) if forward is not None else None
    early, late = record.get("early"), record.get("late")
    if (early is None or late is None) and seq_len is not None:
        early, late = icl_positions(seq_len)
    text = (
        f"loss at position {late} minus at position {early} (0-based) of {seq_len}-token sequences"
        if early is not None and late is not None
        else "loss at a late position minus at an early one"
    )
    repeat = record.get("induction_repeat", repeat)
    if record.get("probe_first") and record.get("probe_second"):
        (a, b), (c, d) = record["probe_first"], record["probe_second"]
    elif repeat is not None:
        first, second = probe_positions(int(repeat))
        a, b, c, d = first.start, first.stop - 1, second.start, second.stop - 1
    if repeat is not None:
        probe = (
            f"mean loss over the second copy (positions {c}–{d}) minus over the first ({a}–{b}) of {repeat} random "
            "tokens repeated twice"
        )
    else:
        probe = "mean loss over the probe's second copy minus over its first"
    return {"text": text, "probe": probe}


def icl_scores(store: Store) -> IclScores | None:
    """The store's ICL scores over its steps, or None without icl.parquet."""
    if not store.has(ICL):
        return None
    score, se = {}, {}
    for name in LOSS_SETS:
        value = store.dense(ICL, "score", at={"set": name})
        error = store.dense(ICL, "score_sem", at={"set": name})
        assert value is not None and error is not None
        score[name], se[name] = value, error
    return IclScores(np.asarray(store.steps), score, se, positions_text(store))


def icl_rows(scores: IclScores, run: str) -> pd.DataFrame:
    """The ICL scores as tidy rows (run, statistic, step, value, se), nats; steps without a score left out."""
    parts = [
        pd.DataFrame(
            {
                "run": run,
                "statistic": f"icl_{name}",
                "step": np.asarray(scores.steps, dtype=np.int64),
                "value": scores.score[name],
                "se": scores.se[name],
            }
        )
        for name in LOSS_SETS
    ]
    out = pd.concat(parts, ignore_index=True)
    return out[np.isfinite(out["value"])].reset_index(drop=True)


# ------------------------------------------------------------------ ablation over training

ABLATION_MEASURES = ("probe_increase", "text_increase", "icl_probe", "icl_text")  # ablation.parquet's values
MEASURE_LABELS = {
    "probe_increase": "probe loss increase",
    "text_increase": "text loss increase",
    "icl_probe": "probe ICL score, head ablated",
    "icl_text": "text ICL score, head ablated",
}


@dataclass(frozen=True)
class AblationEffect:
    """Every head's ablation effect over the store's steps (ablation.parquet; NaN at a step without rows).

    Attributes:
        steps: ``(S,)`` the store's steps.
        value, se: measure (`ABLATION_MEASURES`) -> ``(S, n_layers, n_heads)`` the value (nats) and its standard error
            over sequences.
        method: ``mean`` or ``zero`` (meta.json ``ablation``).
    """

    steps: np.ndarray
    value: dict[str, np.ndarray]
    se: dict[str, np.ndarray]
    method: str

    def last_index(self) -> int | None:
        """The index of the last step with a probe increase for some head (None: none)."""
        have = np.flatnonzero(np.isfinite(self.value["probe_increase"]).any(axis=(1, 2)))
        return int(have[-1]) if len(have) else None


def ablation_method(store: Store) -> str:
    """How the store's heads were ablated (meta.json ``ablation`` method; ``mean`` when unrecorded)."""
    return str((store.meta.records.get("ablation") or {}).get("method") or "mean")


def ablation_effect(store: Store) -> AblationEffect | None:
    """Every head's ablation effect over the store's steps, or None without ablation.parquet."""
    if not store.has(ABLATION):
        return None
    value, se = {}, {}
    for name in ABLATION_MEASURES:
        v, e = store.dense(ABLATION, name), store.dense(ABLATION, f"{name}_sem")
        assert v is not None and e is not None
        value[name], se[name] = v, e
    return AblationEffect(np.asarray(store.steps), value, se, ablation_method(store))


# ------------------------------------------------------------------ tokens in context

CONTEXT_COLUMNS = ("rank", "set", "sequence", "position", "second_copy", "target", "loss_increase", "base_loss")


def context_steps(store: Store) -> list[int]:
    """The steps of the store's view with tokens in context (head_contexts.parquet), in order; empty without it."""
    return [int(s) for s in store.steps_with(HEAD_CONTEXTS)]


def head_contexts(store: Store, layer: int, head: int, step: int) -> pd.DataFrame | None:
    """One head's tokens in context at ``step`` (head_contexts.parquet rows, by rank), or None without the table.

    Returns:
        The rows (an empty frame at a step or head without them), every column of the table.
    """
    frame = store.frame(HEAD_CONTEXTS)
    if frame is None:
        return None
    rows = frame[(frame["step"] == step) & (frame["layer"] == layer) & (frame["head"] == head)]
    return rows.sort_values("rank").reset_index(drop=True)


def contexts_csv(rows: pd.DataFrame, *, run: str, layer: int, head: int, step: int) -> pd.DataFrame:
    """One head's tokens in context as a CSV table: one row per context (rank, set, sequence, position, second copy,
    target, loss increase, intact loss, the window's text with the target bracketed, the head's attention over the
    window as ``;``-separated numbers, aligned with the window's tokens as ``|``-separated text), with what it is
    of (run, layer, head, step)."""
    windows = ["".join(tokens[:-1]) + f"[{tokens[-1]}]" if len(tokens) else "" for tokens in rows["tokens"]]
    out = pd.DataFrame({c: rows[c].to_numpy() for c in CONTEXT_COLUMNS})
    out["window"] = windows
    out["tokens"] = ["|".join(str(t) for t in tokens) for tokens in rows["tokens"]]
    out["attention"] = [";".join(f"{float(a):.6g}" for a in att) for att in rows["attention"]]
    return out.assign(run=run, layer=layer, head=head, step=step)


def second_copy_share(rows: pd.DataFrame) -> float | None:
    """The share of contexts whose target is a second-copy token of the probe (None: no rows)."""
    if rows is None or not len(rows):
        return None
    return float(np.mean(rows["second_copy"].to_numpy(bool)))


# ------------------------------------------------------------------ issue 59's check: the probe's costliest head


@dataclass(frozen=True)
class ProbeHead:
    """One head as the probe check reads it at one checkpoint.

    Attributes:
        head: ``(layer, head)``.
        cost, se: its probe loss increase when ablated and its standard error over sequences (nats).
        types: the head types it holds there (`HEAD_TYPES` names; empty: none).
        share: the share of its top tokens in context there that are second-copy tokens of the probe (None: no
            tokens in context at that step).
        contexts: how many tokens in context that share is over.
    """

    head: tuple[int, int]
    cost: float
    se: float
    types: tuple[str, ...]
    share: float | None
    contexts: int


@dataclass(frozen=True)
class ProbeCheck:
    """At the last checkpoint with ablations: the head whose ablation costs the probe most, and the induction head
    that costs it most (None: no head holds the induction type there, the run is a control)."""

    step: int
    top: ProbeHead
    induction: ProbeHead | None


def probe_check(store: Store) -> ProbeCheck | None:
    """Issue 59's check of a run: at the last checkpoint with ablations, the head whose ablation raises the probe's
    loss most (its types, its second-copy share among its top contexts there) and the induction head with the largest
    such cost (the same). None without ablation.parquet."""
    effect = ablation_effect(store)
    if effect is None:
        return None
    index = effect.last_index()
    if index is None:
        return None
    step = int(effect.steps[index])
    cost, se = effect.value["probe_increase"][index], effect.se["probe_increase"][index]  # (L, H)
    kinds = head_types(store)
    held = {} if kinds is None else {name: kinds.held[name][index] for name in kinds.types}
    frame = store.frame(HEAD_CONTEXTS)
    at = frame[frame["step"] == step] if frame is not None else None

    def read(layer: int, head: int) -> ProbeHead:
        rows = None if at is None else at[(at["layer"] == layer) & (at["head"] == head)]
        share = second_copy_share(rows) if rows is not None and len(rows) else None
        types = tuple(name for name, h in held.items() if h[layer, head])
        n = 0 if rows is None else len(rows)
        return ProbeHead((layer, head), float(cost[layer, head]), float(se[layer, head]), types, share, n)

    finite = np.where(np.isfinite(cost), cost, -np.inf)
    top = read(*(int(i) for i in np.unravel_index(int(np.argmax(finite)), cost.shape)))
    induction = held.get("induction")
    best = None
    if induction is not None and induction.any():
        masked = np.where(induction, finite, -np.inf)
        best = read(*(int(i) for i in np.unravel_index(int(np.argmax(masked)), cost.shape)))
    return ProbeCheck(step, top, best)


def probe_check_lines(check: ProbeCheck) -> list[str]:
    """The check in sentences: ``At step 4,000 the head whose ablation costs the probe most is L1 H6 (induction):
    +2.1 ± 0.05 nats; 85% of its 20 top tokens in context are second-copy tokens of the probe. ...``"""

    def described(p: ProbeHead) -> str:
        kinds = ", ".join(TYPE_LABELS.get(t, t) for t in p.types) or "no type"
        cost = f"{p.cost:+.3g} ± {p.se:.2g} nats".replace("-", "−")
        if p.share is None:
            share = "no tokens in context at this step"
        else:
            share = f"{p.share:.0%} of its {p.contexts} top tokens in context are second-copy tokens of the probe"
        return f"{head_name(*p.head)} ({kinds}): {cost}; {share}"

    top = check.top
    lines = [f"At step {check.step:,}, the head whose ablation costs the probe most is {described(top)}."]
    if check.induction is None:
        lines.append("No head holds the induction type at this step: the run is a control for the check.")
    elif check.induction.head == top.head:
        lines.append("It is the run's induction head that costs the probe most.")
    else:
        lines.append(f"The induction head that costs the probe most is {described(check.induction)}.")
    return lines
