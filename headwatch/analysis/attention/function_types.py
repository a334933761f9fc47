"""Head types by what ablating a head costs (docs/head-types.md): multigram heads and "other" heads.

The refined-LLC study of attention heads names the heads that are neither previous-token, current-token nor induction
heads "multigram heads", because ablating them mostly hurts the prediction of multigrams (its section 4 and appendix
B.5, which counts a token in context as an n-gram when the sequence from the max-attention token to the next token
recurs among the head's tokens in context). Here the name is earned, not given: a head is

- **measurable** at a checkpoint when mean-ablating it raises the loss on the evaluation text by at least
  ``max(FLOOR, K x standard error)`` (`measurable_level`): K standard errors so that an effect indistinguishable from
  the sampling noise of the evaluation sequences is not counted (one-sided, about 1 in 700 for a normal error),
  and a floor in nats so that a tiny effect measured very precisely is not counted either. The same hysteresis as
  the attention types keeps it measurable until the effect falls below ``EXIT_FRACTION`` of that level;
- **untyped** there when it holds none of the attention types (`analysis.attention.head_types`);
- a **multigram** head there when it is measurable and untyped and its top tokens in context (head_contexts.parquet)
  are shown to continue frequent n-grams of the training text (`multigram_rule`), and an **other** head when it is
  measurable and untyped but they are not.

The n-gram rule. In a sample of the training text, for each order ``n`` in `NGRAM_ORDERS` the **frequent** n-grams are
the most frequent ones that together make up `COVERAGE` of the sample's n-gram occurrences (`ngram_counts`). A token in
context is **explained** when the n-gram of its window that ends at the target token is frequent for some order
(`NgramCounts.explained_order`). The share of explained positions of the sample itself is the **base rate** ``p0`` (a
token taken at random from the text). A head is a multigram head when at least `MIN_SHARE` of its ``m`` contexts are
explained and the count ``k`` of explained ones is improbable at the base rate: the binomial tail
``P(X >= k | m, p0) <= ALPHA``. Its contexts are thus continuations of frequent n-grams more often than the text's own
tokens are. The decision is made at the checkpoints with tokens in context only.

Tokens are compared as head_contexts.parquet stores them, each decoded alone (`intern`): two ids with the same text
count as one token. Every function takes arrays and returns arrays or records; nothing here reads a store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.attention.head_types import EXIT_FRACTION, hysteresis, type_frames

# An ablation effect counts when it is at least 3 standard errors above zero (one-sided, about 0.13% of null heads
# per checkpoint under a normal error: 0.06 of a 48-head model's heads) ...
K_SE = 3.0
# ... and at least 0.01 nats per token: with 32 x 63 predicted tokens the standard error of a head's effect can fall
# to 1e-4 nats, where 3 standard errors would count an effect of a twentieth of a percent of a 2-nat loss.
FLOOR = 0.01
NGRAM_ORDERS = (2, 3, 4)  # the n-grams ending at a target token that may explain it
# The frequent n-grams of an order: the most frequent ones making up a quarter of its occurrences. A quarter keeps
# the base rate (any order) near a half on byte-level English, so that 20 contexts can show a head beats it.
COVERAGE = 0.25
MIN_SHARE = 0.5  # at least half of a head's contexts are explained ...
ALPHA = 0.05  # ... and that many are improbable at the base rate (binomial tail)
# Only a head's contexts on the evaluation text count: a probe context's tokens are random, so it can never continue
# an n-gram of the training text. The ablation lens keeps a head's top 20 contexts pooled over the text and the
# probe; a head with fewer than MIN_TEXT_CONTEXTS of them on the text is not judged (at a base rate of a half, even
# 4 of 4 explained has a binomial tail of 0.0625 > ALPHA) and is an other head.
MIN_TEXT_CONTEXTS = 5
# The training-text sample: seeded non-overlapping windows of SAMPLE_WINDOW tokens, SAMPLE_TOKENS in all (the whole
# text when it is shorter).
SAMPLE_TOKENS = 1 << 21
SAMPLE_WINDOW = 4096
SAMPLE_SEED = 0

FUNCTION_RULE = (
    "A head that holds no attention type at a checkpoint with tokens in context and whose mean ablation raises the "
    "loss on the evaluation text by at least max({floor} nats, {k} x its standard error) (hysteresis: it stays so "
    "until the effect falls below {exit_fraction:.4g} of that level) is a multigram head when at least {share:.0%} "
    "of its top tokens in context continue a frequent n-gram of the training text (n = {orders}: the n-gram of its "
    "window ending at the target is among the most frequent of its order that make up {coverage:.0%} of the "
    "sample's occurrences) and that count has a binomial tail probability of at most {alpha} at the base rate (the "
    "share of the sample's own tokens that do); otherwise it is an other head."
)


def rule_text() -> str:
    """`FUNCTION_RULE` with the module's constants."""
    return FUNCTION_RULE.format(
        floor=FLOOR,
        k=K_SE,
        exit_fraction=EXIT_FRACTION,
        share=MIN_SHARE,
        orders=", ".join(map(str, NGRAM_ORDERS)),
        coverage=COVERAGE,
        alpha=ALPHA,
        min_text=MIN_TEXT_CONTEXTS,
    )


