"""The head types of a store as the views and ``headwatch report`` read them: which types each head holds at each
shown step, when it became each, how many heads hold each type over training, and each type in one sentence.

The types themselves (scores against uniform-attention nulls, thresholds, hysteresis) are `analysis.attention.head_types`'s
and the types lens's (docs/head-types.md); this module only reads what the lens stored, through the store's one
accessor (`analysis.store.Store.dense`, `Store.frame`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.store.lenses.types import FUNCTION_TYPES, HEAD_EMERGENCE, HEAD_TYPES, HEAD_TYPES_TABLE

# How the views and the report name a type.
TYPE_LABELS = {
    "previous_token": "previous-token",
    "induction": "induction",
    "sink": "sink",
    "current_token": "current-token",
    "multigram": "multigram",
    "other": "other",
}


def missing_text(path: Any) -> str:
    """What a view says about a store without head types, with the command that adds them."""
    return (
        "This store has no head types (head_types.parquet, head_emergence.parquet). Add them with "
        f"`python -m headwatch.precompute.lenses.types {path}`: it needs only the store's forward statistics "
        "(attention.parquet, from `python -m headwatch.precompute --lenses attention`), no checkpoint; the multigram "
        "and other heads also need the ablation lens (`--lenses ablation`) and the training text (`--source RUN`)."
    )


@dataclass(frozen=True)
class HeadTypes:
    """A store's head types on its shown steps.

    Attributes:
        steps: ``(S,)`` the store's steps (`Store.steps`).
        held: type -> ``(S, n_layers, n_heads)`` bool, whether the head holds the type there under the hysteresis
            rule (False at a step without rows).
        emergence: type -> ``(n_layers, n_heads)`` int64, the emergence step (-1: not held at the end).
        rules: type -> its ``meta.json`` ``types`` rule (``null``, ``threshold``, ``exit``, ``score``).
        decided: type -> ``(S,)`` bool, whether the store decides the type at that step (it has rows there: every
            checkpoint with forward statistics for an attention type the store has the score of, the checkpoints with
            tokens in context for multigram and other); a type missing here is decided at every step.
    """

    steps: np.ndarray
    held: dict[str, np.ndarray]
    emergence: dict[str, np.ndarray]
    rules: dict[str, dict[str, Any]]
    decided: dict[str, np.ndarray] = field(default_factory=dict)

    def held_at(self, index: int) -> list[str]:
        """Per head, layer-major, the types it holds at step index ``index`` (``"previous_token, sink"``; ``""``: none)."""
        n = self.held[HEAD_TYPES[0]][index].size
        names: list[list[str]] = [[] for _ in range(n)]
        for name in self.types:
            for i in np.flatnonzero(self.held[name][index].ravel()):
                names[i].append(name)
        return [", ".join(t) for t in names]

    def earliest(self, types: tuple[str, ...] | list[str]) -> np.ndarray:
        """Per head, layer-major, the earliest emergence step among ``types`` (those it has): ``(n_layers * n_heads,)``
        int64, -1 for a head that holds none of them at the end."""
        n = next(iter(self.emergence.values())).size
        steps = np.stack([self.emergence[name].ravel() for name in types if name in self.emergence] or [np.full(n, -1)])
        none = np.iinfo(np.int64).max
        earliest = np.where(steps >= 0, steps, none).min(axis=0)
        return np.where(earliest < none, earliest, -1).astype(np.int64)

    def counts(self) -> dict[str, np.ndarray]:
        """Type -> ``(S,)`` float64, how many heads hold it at each step (NaN where the type is not decided there)."""
        out = {}
        for name in self.types:
            count = self.held[name].sum(axis=(1, 2)).astype(np.float64)
            decided = self.decided.get(name)
            out[name] = count if decided is None else np.where(decided, count, np.nan)
        return out

    @property
    def types(self) -> list[str]:
        """The types it has, in `HEAD_TYPES` order."""
        return [name for name in HEAD_TYPES if name in self.held]


def head_types(store: Store) -> HeadTypes | None:
    """The store's head types, or None when it has no head-type tables."""
    if not (store.has(HEAD_TYPES_TABLE) and store.has(HEAD_EMERGENCE)):
        return None
    held, decided = {}, {}
    for name in HEAD_TYPES:
        values = store.dense(HEAD_TYPES_TABLE, "holds", at={"type": name})
        assert values is not None
        held[name] = np.nan_to_num(values, nan=0.0) > 0.5
        decided[name] = ~np.isnan(values).all(axis=(1, 2))
    frame = store.frame(HEAD_EMERGENCE)
    assert frame is not None
    emergence = {}
    for name in HEAD_TYPES:
        out = np.full((store.n_layers, store.n_heads), -1, dtype=np.int64)
        rows = frame[(frame["type"] == name) & frame["emergence_step"].notna()]
        out[rows["layer"].to_numpy(int), rows["head"].to_numpy(int)] = rows["emergence_step"].to_numpy(int)
        emergence[name] = out
    rules = dict(((store.meta.types or {}).get("types")) or {})
    return HeadTypes(np.asarray(store.steps), held, emergence, rules, decided)


# How an emergence step of multigram and other heads reads: those types are decided only at the checkpoints with
# tokens in context (the last and each stage boundary), so the step is the first of those, not an exact onset.
CONTEXT_STEP = "the first checkpoint with tokens in context at which"


@dataclass(frozen=True)
class TypeSummary:
    """Per head type: how many heads hold it at the end, the first to emerge, and the best score reached (for
    multigram and other heads, whose score is the ablation effect, over the heads that hold no attention type at the
    last checkpoint where any does not: ``peak_untyped``)."""

    type: str
    holding: int
    first_step: int | None
    first_head: tuple[int, int] | None
    peak_score: float
    peak_head: tuple[int, int]
    emerged: list[tuple[int, int, int]]  # (layer, head, emergence_step), by step
    peak_untyped: bool = False  # the peak is over heads with no attention type (False: over every head)


