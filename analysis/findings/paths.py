"""Composition's paths through a model: which pairs of heads an induction circuit can run through at each step, and
a head's strongest partners over training (the Circuits page).

A path is a source head A that holds the previous-token type and a target head B in a later layer that holds the
induction type at the same checkpoint (head_types.parquet; docs/head-types.md): the pair K-composition joins in an
induction circuit. Heads are numbered layer-major, ``index = layer * n_heads + head``, as the composition matrices
(`dashboard.figures.circuits.pair_matrix`: rows the targets B, columns the sources A) number them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from analysis.store import Store
from analysis.store.format import HEAD_TYPES_TABLE

Role = Literal["source", "target"]


def induction_paths(store: Store, steps: list[int]) -> list[np.ndarray] | None:
    """Per step of ``steps``, the (previous-token source, induction target) pairs both holding their type there.

    Args:
        store: the opened store.
        steps: the checkpoints asked about.

    Returns:
        One ``(P, 2)`` int64 array of (source, target) layer-major indices per step, the source in an earlier layer
        than the target (``(0, 2)`` at a step without such a pair); None when the store has no head types.
    """
    types = store.frame(HEAD_TYPES_TABLE, columns=["holds"]) if store.has(HEAD_TYPES_TABLE) else None
    if types is None:
        return None
    held = types[types["holds"]]
    out = []
    for step in steps:
        now = held[held["step"] == step]
        prev = now[now["type"] == "previous_token"]
        ind = now[now["type"] == "induction"]
        pairs = [
            (int(pl) * store.n_heads + int(ph), int(il) * store.n_heads + int(ih))
            for pl, ph in zip(prev["layer"], prev["head"], strict=True)
            for il, ih in zip(ind["layer"], ind["head"], strict=True)
            if pl < il
        ]
        out.append(np.array(pairs, dtype=np.int64).reshape(-1, 2))
    return out


def strongest(series: np.ndarray, top: int) -> list[int]:
    """Indices of the ``top`` columns of ``series`` ``(S, N)`` with the largest finite value at any step, largest
    first (ties in index order); columns without a finite value are never among them."""
    with np.errstate(all="ignore"):
        peak = np.where(np.isfinite(series), series, -np.inf).max(axis=0)
    order = [int(i) for i in np.argsort(-peak, kind="stable") if np.isfinite(peak[i])]
    return order[:top]


def partners(matrix: np.ndarray, own: int, *, role: Role, top: int) -> tuple[list[int], np.ndarray]:
    """One head's strongest partners over training.

    Args:
        matrix: ``(S, N targets, N sources)`` composition scores (`pair_matrix`), NaN where no pair is stored.
        own: the head's layer-major index.
        role: ``source``: the heads whose output it reads (its row); ``target``: the heads that read its output (its
            column).
        top: how many partners.

    Returns:
        The partners' layer-major indices, strongest first (`strongest`; empty for a head in the first layer asked
        for sources, or the last asked for targets), and their scores ``(S, len(partners))``.
    """
    series = matrix[:, own, :] if role == "source" else matrix[:, :, own]  # (S, N)
    picked = strongest(series, top)
    return picked, series[:, picked]