def measurable_level(sem: np.ndarray, *, floor: float = FLOOR, k: float = K_SE) -> np.ndarray:
    """The smallest ablation effect that counts: ``max(floor, k x sem)`` elementwise (NaN where ``sem`` is)."""
    sem = np.asarray(sem, dtype=np.float64)
    return np.where(np.isnan(sem), np.nan, np.maximum(floor, k * sem))


def measurable(increase: np.ndarray, sem: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whether each head's ablation effect counts at each checkpoint: ``(S, ...)`` arrays in, ``(level, above,
    holds)`` out: the level (`measurable_level`), the effect reaching it there, and the hysteresis rule over the
    checkpoints (enter at the level, leave below `EXIT_FRACTION` of it). A NaN effect counts nowhere."""
    level = measurable_level(sem)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.asarray(increase, dtype=np.float64) / level
    holds = hysteresis(ratio, enter=1.0, exit=EXIT_FRACTION)
    with np.errstate(invalid="ignore"):
        above = ratio >= 1.0
    return level, above, holds


def intern(tokens: Sequence[str], index: dict[str, int]) -> np.ndarray:
    """Token texts as integer codes, ``index`` mapping each text seen to its code (extended in place): ``(n,)``
    int64."""
    return np.array([index.setdefault(t, len(index)) for t in tokens], dtype=np.int64)


def lookup(tokens: Sequence[str], index: dict[str, int]) -> np.ndarray:
    """Token texts as the codes of ``index``, -1 for a text the sample never had (no n-gram of it is frequent)."""
    return np.array([index.get(t, -1) for t in tokens], dtype=np.int64)


def _rows(segments: Sequence[np.ndarray], n: int) -> np.ndarray:
    """Every n-gram inside each segment (none across a boundary), ``(M, n)`` int64."""
    parts = [np.lib.stride_tricks.sliding_window_view(s, n) for s in segments if len(s) >= n]
    return np.concatenate(parts) if parts else np.zeros((0, n), dtype=np.int64)


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True, return_counts=True)`` of non-negative codes, each row packed
    into one int64 (mixed radix, lexicographic order kept) where the codes fit, which sorts far faster."""
    base = int(rows.max()) + 1 if rows.size else 1
    if base ** rows.shape[1] >= 2**62:
        return np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    packed = np.zeros(len(rows), dtype=np.int64)
    for column in rows.T:
        packed = packed * base + column
    _, first, inverse, counts = np.unique(packed, return_index=True, return_inverse=True, return_counts=True)
    return rows[first], inverse, counts


