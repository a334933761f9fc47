"""What the Refined LLC view computes before it draws: the estimates at the checkpoints that have them, the heads'
clusters and their sizes, the flag counts per checkpoint and the negative estimates, one estimate's chain traces, and
the tables its charts export."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.llc.diagnostics import FLAGS, NEGATIVE_NOTE
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.llc import (
    LLC,
    LLC_CHAINS,
    LLC_DATA_BUILT_IN,
    LLC_DATA_COLUMN,
    LLC_DATA_NAMES,
    LLC_WHOLE_MODEL,
    default_llc_data,
    llc_data_order,
)
from headwatch.analysis.trajectories.maps import Normalisation, kmeans, normalise, trajectories
from headwatch.dashboard import export
from headwatch.dashboard.labels import LLC_STAT


def sampler_name(record: Mapping[str, Any]) -> str:
    """Who made a store's refined LLCs, from its meta.json ``llc`` record: devinterp with its version, or the batched
    sampler (whose record's ``devinterp``, in stores made before it was left out, names no sampler). A record without
    ``implementation`` predates the batched sampler: devinterp made it."""
    if record.get("implementation", "devinterp") == "devinterp":
        return f"devinterp {record.get('devinterp', '?')} SGLD"
    return (
        "SGLD by the batched sampler (`--llc-implementation batched`: devinterp's estimator and settings, a layer's "
        "heads and their chains sampled together)"
    )


def missing_note(*, source: str | None, store: str, eval_length: int | None, shipped: bool) -> str:
    """What the page says of a store without refined LLCs: the rerun that adds them and the command that prices it
    for this store (``source``: where meta.json says it was made from; ``store``: its path as the reader would type
    it; ``eval_length``: the evaluation length its forward lenses used, which the sampler's sequences share); with
    ``shipped``, that the shipped runs' short-chain estimates were removed and where the docs say why and what a
    rerun costs.

    Returns:
        Markdown, one paragraph (two with ``shipped``).
    """
    src = source or "SOURCE"
    length = f" --eval-length {eval_length}" if eval_length else ""
    where = (
        f" (`{src}`: the checkpoints this store was made from, as its meta.json records them from the folder the job ran in)."
        if source
        else "."
    )
    note = (
        "This store has no refined LLCs (llc.parquet). A rerun of the precompute job adds them and leaves the store's "
        f"other tables as they are: `python -m headwatch.precompute --source {src} --out {store} --lenses llc{length}` "
        "estimates every head's refined local learning coefficient and the whole model's with SGLD at about 8 "
        "log-spaced checkpoints (`--llc-steps all` or a list of steps chooses others; `--eval-text FILE` for a model "
        f"not trained here). What it would cost on this machine: `headwatch plan {src} --out {store} --lenses llc{length}`"
        + where
    )
    if shipped:
        note += (
            "\n\nThe shipped plain-text runs carry none on purpose: their refined LLCs of 2 chains x 8 draws were "
            "removed as too short to rank heads, and the pass that estimates them under today's defaults was not run "
            'to the end. docs/reference-run.md ("What the refined LLC showed") says what was removed, what that pass '
            "took on a GPU and what the rerun takes on a CPU. Their checkpoints are not shipped: `bash "
            "scripts/reference-run.sh` (`SEED=2` for the second seed) trains the run again into `runs/`, after which the "
            "commands above run as written. Their estimates under the training distribution, the probe's repeats, code "
            "and the held-out text (`--llc-data train,text,repeats,code`) are left to a GPU (about 38 CPU-hours here): "
            "`bash scripts/device-runs.sh start SECONDS` retrains the runs still owed (by default these two and induction-d512) "
            "and adds them (passes 2 and 3)."
        )
    return note


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


def distributions(store: Store) -> list[str]:
    """The distributions the store's refined LLCs were taken on (the ``data`` column; a store written before it: text),
    the default first (`default_llc_data`), then the built-in ones in their order, then a user's files by name."""
    table = store.read(LLC, columns=[])
    return llc_data_order(table) if table is not None else []


def estimates(store: Store, flagged: tuple[np.ndarray, np.ndarray] | None, data: str | None = None) -> Estimates:
    """The store's refined LLCs under the distribution ``data`` (None: the store's default) at the checkpoints that
    have them.

    Args:
        store: a store with ``llc.parquet``.
        flagged: every checkpoint's head and whole-model flags under ``data`` (`dashboard.derived.llc_flags`), or None.
        data: the distribution (`distributions`).
    """
    at: dict[str, int | str] = {LLC_DATA_COLUMN: data} if data is not None else {}
    whole: dict[str, int | str] = {**LLC_WHOLE_MODEL, **at}
    steps = [int(s) for s in store.steps]
    idx = np.array([steps.index(int(s)) for s in store.steps_with(LLC, at=at)], dtype=np.int64)
    flags, model_flags = (flagged[0][idx], flagged[1][idx]) if flagged is not None else (None, None)
    return Estimates(
        idx=idx,
        steps=store.steps[idx],
        values=store.require(LLC, "llc", at=at)[idx],  # (E, n_layers, n_heads)
        stds=store.require(LLC, "llc_std", at=at)[idx],
        model=store.require(LLC, "llc", at=whole)[idx],
        model_std=store.require(LLC, "llc_std", at=whole)[idx],
        model_init_loss=store.require(LLC, "init_loss", at=whole)[idx],
        flags=flags,
        model_flags=model_flags,
    )


def clusters(values: np.ndarray, *, k: int, norm: Normalisation) -> np.ndarray:
    """Each head's cluster (``(n_layers * n_heads,)``, layer-major): k-means (deterministic starts) of its
    curve ``values[:, layer, head]`` normalised by ``norm``, as the refined-LLC paper clusters heads."""
    return kmeans(normalise(trajectories(values), norm), k)  # (n_layers * n_heads, E) -> labels


def cluster_names(labels: np.ndarray) -> list[str]:
    """The clusters' names (``cluster 1``, ...), one per cluster of ``labels`` (`clusters`)."""
    return [f"cluster {c + 1}" for c in range(int(labels.max()) + 1)]


def cluster_sizes(labels: np.ndarray, names: list[str]) -> str:
    """How many heads each cluster holds, in words (``cluster 1: 5 heads, ...``)."""
    return ", ".join(f"{name}: {int((labels == c).sum())} heads" for c, name in enumerate(names))


def clusters_csv(run: str, labels: np.ndarray, *, n_layers: int, n_heads: int) -> pd.DataFrame:
    """Every head's cluster (numbered from 1) as rows, layer-major."""
    return pd.DataFrame(
        {
            "run": run,
            "layer": np.repeat(np.arange(n_layers), n_heads),
            "head": np.tile(np.arange(n_heads), n_layers),
            "cluster": labels + 1,
        }
    )


def model_csv(run: str, est: Estimates) -> pd.DataFrame:
    """The whole model's estimates as rows: step, estimate, its spread over chains and the loss at w*."""
    return pd.DataFrame(
        {
            "run": run,
            "step": est.steps,
            "llc": est.model,
            "llc_std": est.model_std,
            "init_loss": est.model_init_loss,
        }
    )


def negative_warnings(est: Estimates) -> list[str]:
    """What the page warns of the negative estimates: the heads' (the first six named) and the whole model's steps."""
    warnings = []
    negative = np.argwhere(est.values < 0)  # (n, 3): estimate index, layer, head
    if len(negative):
        where = ", ".join(f"L{layer} H{head} at step {int(est.steps[t]):,}" for t, layer, head in negative[:6])
        more = f" and {len(negative) - 6} more" if len(negative) > 6 else ""
        warnings.append(f"{len(negative)} head estimates are negative ({where}{more}): {NEGATIVE_NOTE}.")
    if np.any(est.model < 0):
        warnings.append(
            f"The whole-model estimate is negative at step(s) "
            f"{', '.join(f'{int(s):,}' for s in est.steps[est.model < 0])}: {NEGATIVE_NOTE}."
        )
    return warnings


def flag_counts(est: Estimates) -> pd.DataFrame:
    """Per checkpoint, how many estimates (every head and the whole model) hold each flag (`FLAGS`: a negative
    estimate is counted ``negative``, never ``converged``).

    Needs the flags (``est.flags`` not None).
    """
    assert est.flags is not None and est.model_flags is not None
    e = len(est.idx)
    return pd.DataFrame(
        {"step": est.steps} | {f: [int((est.flags[t] == f).sum() + (est.model_flags[t] == f)) for t in range(e)] for f in FLAGS}
    )


WHOLE_MODEL = "whole model"  # the traces' target that is no head


def trace_targets(n_layers: int, n_heads: int) -> list[str]:
    """The estimates whose chains can be shown: the whole model, then every head (``L1H2``), layer-major."""
    return [WHOLE_MODEL] + [f"L{layer}H{head}" for layer in range(n_layers) for head in range(n_heads)]


def trace_target(target: str) -> tuple[int, int]:
    """``(layer, head)`` of a `trace_targets` entry, ``(-1, -1)`` for the whole model (as ``llc_chains.parquet``)."""
    return (-1, -1) if target == WHOLE_MODEL else (int(target[1:].split("H")[0]), int(target.split("H")[1]))


def chain_traces(store: Store, *, step: int, layer: int, head: int, data: str | None = None) -> tuple[np.ndarray, float | None]:
    """The SGLD loss traces ``(chains, draws)`` of one estimate (``layer = head = -1``: the whole model) at ``step``
    under the distribution ``data`` (None: the store's default), and the loss at w* (None when the store has none)."""
    chains = store.frame(LLC_CHAINS)
    assert chains is not None, "the chains' traces are read only where their flags were (llc_chains.parquet)"
    table = store.frame(LLC)
    assert table is not None, "the Refined LLC page reads a store with llc.parquet"
    data = data if data is not None else default_llc_data(table[LLC_DATA_COLUMN].tolist())
    chains = chains[chains[LLC_DATA_COLUMN] == data]
    table = table[table[LLC_DATA_COLUMN] == data]
    rows = chains[(chains["step"] == step) & (chains["layer"] == layer) & (chains["head"] == head)].sort_values("chain")
    trace = np.array([np.asarray(t, dtype=np.float64) for t in rows["trace"]])
    init = table[(table["step"] == step) & (table["layer"] == layer) & (table["head"] == head)]["init_loss"]
    return trace, (float(init.iloc[0]) if len(init) else None)


def heads_csv(run: str, est: Estimates, labels: np.ndarray) -> pd.DataFrame:
    """Every head's estimates as tidy rows, with their spread over chains and the head's cluster."""
    rows = export.tidy(est.values, est.steps, run=run, statistic=LLC_STAT, matrix="llc")
    e = len(est.idx)
    return rows.assign(llc_std=est.stds.reshape(e, -1).ravel(), cluster=np.tile(labels + 1, e))


def traces_csv(run: str, trace: np.ndarray, *, step: int, layer: int, head: int) -> pd.DataFrame:
    """One estimate's chains (``trace``: ``(chains, draws)``) as tidy rows, one per chain and SGLD step."""
    return pd.DataFrame(
        [
            {"run": run, "step": step, "layer": layer, "head": head, "chain": c, "sgld_step": k, "loss": v}
            for c, tr in enumerate(trace)
            for k, v in enumerate(tr)
        ]
    )


def distribution_curves(store: Store, *, layer: int, head: int) -> pd.DataFrame:
    """One estimate (a head, or the whole model at ``layer = head = -1``) under every distribution the store holds:
    rows ``data``, ``step``, ``llc``, ``llc_std``, in `distributions`' order, then by step."""
    table = store.frame(LLC)
    assert table is not None, "the Refined LLC page reads a store with llc.parquet"
    shown = {int(s) for s in store.steps}
    rows = table[(table["layer"] == layer) & (table["head"] == head) & table["step"].isin(shown)]
    order = {name: i for i, name in enumerate(distributions(store))}
    rows = rows.assign(_order=rows[LLC_DATA_COLUMN].map(order)).sort_values(["_order", "step"])
    return rows[[LLC_DATA_COLUMN, "step", "llc", "llc_std"]].reset_index(drop=True)


def distribution_ratios(curves: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Each other distribution's estimate over ``reference``'s at the steps both have (`distribution_curves`' rows):
    rows ``data``, ``step``, ``ratio``; NaN where the reference's estimate is 0."""
    ref = curves[curves[LLC_DATA_COLUMN] == reference].set_index("step")["llc"]
    others = curves[(curves[LLC_DATA_COLUMN] != reference) & curves["step"].isin(ref.index)]
    denominator = ref.reindex(others["step"]).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(denominator != 0, others["llc"].to_numpy() / denominator, np.nan)
    return pd.DataFrame({LLC_DATA_COLUMN: others[LLC_DATA_COLUMN].to_numpy(), "step": others["step"].to_numpy(), "ratio": ratio})


def distribution_label(name: str) -> str:
    """How the page names a distribution: its name and, for a built-in one, what it is."""
    about = LLC_DATA_BUILT_IN.get(name)
    return f"{name}: {about.split(':')[0].split(' (')[0]}" if about else f"{name} (a user's file)"


def only_one_note(held: list[str], *, source: str | None, store: str, eval_length: int | None) -> str:
    """What the page says of a store whose estimates are under one distribution only (a shipped store: held-out
    text): which one, and the rerun that adds the others beside it."""
    src = source or "SOURCE"
    length = f" --eval-length {eval_length}" if eval_length else ""
    others = ",".join(n for n in LLC_DATA_NAMES if n not in held)
    return (
        f"This store holds refined LLCs under one distribution only, **{held[0]}** "
        f"({LLC_DATA_BUILT_IN.get(held[0], 'a user file').split(';')[0]}). On the run's training distribution the "
        "refined LLC is the weight-refined one; on any other it is data-refined, and the study compares them (an "
        "induction head's estimate rises on data full of repeats). A rerun adds the others beside these estimates, "
        f"which it leaves as they are: `python -m headwatch.precompute --source {src} --out {store} --lenses llc "
        f"--llc-data {others}{length}`; `headwatch plan {src} --out {store} --lenses llc --llc-data {others}{length}` "
        "prices it first."
    )
