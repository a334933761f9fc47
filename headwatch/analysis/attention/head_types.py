"""Head types as decisions (docs/head-types.md; design notes section 10): previous-token, induction, sink and
current-token heads by where they attend (this module); multigram and "other" heads by what ablating them costs
(`analysis.attention.function_types`).

An attention type is a forward score of `analysis.attention.patterns` (``prev_token``, ``induction``, ``sink``,
``current_token``) against

- its **null**, the score of uniform causal attention (query i spreads ``1/i`` over keys ``1..i``,
  positions 1-based) averaged exactly as the forward lens averages the score, for the store's
  sequence length ``T`` and induction probe ``R`` (two copies of R random tokens, length 2R):

  - previous token, ``a_{i,i-1}`` over queries ``i = 2..T``: ``(1/(T-1)) sum_{i=2}^T 1/i = (H_T - 1)/(T-1)``;
  - sink, ``a_{i,1}`` over every query ``i = 1..T``: ``(1/T) sum_{i=1}^T 1/i = H_T / T``;
  - induction, ``a_{R+k,k+1}`` over ``k = 1..R-1``: ``(1/(R-1)) sum_{k=1}^{R-1} 1/(R+k) = (H_{2R-1} - H_R)/(R-1)``;
  - current token, ``a_{i,i}`` over queries ``i = 2..T``: ``(1/(T-1)) sum_{i=2}^T 1/i = (H_T - 1)/(T-1)`` (the
    previous-token null: query i gives every key, its own and its predecessor alike, ``1/i``);

  with ``H_n = sum_{m=1}^n 1/m`` the harmonic number (every sequence has the same length, so the mean over
  sequences changes nothing);
- an **entry threshold** ``max(ABSOLUTE, RATIO x null)``: an absolute share of the query's attention that is
  also many times what uniform attention gives;
- an **exit level** ``EXIT_FRACTION x threshold`` (hysteresis): a head enters a type at a checkpoint where
  its score reaches the threshold and keeps it until a checkpoint where the score falls below the exit level.

The **emergence step** of a head and type is the first checkpoint from which the head holds the type at every
later checkpoint (none when it does not hold it at the last one). Every function takes dense
``[step, layer, head]`` arrays and returns new arrays or frames; nothing here reads a store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.store.lenses.types import (
    ATTENTION_TYPES,
    HEAD_EMERGENCE,
    HEAD_TYPE_SCORES,
    HEAD_TYPES,
    HEAD_TYPES_TABLE,
)

# A head attends with at least 30% of its query's mass to the type's position: a formed induction head scores
# 0.3 to 0.9 (Olsson et al. 2022 read induction heads off scores of this size), and the same share
# for the previous token and the first position, where a formed head puts most of its attention.
ABSOLUTE = 0.3
# ... and at least 5 times what uniform attention gives (binding for short sequences: T = 32 puts the
# previous-token null at 0.099 and the threshold at 0.49).
RATIO = 5.0
# Hysteresis: a head that holds a type keeps it until its score falls below 2/3 of the threshold (0.2 for
# 0.3). The band, 0.1 at the default, is about 4 times the 95th percentile (0.027) of the checkpoint-to-
# checkpoint change of the previous-token scores of the shipped runs after step 512.
EXIT_FRACTION = 2.0 / 3.0

RULE = (
    "A head holds a type at a checkpoint when its score reaches the entry threshold max({absolute}, {ratio} x null) "
    "there, or when it held the type at the previous checkpoint and its score is at least the exit level "
    "({exit_fraction:.4g} x threshold); it holds no type before the first checkpoint. The null is the score of "
    "uniform causal attention on the same sequences. The emergence step is the first checkpoint from which the "
    "head holds the type at every later checkpoint (none if it does not hold it at the last one)."
)


def harmonic(n: int) -> float:
    """``H_n = sum_{m=1}^n 1/m`` (``H_0 = 0``), summed exactly in float64."""
    return float(np.sum(1.0 / np.arange(1, n + 1, dtype=np.float64))) if n > 0 else 0.0


def uniform_nulls(seq_len: int, repeat: int) -> dict[str, float]:
    """Each type's score under uniform causal attention, averaged as `analysis.attention.patterns` averages it.

    Args:
        seq_len: T, the evaluation sequences' length (previous-token and sink scores).
        repeat: R, the induction probe's repeated length (its sequences are 2R long).

    Returns:
        attention type (`ATTENTION_TYPES`) -> null.

    Raises:
        ValueError: T < 2 or R < 2 (the forward lens needs both).
    """
    if seq_len < 2 or repeat < 2:
        raise ValueError(f"seq_len {seq_len} and induction_repeat {repeat}: both must be at least 2")
    return {
        "previous_token": (harmonic(seq_len) - 1.0) / (seq_len - 1),
        "induction": (harmonic(2 * repeat - 1) - harmonic(repeat)) / (repeat - 1),
        "sink": harmonic(seq_len) / seq_len,
        "current_token": (harmonic(seq_len) - 1.0) / (seq_len - 1),
    }


@dataclass(frozen=True)
class TypeRule:
    """How one type is decided.

    Attributes:
        type: the type (`ATTENTION_TYPES`).
        score: its attention.parquet column (`HEAD_TYPE_SCORES`).
        null: the score of uniform causal attention.
        threshold: the entry threshold, ``max(absolute, ratio x null)``.
        exit: the exit level, ``exit_fraction x threshold``.
    """

    type: str
    score: str
    null: float
    threshold: float
    exit: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def type_rules(
    seq_len: int,
    repeat: int,
    *,
    absolute: float = ABSOLUTE,
    ratio: float = RATIO,
    exit_fraction: float = EXIT_FRACTION,
) -> dict[str, TypeRule]:
    """The rule of every attention type for a store's T and R.

    Raises:
        ValueError: T or R below 2, an absolute threshold outside (0, 1], a ratio below 1, or an exit fraction
            outside (0, 1].
    """
    if not 0 < absolute <= 1:
        raise ValueError(f"absolute threshold {absolute!r}: expected a share of attention in (0, 1]")
    if ratio < 1:
        raise ValueError(f"ratio {ratio!r}: the threshold must be at least the null (ratio >= 1)")
    if not 0 < exit_fraction <= 1:
        raise ValueError(f"exit fraction {exit_fraction!r}: expected a value in (0, 1] (1: no hysteresis)")
    nulls = uniform_nulls(seq_len, repeat)
    rules = {}
    for name in ATTENTION_TYPES:
        threshold = max(absolute, ratio * nulls[name])
        rules[name] = TypeRule(name, HEAD_TYPE_SCORES[name], nulls[name], threshold, exit_fraction * threshold)
    return rules


def hysteresis(scores: np.ndarray, *, enter: float, exit: float) -> np.ndarray:
    """Whether each head holds the type at each checkpoint: ``(S, ...) -> (S, ...)`` bool.

    ``holds[0] = scores[0] >= enter``; ``holds[t] = scores[t] >= enter or (holds[t-1] and scores[t] >= exit)``.
    A NaN score holds nothing.

    Raises:
        ValueError: ``exit > enter``.
    """
    if exit > enter:
        raise ValueError(f"exit level {exit} above the entry threshold {enter}")
    scores = np.asarray(scores, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        above, stays = scores >= enter, scores >= exit
    holds = np.zeros(scores.shape, dtype=bool)
    state = np.zeros(scores.shape[1:], dtype=bool)
    for t in range(scores.shape[0]):  # a scan over checkpoints, batched over heads
        state = above[t] | (state & stays[t])
        holds[t] = state
    return holds


def emergence_index(holds: np.ndarray) -> np.ndarray:
    """Index of the first checkpoint from which ``holds`` stays true to the end: ``(S, ...) -> (...)`` int64,
    -1 where it is false at the last checkpoint (or there are none)."""
    holds = np.asarray(holds, dtype=bool)
    s = holds.shape[0]
    if s == 0:
        return np.full(holds.shape[1:], -1, dtype=np.int64)
    # the last false index + 1, found as the first false from the end
    from_end = np.flip(~holds, axis=0)
    any_false = from_end.any(axis=0)
    last_false = s - 1 - from_end.argmax(axis=0)
    out = np.where(any_false, last_false + 1, 0)
    return np.where(holds[-1], out, -1).astype(np.int64)


def first_index(mask: np.ndarray) -> np.ndarray:
    """Index of the first true along axis 0: ``(S, ...) -> (...)`` int64, -1 where never."""
    mask = np.asarray(mask, dtype=bool)
    if mask.shape[0] == 0:
        return np.full(mask.shape[1:], -1, dtype=np.int64)
    return np.where(mask.any(axis=0), mask.argmax(axis=0), -1).astype(np.int64)


def _head_columns(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    n_layers, n_heads = shape
    return np.repeat(np.arange(n_layers, dtype=np.int32), n_heads), np.tile(np.arange(n_heads, dtype=np.int32), n_layers)


def head_type_frames(
    steps: np.ndarray, scores: dict[str, np.ndarray], rules: dict[str, TypeRule]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of ``head_types.parquet`` and ``head_emergence.parquet`` (`analysis.store.format`).

    Args:
        steps: the checkpoints, ascending, ``(S,)``.
        scores: attention.parquet column (`HEAD_TYPE_SCORES`) -> ``(S, n_layers, n_heads)`` float64.
        rules: the rules to decide (`type_rules` of the store, or those of its types whose score it has).

    Returns:
        ``(types, emergence)`` frames with the tables' columns, in their sort order.

    Raises:
        ValueError: steps not strictly ascending, a missing or misshapen score, or a non-finite score.
    """
    steps = np.asarray(steps, dtype=np.int64)
    if steps.ndim != 1 or np.any(np.diff(steps) <= 0):
        raise ValueError(f"steps must be strictly ascending, got {steps.tolist()[:10]}")
    types, emergence = [], []
    for name, rule in rules.items():
        if rule.score not in scores:
            raise ValueError(f"no {rule.score!r} scores for the {name} type")
        score = np.asarray(scores[rule.score], dtype=np.float64)  # (S, L, H)
        if score.ndim != 3 or score.shape[0] != len(steps):
            raise ValueError(f"{rule.score!r} scores have shape {score.shape}; expected ({len(steps)}, n_layers, n_heads)")
        if not np.isfinite(score).all():
            raise ValueError(f"{rule.score!r} has non-finite scores; recompute the forward lens's rows")
        above = score >= rule.threshold
        holds = hysteresis(score, enter=rule.threshold, exit=rule.exit)
        typed, emerged = type_frames(name, steps, score, np.full(score.shape, rule.null), above, holds)
        types.append(typed)
        emergence.append(emerged)
    return sorted_frames(types, emergence)


