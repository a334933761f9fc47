"""The Refined LLC page's data: the estimates at the checkpoints that have them, the heads' clusters, the flag
counts per checkpoint and one estimate's chain traces."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.llc_diagnostics import FLAGS
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import LLC, LLC_CHAINS, LLC_WHOLE_MODEL
from headwatch.analysis.trajectories import Normalisation, kmeans, normalise, trajectories
from headwatch.dashboard import export
from headwatch.dashboard.labels import LLC_STAT


@dataclass(frozen=True)
class Estimates:
    """The refined LLCs of a run at the E checkpoints with estimates.

    Attributes:
        idx: ``(E,)`` the checkpoints' indices among the run's steps.
        steps: ``(E,)`` their steps.
        values, stds: ``(E, n_layers, n_heads)`` every head's estimate and its spread over chains.
        model, model_std, model_init_loss: ``(E,)`` the whole model's estimate, spread and loss at w*.
        flags, model_flags: ``(E, n_layers, n_heads)`` and ``(E,)`` the chains' diagnostic flags, None without them.
    """

    idx: np.ndarray
    steps: np.ndarray
    values: np.ndarray
    stds: np.ndarray
    model: np.ndarray
    model_std: np.ndarray
    model_init_loss: np.ndarray
    flags: np.ndarray | None
    model_flags: np.ndarray | None


def estimates(store: Store, flagged: tuple[np.ndarray, np.ndarray] | None) -> Estimates:
    """The store's refined LLCs at the checkpoints that have them.

    Args:
        store: a store with ``llc.parquet``.
        flagged: every checkpoint's head and whole-model flags (`dashboard.loader.llc_flags`), or None.
    """
    steps = [int(s) for s in store.steps]
    idx = np.array([steps.index(int(s)) for s in store.steps_with(LLC)])
    flags, model_flags = (flagged[0][idx], flagged[1][idx]) if flagged is not None else (None, None)
    return Estimates(
        idx=idx,
        steps=store.steps[idx],
        values=store.require(LLC, "llc")[idx],  # (E, n_layers, n_heads)
        stds=store.require(LLC, "llc_std")[idx],
        model=store.require(LLC, "llc", at=LLC_WHOLE_MODEL)[idx],
        model_std=store.require(LLC, "llc_std", at=LLC_WHOLE_MODEL)[idx],
        model_init_loss=store.require(LLC, "init_loss", at=LLC_WHOLE_MODEL)[idx],
        flags=flags,
        model_flags=model_flags,
    )


def clusters(values: np.ndarray, *, k: int, norm: Normalisation) -> np.ndarray:
    """Each head's cluster (``(n_layers * n_heads,)``, layer-major): k-means, best of 10 seeded starts, of its
    curve ``values[:, layer, head]`` normalised by ``norm``, as the refined-LLC paper clusters heads."""
    return kmeans(normalise(trajectories(values), norm), k, seed=0)  # (n_layers * n_heads, E) -> labels


def flag_counts(est: Estimates) -> pd.DataFrame:
    """Per checkpoint, how many estimates (every head and the whole model) hold each flag, and how many are negative.

    Needs the flags (``est.flags`` not None).
    """
    assert est.flags is not None and est.model_flags is not None
    e = len(est.idx)
    return pd.DataFrame(
        {"step": est.steps}
        | {f: [(est.flags[t] == f).sum() + (est.model_flags[t] == f) for t in range(e)] for f in FLAGS}
        | {"negative": (est.values < 0).reshape(e, -1).sum(axis=1) + (est.model < 0)}
    )


def chain_traces(store: Store, *, step: int, layer: int, head: int) -> tuple[np.ndarray, float | None]:
    """The SGLD loss traces ``(chains, draws)`` of one estimate (``layer = head = -1``: the whole model) at ``step``,
    and the loss at w* (None when the store has none for it)."""
    chains = store.frame(LLC_CHAINS)
    assert chains is not None, "the chains' traces are read only where their flags were (llc_chains.parquet)"
    rows = chains[(chains["step"] == step) & (chains["layer"] == layer) & (chains["head"] == head)].sort_values("chain")
    trace = np.array([np.asarray(t, dtype=np.float64) for t in rows["trace"]])
    table = store.frame(LLC)
    assert table is not None, "the Refined LLC page reads a store with llc.parquet"
    init = table[(table["step"] == step) & (table["layer"] == layer) & (table["head"] == head)]["init_loss"]
    return trace, (float(init.iloc[0]) if len(init) else None)


def heads_csv(run: str, est: Estimates, labels: np.ndarray) -> pd.DataFrame:
    """Every head's estimates as tidy rows, with their spread over chains and the head's cluster."""
    rows = export.tidy(est.values, est.steps, run=run, statistic=LLC_STAT, matrix="llc")
    e = len(est.idx)
    return rows.assign(llc_std=est.stds.reshape(e, -1).ravel(), cluster=np.tile(labels + 1, e))
