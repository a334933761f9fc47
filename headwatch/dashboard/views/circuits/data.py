"""What the Circuits page computes before it draws: the steps with composition scores, the scores as a matrix of
target heads by source heads, each induction head's strongest previous-token source to ring, and the scores as tidy
tables.

Pure (no streamlit): the paths and partners themselves are `analysis.findings.paths`'; `views.circuits.page` calls
these.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.analysis.findings.paths import induction_paths, strongest_paths
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.composition import COMPOSITION


def composition_steps(store: Store) -> list[int]:
    """The store's steps with composition rows."""
    return [int(s) for s in store.steps_with(COMPOSITION)]


def rows_of(store: Store, steps: list[int]) -> list[int]:
    """Each of ``steps``' index into ``store.steps`` (the first axis of the store's arrays)."""
    return [int(np.searchsorted(store.steps, s)) for s in steps]


def pair_matrix(scores: np.ndarray) -> np.ndarray:
    """``(S, L, H, L, H)`` scores ``[step, layer_a, head_a, layer_b, head_b]`` -> ``(S, N, N)`` with rows the target
    heads B and columns the source heads A, both layer-major (N = L H)."""
    s, n_layers, n_heads = scores.shape[:3]
    n = n_layers * n_heads
    # (S, N sources, N targets) -> (S, N targets, N sources)
    return np.ascontiguousarray(scores.reshape(s, n, n).transpose(0, 2, 1))


def ringed_paths(store: Store, steps: list[int], at: list[int]) -> list[np.ndarray] | None:
    """Per step of ``steps`` (rows ``at`` of the store's arrays), each induction head's strongest previous-token source
    by K-composition, whatever composition is shown: ``(P, 2)`` (source index, target index) pairs
    (`analysis.findings.paths.strongest_paths`); None without head types."""
    paths = induction_paths(store, steps)
    if paths is None:
        return None
    return strongest_paths(paths, pair_matrix(store.require(COMPOSITION, "k")[at]))


def pairs_csv(run: str, scores: np.ndarray, steps: list[int], kind: str, divisor: float) -> pd.DataFrame:
    """Every stored pair at every shown step as tidy rows."""
    idx = np.argwhere(np.isfinite(scores))
    step_i, la, ha, lb, hb = idx.T
    values = scores[tuple(idx.T)]
    return pd.DataFrame(
        {
            "run": run,
            "composition": kind,
            "step": np.asarray(steps, dtype=np.int64)[step_i],
            "layer_a": la,
            "head_a": ha,
            "layer_b": lb,
            "head_b": hb,
            "score": values,
            "times_random": values / divisor if divisor != 1.0 else np.nan,
        }
    )


def partners_csv(run, steps, values, partners, n_heads, role, kind, layer, head) -> pd.DataFrame:
    """One head's strongest partners (``partners``, flat head indices) over training as tidy rows: ``values``
    ``(S, P)`` at ``steps``."""
    s, p = values.shape
    return pd.DataFrame(
        {
            "run": run,
            "head": f"L{layer} H{head}",
            "composition": kind,
            "role": role,
            "partner_layer": np.tile(np.asarray(partners) // n_heads, s),
            "partner_head": np.tile(np.asarray(partners) % n_heads, s),
            "step": np.repeat(np.asarray(steps, dtype=np.int64), p),
            "value": values.reshape(-1),
        }
    )