def type_frames(
    name: str, steps: np.ndarray, score: np.ndarray, null: np.ndarray, above: np.ndarray, holds: np.ndarray
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One type's rows of ``head_types.parquet`` and ``head_emergence.parquet``, from ``(S, n_layers, n_heads)``
    arrays over the checkpoints ``steps`` it is decided at: its score, its null (per row), whether the score reaches
    the threshold there (``above``) and whether the head holds the type (``holds``)."""
    s, n_layers, n_heads = score.shape
    layer, head = _head_columns((n_layers, n_heads))
    typed = pd.DataFrame(
        {
            "step": np.repeat(steps, n_layers * n_heads),
            "layer": np.tile(layer, s),
            "head": np.tile(head, s),
            "type": name,
            "score": score.reshape(-1),
            "null": null.reshape(-1),
            "ratio": score.reshape(-1) / null.reshape(-1),
            "above": above.reshape(-1),
            "holds": holds.reshape(-1),
        }
    )
    emerged, first = emergence_index(holds).reshape(-1), first_index(above).reshape(-1)
    flat = score.reshape(s, -1)
    peak = np.where(np.isnan(flat), -np.inf, flat).argmax(axis=0) if s else np.zeros(n_layers * n_heads, dtype=np.int64)
    emergence = pd.DataFrame(
        {
            "layer": layer,
            "head": head,
            "type": name,
            "emergence_step": pd.array(np.where(emerged >= 0, steps[np.maximum(emerged, 0)], 0), dtype="Int64"),
            "first_step": pd.array(np.where(first >= 0, steps[np.maximum(first, 0)], 0), dtype="Int64"),
            "peak_score": flat[peak, np.arange(flat.shape[1])] if s else np.nan,
            "peak_step": steps[peak] if s else 0,
            "final_score": flat[-1] if s else np.nan,
        }
    )
    emergence.loc[emerged < 0, "emergence_step"] = pd.NA
    emergence.loc[first < 0, "first_step"] = pd.NA
    return typed, emergence


def sorted_frames(types: list[pd.DataFrame], emergence: list[pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Types' rows concatenated, each table in its sort order."""
    typed = pd.concat(types, ignore_index=True).sort_values(list(HEAD_TYPES_TABLE.sort), kind="stable")
    emerged_frame = pd.concat(emergence, ignore_index=True).sort_values(list(HEAD_EMERGENCE.sort), kind="stable")
    return typed.reset_index(drop=True), emerged_frame.reset_index(drop=True)


def types_held(types: pd.DataFrame, step: int) -> pd.DataFrame:
    """The types each head holds at ``step``, as one comma-separated string per head in `HEAD_TYPES` order
    (empty: none): a frame of ``layer``, ``head``, ``types`` from ``head_types.parquet`` rows."""
    at = types[(types["step"] == step) & types["holds"]]
    order = {name: i for i, name in enumerate(HEAD_TYPES)}
    at = at.assign(order=at["type"].map(order)).sort_values(["layer", "head", "order"])
    return at.groupby(["layer", "head"], as_index=False)["type"].agg(", ".join).rename(columns={"type": "types"})


def type_counts(types: pd.DataFrame) -> pd.DataFrame:
    """How many heads hold each type at each checkpoint: ``step``, ``type``, ``heads`` (every step and type,
    zeros included) from ``head_types.parquet`` rows."""
    counts = types.groupby(["step", "type"])["holds"].sum().astype(np.int64).rename("heads").reset_index()
    return counts