def type_summaries(store: Store) -> list[TypeSummary] | None:
    """Each head type's summary from head_emergence.parquet (None: the store has no head types)."""
    frame = store.frame(HEAD_EMERGENCE)
    if frame is None:
        return None
    out = []
    attention = frame[~frame["type"].isin(FUNCTION_TYPES) & frame["emergence_step"].notna()]
    typed = set(zip(attention["layer"].astype(int), attention["head"].astype(int), strict=True))
    for kind in HEAD_TYPES:
        rows = frame[frame["type"] == kind]
        if rows.empty:
            continue
        held = rows[rows["emergence_step"].notna()].sort_values(["emergence_step", "layer", "head"])
        candidates, untyped = rows, False
        if kind in FUNCTION_TYPES:  # the ablation effect: a previous-token head's is not a multigram score
            keep = [(int(r.layer), int(r.head)) not in typed for r in rows.itertuples(index=False)]
            if any(keep) and rows.loc[keep, "peak_score"].notna().any():
                candidates, untyped = rows.loc[keep], True
        peak = candidates.loc[candidates["peak_score"].idxmax()]
        first = held.iloc[0] if len(held) else None
        out.append(
            TypeSummary(
                type=kind,
                holding=len(held),
                first_step=None if first is None else int(first["emergence_step"]),
                first_head=None if first is None else (int(first["layer"]), int(first["head"])),
                peak_score=float(peak["peak_score"]),
                peak_head=(int(peak["layer"]), int(peak["head"])),
                emerged=[(int(r.layer), int(r.head), int(r.emergence_step)) for r in held.itertuples(index=False)],
                peak_untyped=untyped,
            )
        )
    return out


def peak_effect(summary: TypeSummary) -> str:
    """The largest ablation effect a multigram or other summary holds, saying over which heads: ``largest ablation
    effect of a head with no attention type 0.12 nats, L1 H3``."""
    among = "of a head with no attention type" if summary.peak_untyped else "of any head"
    return f"largest ablation effect {among} {summary.peak_score:.3g} nats, {head_name(*summary.peak_head)}"


def emerged_rows(store: Store) -> pd.DataFrame | None:
    """The rows of head_emergence.parquet of every head that holds a type at the last checkpoint, by emergence step,
    layer, head and type; None when the store has no head types."""
    emergence = store.frame(HEAD_EMERGENCE)
    if emergence is None:
        return None
    return emergence[emergence["emergence_step"].notna()].sort_values(["emergence_step", "layer", "head", "type"])


def absent_types(store: Store) -> dict[str, str]:
    """The types the store's types lens could not decide, and why with the command that adds what is missing
    (``meta.json`` ``types`` ``absent``: a forward lens written before the current-token score, no ablation lens, no
    training text)."""
    absent = (store.meta.types or {}).get("absent") or {}
    return {str(k): str(v) for k, v in absent.items()} if isinstance(absent, dict) else {}


def type_sentences(store: Store) -> list[str]:
    """One sentence per head type: who holds it from when, or that no head reaches its threshold, or why the store
    does not decide it."""
    summaries = type_summaries(store)
    if summaries is None:
        return ["This store has no head types (head_emergence.parquet): run the types lens on it."]
    recorded = (store.meta.types or {}).get("types") or {}
    thresholds = {name: r.get("threshold") for name, r in recorded.items() if isinstance(r, dict)}
    out = []
    for s in summaries:
        name = TYPE_LABELS.get(s.type, s.type)
        at = f" (threshold {thresholds[s.type]:.3g})" if isinstance(thresholds.get(s.type), int | float) else ""
        if not s.emerged and s.type in FUNCTION_TYPES:
            out.append(f"No head is a {name} head at the last checkpoint with tokens in context ({peak_effect(s)}).")
            continue
        if not s.emerged:
            out.append(
                f"No head reaches the {name} threshold{at}: the highest {name} score is {s.peak_score:.3g} "
                f"({head_name(*s.peak_head)})."
            )
            continue
        heads = ", ".join(f"{head_name(layer, head)} from step {step:,}" for layer, head, step in s.emerged[:12])
        more = f" and {len(s.emerged) - 12} more" if len(s.emerged) > 12 else ""
        when = f" (from: {CONTEXT_STEP} the head holds it)" if s.type in FUNCTION_TYPES else ""
        out.append(f"{len(s.emerged)} {name} head(s){at}: {heads}{more}{when}.")
    absent = absent_types(store)
    if "current_token" not in recorded:  # a types record made before the type, or a store without the score
        scores = store.dense(ATTENTION, "current_token") if store.has(ATTENTION) else None
        why = absent.get("current_token") or (
            "the head types were made before the current-token score; remake them with "
            f"`python -m headwatch.precompute.lenses.types {store.path}`"
            if scores is not None and np.isfinite(scores).any()
            else "this store's forward lens was written before the current-token score (attention.parquet "
            "current_token); recompute it to have it, which needs the checkpoints: `python -m headwatch.precompute "
            f"--source CHECKPOINTS --out {store.path} --lenses attention`"
        )
        out.append(f"No current-token heads decided: {why.rstrip('.')}.")
    if not (store.meta.types or {}).get("function"):
        why = next((absent[t] for t in FUNCTION_TYPES if absent.get(t)), None) or (
            "the head types were made before multigram and other heads; they need the ablation lens "
            "(`--lenses ablation`) and the training text"
        )
        out.append(f"No multigram or other heads decided: {why.rstrip('.')}.")
    return out
