"""Composition's paths through a model: which pairs of heads an induction circuit can run through at each step, the
one each induction head runs through (its strongest previous-token source by K-composition), and a head's strongest
partners over training (the Circuits page).

A path is a source head A that holds the previous-token type and a target head B in a later layer that holds the
induction type at the same checkpoint (head_types.parquet; docs/head-types.md): the pair K-composition joins in an
induction circuit. Heads are numbered layer-major, ``index = layer * n_heads + head``, as the composition matrices
(`dashboard.views.circuits.data.pair_matrix`: rows the targets B, columns the sources A) number them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from headwatch.analysis.findings.held_types import TYPE_LABELS
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.types import HEAD_TYPES, HEAD_TYPES_TABLE

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
    held = _held(store)
    if held is None:
        return None
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


def types_at(store: Store, steps: list[int]) -> list[list[str]] | None:
    """Per step of ``steps``, per head (layer-major), the types it holds there in words (``previous-token, induction``;
    ``""``: none), from head_types.parquet; None when the store has no head types."""
    held = _held(store)
    if held is None:
        return None
    out = []
    for step in steps:
        names: list[list[str]] = [[] for _ in range(store.n_layers * store.n_heads)]
        now = held[held["step"] == step]
        for kind in HEAD_TYPES:
            rows = now[now["type"] == kind]
            for layer, head in zip(rows["layer"], rows["head"], strict=True):
                names[int(layer) * store.n_heads + int(head)].append(TYPE_LABELS.get(kind, kind))
        out.append([", ".join(n) for n in names])
    return out


def strongest_paths(paths: list[np.ndarray], k_matrix: np.ndarray) -> list[np.ndarray]:
    """Per step, the path each induction head runs through: of its previous-token sources (`induction_paths`), the one
    with the largest K-composition there.

    Args:
        paths: per step, ``(P, 2)`` (source, target) layer-major pairs.
        k_matrix: ``(S, N targets, N sources)`` K-composition scores at the same steps (`pair_matrix`), NaN unstored.

    Returns:
        Per step, ``(P', 2)`` (source, target) pairs, one per induction head with a finite score, by target.
    """
    out = []
    for pairs, scores in zip(paths, k_matrix, strict=True):
        best: dict[int, tuple[float, int]] = {}
        for source, target in pairs:
            value = float(scores[target, source])
            if np.isfinite(value) and (target not in best or value > best[target][0]):
                best[int(target)] = (value, int(source))
        out.append(np.array([(best[t][1], t) for t in sorted(best)], dtype=np.int64).reshape(-1, 2))
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


def _held(store: Store) -> pd.DataFrame | None:
    """head_types.parquet's rows where a head holds its type, or None when the store has no head types."""
    types = store.frame(HEAD_TYPES_TABLE, columns=["holds"]) if store.has(HEAD_TYPES_TABLE) else None
    return None if types is None else types[types["holds"]]