@dataclass(frozen=True)
class NgramCounts:
    """The frequent n-grams of a sample of text.

    Attributes:
        frequent: order n -> the frequent n-grams (tuples of codes) -> their count in the sample.
        coverage: the share of an order's occurrences its frequent n-grams make up, at least.
        base_rate: the share of the sample's tokens (every one with a token before it) that an order's frequent
            n-gram explains.
        tokens: the sample's tokens.
        distinct: order n -> how many distinct n-grams the sample has.
    """

    frequent: dict[int, dict[tuple[int, ...], int]]
    coverage: float
    base_rate: float
    tokens: int
    distinct: dict[int, int]

    def explained_order(self, window: np.ndarray) -> tuple[int, int]:
        """The longest order whose n-gram ending at the window's last token (the target) is frequent, and its count
        in the sample: ``(0, 0)`` when none is."""
        for n in sorted(self.frequent, reverse=True):
            if len(window) >= n:
                count = self.frequent[n].get(tuple(int(c) for c in window[-n:]))
                if count is not None:
                    return n, count
        return 0, 0


def ngram_counts(
    segments: Sequence[np.ndarray], *, orders: Sequence[int] = NGRAM_ORDERS, coverage: float = COVERAGE
) -> NgramCounts:
    """The frequent n-grams of each order of a sample and the sample's base rate.

    For each order, the distinct n-grams sorted by count (largest first; a tie by the n-gram's codes), the frequent
    ones are the shortest prefix of that list whose counts sum to at least ``coverage`` of the order's occurrences.

    Args:
        segments: the sample's pieces of text as codes (`intern`), each ``(n_i,)``; no n-gram spans two.
        orders: the n-gram lengths, each at least 2.
        coverage: in (0, 1].

    Raises:
        ValueError: an order below 2, a coverage outside (0, 1], or a sample with no n-gram of the lowest order.
    """
    if not orders or min(orders) < 2:
        raise ValueError(f"n-gram orders {list(orders)}: each must be at least 2 (a token and the target)")
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage {coverage!r}: expected a share of the occurrences in (0, 1]")
    segments = [np.asarray(s, dtype=np.int64) for s in segments]
    frequent: dict[int, dict[tuple[int, ...], int]] = {}
    distinct: dict[int, int] = {}
    explained = [np.zeros(len(s), dtype=bool) for s in segments]  # per token: some order explains it
    for n in orders:
        rows = _rows(segments, n)
        if len(rows) == 0:
            if n == min(orders):
                raise ValueError(f"the n-gram sample has no {n}-gram: it needs texts of at least {n} tokens")
            frequent[n], distinct[n] = {}, 0
            continue
        unique, inverse, counts = _unique_rows(rows)
        order = np.argsort(-counts, kind="stable")  # ties in np.unique's (lexicographic) order
        cumulative = np.cumsum(counts[order])
        keep = order[: int(np.searchsorted(cumulative, coverage * cumulative[-1] - 1e-9)) + 1]
        frequent[n] = {tuple(int(c) for c in unique[i]): int(counts[i]) for i in keep}
        distinct[n] = len(unique)
        is_frequent = np.zeros(len(unique), dtype=bool)
        is_frequent[keep] = True
        hits = is_frequent[np.asarray(inverse).reshape(-1)]
        at = 0
        for s, flags in zip(segments, explained, strict=True):
            m = max(len(s) - n + 1, 0)
            flags[n - 1 :] |= hits[at : at + m]
            at += m
    eligible = sum(max(len(s) - 1, 0) for s in segments)  # tokens with one before them: an order-2 n-gram ends there
    base = sum(int(flags[1:].sum()) for flags in explained) / eligible
    return NgramCounts(frequent, coverage, base, sum(len(s) for s in segments), distinct)


