"""The head types of a store as the views use them: which types each head holds at each shown step, when it
became each, and how many heads hold each type over training (`analysis.head_types`, docs/head-types.md).

Pure (no streamlit): read through the store's one accessor (`analysis.store.Store.dense`, `Store.frame`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.store import Store
from analysis.store.format import HEAD_EMERGENCE, HEAD_TYPES, HEAD_TYPES_TABLE

# How the views name a type, and the marker each gets on the heatmaps.
TYPE_LABELS = {"previous_token": "previous-token", "induction": "induction", "sink": "sink"}
TYPE_SYMBOLS = {"previous_token": "triangle-left", "induction": "diamond", "sink": "square"}


def missing_text(path: Any) -> str:
    """What a view says about a store without head types, with the command that adds them."""
    return (
        "This store has no head types (head_types.parquet, head_emergence.parquet). Add them with "
        f"`python -m precompute.lenses.types {path}`: it needs only the store's forward statistics "
        "(attention.parquet, from `python -m precompute --lenses attention`), no checkpoint."
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
    """

    steps: np.ndarray
    held: dict[str, np.ndarray]
    emergence: dict[str, np.ndarray]
    rules: dict[str, dict[str, Any]]

    def held_at(self, index: int) -> list[str]:
        """Per head, layer-major, the types it holds at step index ``index`` (``"previous_token, sink"``; ``""``: none)."""
        n = self.held[HEAD_TYPES[0]][index].size
        names: list[list[str]] = [[] for _ in range(n)]
        for name in HEAD_TYPES:
            for i in np.flatnonzero(self.held[name][index].ravel()):
                names[i].append(name)
        return [", ".join(t) for t in names]

    def counts(self) -> dict[str, np.ndarray]:
        """Type -> ``(S,)`` how many heads hold it at each step."""
        return {name: self.held[name].sum(axis=(1, 2)).astype(np.int64) for name in HEAD_TYPES}


def head_types(store: Store) -> HeadTypes | None:
    """The store's head types, or None when it has no head-type tables."""
    if not (store.has(HEAD_TYPES_TABLE) and store.has(HEAD_EMERGENCE)):
        return None
    held = {}
    for name in HEAD_TYPES:
        values = store.dense(HEAD_TYPES_TABLE, "holds", at={"type": name})
        assert values is not None
        held[name] = np.nan_to_num(values, nan=0.0) > 0.5
    frame = store.frame(HEAD_EMERGENCE)
    assert frame is not None
    emergence = {}
    for name in HEAD_TYPES:
        out = np.full((store.n_layers, store.n_heads), -1, dtype=np.int64)
        rows = frame[(frame["type"] == name) & frame["emergence_step"].notna()]
        out[rows["layer"].to_numpy(int), rows["head"].to_numpy(int)] = rows["emergence_step"].to_numpy(int)
        emergence[name] = out
    rules = dict(((store.meta.types or {}).get("types")) or {})
    return HeadTypes(np.asarray(store.steps), held, emergence, rules)