def binomial_tail(k: int, m: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(m, p)``, summed exactly."""
    if k <= 0:
        return 1.0
    if k > m:
        return 0.0
    return float(sum(math.comb(m, j) * p**j * (1 - p) ** (m - j) for j in range(k, m + 1)))


@dataclass(frozen=True)
class MultigramDecision:
    """One head's contexts against the n-gram rule: ``explained`` of ``contexts``, the binomial tail ``p_value`` at
    the base rate, and whether that makes it a multigram head."""

    explained: int
    contexts: int
    p_value: float
    multigram: bool
    too_few: bool = False  # fewer than the minimum of contexts: not judged, an other head

    @property
    def share(self) -> float:
        return self.explained / self.contexts if self.contexts else float("nan")


def multigram_rule(
    explained: np.ndarray,
    base_rate: float,
    *,
    min_share: float = MIN_SHARE,
    alpha: float = ALPHA,
    min_contexts: int = MIN_TEXT_CONTEXTS,
) -> MultigramDecision:
    """Whether a head's contexts (its text contexts: `MIN_TEXT_CONTEXTS`) show it serves frequent n-grams: at least
    ``min_share`` of them explained, and as many explained is improbable at the base rate
    (``P(X >= k | m, base_rate) <= alpha``); fewer than ``min_contexts`` of them: not judged (``too_few``), no.

    Args:
        explained: ``(m,)`` bool, whether each of the head's contexts is explained (`NgramCounts.explained_order` > 0).
        base_rate: `NgramCounts.base_rate`.

    Raises:
        ValueError: a base rate outside [0, 1].
    """
    if not 0 <= base_rate <= 1:
        raise ValueError(f"base rate {base_rate!r}: expected a share in [0, 1]")
    flags = np.asarray(explained, dtype=bool)
    m, k = int(flags.size), int(flags.sum())
    p_value = binomial_tail(k, m, base_rate)
    too_few = m < min_contexts
    return MultigramDecision(k, m, p_value, bool(not too_few and k >= min_share * m and p_value <= alpha), too_few)


def function_type_frames(
    steps: np.ndarray,
    increase: np.ndarray,
    sem: np.ndarray,
    context_index: np.ndarray,
    untyped: np.ndarray,
    multigram: np.ndarray,
) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """The ``multigram`` and ``other`` rows of ``head_types.parquet`` and ``head_emergence.parquet``.

    Args:
        steps: the checkpoints with ablation rows, ascending, ``(S,)``.
        increase: ``(S, n_layers, n_heads)`` the loss increase on the text when each head is ablated (nats).
        sem: its standard error, same shape.
        context_index: ``(C,)`` the indices into ``steps`` of the checkpoints with tokens in context, ascending.
        untyped: ``(C, n_layers, n_heads)`` bool, the head holds no attention type there.
        multigram: ``(C, n_layers, n_heads)`` bool, its contexts pass `multigram_rule` there.

    Returns:
        Per type, its rows of the two tables at the ``C`` checkpoints (`analysis.attention.head_types.type_frames`):
        score the loss increase, null the measurable level, above/holds the rule at that checkpoint alone / with the
        hysteresis of the effect over every checkpoint with ablation rows.

    Raises:
        ValueError: shapes that disagree, or context indices outside ``steps`` or not ascending.
    """
    steps = np.asarray(steps, dtype=np.int64)
    increase, sem = np.asarray(increase, dtype=np.float64), np.asarray(sem, dtype=np.float64)
    context_index = np.asarray(context_index, dtype=np.int64)
    if increase.shape != sem.shape or increase.ndim != 3 or increase.shape[0] != len(steps):
        raise ValueError(f"ablation effects {increase.shape} and errors {sem.shape}: expected ({len(steps)}, layers, heads)")
    inside = not len(context_index) or (context_index.min() >= 0 and context_index.max() < len(steps))
    if not inside or np.any(np.diff(context_index) <= 0):
        raise ValueError(f"context checkpoints {context_index.tolist()} are not ascending indices of the {len(steps)} steps")
    shape = (len(context_index), *increase.shape[1:])
    if np.shape(untyped) != shape or np.shape(multigram) != shape:
        raise ValueError(f"untyped {np.shape(untyped)} and multigram {np.shape(multigram)}: expected {shape}")
    level, above, holds = measurable(increase, sem)
    at = context_index
    untyped, multigram = np.asarray(untyped, dtype=bool), np.asarray(multigram, dtype=bool)
    types, emergence = [], []
    for name, fits in (("multigram", multigram), ("other", ~multigram)):
        typed, emerged = type_frames(
            name,
            steps[at],
            increase[at],
            level[at],
            above[at] & untyped & fits,
            holds[at] & untyped & fits,
        )
        types.append(typed)
        emergence.append(emerged)
    return types, emergence
