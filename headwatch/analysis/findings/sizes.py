"""Across sizes: each run's size, its heads' emergence and its layers' consolidation, the joint trajectory
clusters of all the runs, and the timescales against the parameter count.

What ``headwatch compare`` writes and the Compare runs page's "Across sizes" section shows, computed once here:

- `size_table`: one row per run: its parameter count (`parameter_count`), checkpoints, last step and tokens,
  and per head type the first emergence step (`analysis.findings.comparison.emergence_table`) and the heads that
  hold the type at the end.
- `consolidation_table`: one row per run, layer and statistic: the layer's mean statistic over its heads, and
  the checkpoint by which it has made 90% of its total change for good (`analysis.across_sizes.scaling.consolidation_index`),
  as a step, tokens and a fraction of the run.
- `joint_clusters`: every head of every run on one time axis (`analysis.findings.comparison.joint_trajectories`),
  clustered together, the clusters tested against the types, the layers, the runs and a left-out run's types
  (`analysis.across_sizes.joint_clusters`); `association_table` and `joint_readings` say the tests of several statistics with
  their Monte Carlo error and Holm's correction over them, and the heads that break the match (`type_breaks`).
- `scaling_fits`: each emergence step and the first and last layers' consolidation steps against the parameter
  count (`analysis.across_sizes.scaling.fit_power_law`), or why three sizes say nothing.

A run is named by its store folder's name unless the caller names it. Stores are checked first
(`check_comparable`): a comparison needs two or more runs holding the statistics compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from headwatch.analysis.across_sizes.joint_clusters import TESTS, JointAssociation, joint_associate, judge_joint
from headwatch.analysis.across_sizes.scaling import PowerLaw, consolidation_index, fit_power_law
from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.comparison import common_grid, emergence_table, joint_trajectories
from headwatch.analysis.findings.held_types import TYPE_LABELS
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.types import HEAD_TYPES
from headwatch.analysis.store.meta import ModelInfo
from headwatch.analysis.trajectories.significance import MONTE_CARLO_LEVEL
from headwatch.analysis.trajectories.type_association import ASSOCIATION_STATS, PERMUTATIONS, end_types

JointAlign = Literal["fraction", "tokens"]
JOINT_ALIGNMENTS: dict[str, str] = {
    "fraction": "fraction of training (step / the run's last step)",
    "tokens": "tokens seen (up to the fewest any run has seen)",
}
SIZE_STATS = ASSOCIATION_STATS  # the study's weight statistics: D_KL, spectral entropy, sigma, stable rank
SIZE_STAT_TITLES = {  # how the tables, figures and sentences name them (statistic and unit)
    "kl_gauss": "D_KL(P(w) || Gaussian) (nats)",
    "spectral_entropy": "spectral entropy (nats)",
    "std": "σ of the entries",
    "stable_rank": "stable rank",
}
NO_TYPES = "no head types"


def parameter_count(model: ModelInfo, training: dict | None = None) -> int:
    """Non-embedding weight-matrix parameters: per layer the attention's query and output projections
    (``2 d_model n_heads d_head``), its keys and values (``2 d_model n_kv_heads d_head``), and the MLP's two
    matrices (``2 d_model d_mlp``). Embeddings, biases and LayerNorm gains are left out (the convention of
    scaling laws). ``d_mlp`` is read from the model's config (``n_inner``, ``intermediate_size``) or the
    training config, else taken as ``4 d_model``."""
    config = model.config or {}
    trained = ((training or {}).get("config") or {}).get("model") or {}
    d_mlp = config.get("n_inner") or config.get("intermediate_size") or trained.get("d_mlp") or 4 * model.d_model
    kv = model.n_kv_heads or model.n_heads
    attn = 2 * model.d_model * model.n_heads * model.d_head + 2 * model.d_model * kv * model.d_head
    return int(model.n_layers * (attn + 2 * model.d_model * int(d_mlp)))


def check_comparable(stores: dict[str, Store], *, matrix: str = "qk", statistics: tuple[str, ...] = SIZE_STATS) -> None:
    """Refuse a comparison that cannot be made, in one sentence.

    Raises:
        StoreError: fewer than two runs, a run with fewer than two checkpoints, or a run without ``matrix`` rows
            or one of ``statistics``.
    """
    if len(stores) < 2:
        names = ", ".join(stores) or "none"
        raise StoreError(f"a comparison needs at least two runs, got {len(stores)} ({names}); name two or more stores")
    for name, store in stores.items():
        if len(store.steps) < 2:
            raise StoreError(f"run {name} has {len(store.steps)} checkpoint(s): a trajectory needs at least two")
        if matrix not in store.meta.matrices:
            raise StoreError(
                f"run {name} has no {matrix} rows (its heads.parquet holds {', '.join(store.meta.matrices)}): compare "
                "stores with the same statistics, or choose a matrix they all hold"
            )
        missing = [s for s in statistics if not store.has_column(s)]
        if missing:
            raise StoreError(
                f"run {name} lacks {', '.join(missing)} (the other runs' statistics): compare stores with the same "
                "statistics, or recompute it with this version"
            )


def _tokens(store: Store) -> np.ndarray | None:
    return store.meta.tokens_at(store.steps)


def size_table(stores: dict[str, Store]) -> pd.DataFrame:
    """One row per run: parameters, checkpoints, last step, tokens at it, and per head type the first emergence
    step (empty: no head holds it at the end) and the heads holding it at the end (empty: no head types)."""
    emergence = emergence_table(stores)
    rows = []
    for name, store in stores.items():
        tokens = _tokens(store)
        row: dict[str, object] = {
            "run": name,
            "parameters": parameter_count(store.meta.model, store.meta.training),
            "layers": store.n_layers,
            "heads": store.n_layers * store.n_heads,
            "d_model": store.d_model,
            "checkpoints": len(store.steps),
            "last step": int(store.steps[-1]),
            "tokens": int(tokens[-1]) if tokens is not None else None,
        }
        mine = emergence[emergence["run"] == name]
        for t in HEAD_TYPES:
            label = TYPE_LABELS.get(t, t)
            at = mine[mine["type"] == label]
            row[f"{label} first step"] = at["first formed at step"].iloc[0] if len(at) else None
            row[f"{label} heads"] = int(at["heads at the end"].iloc[0]) if len(at) else None
        rows.append(row)
    table = pd.DataFrame(rows)
    # a type no run decides (the current-token score, multigram and other heads, absent from older stores) has no column
    undecided = [
        c
        for t in HEAD_TYPES
        for c in (f"{TYPE_LABELS.get(t, t)} first step", f"{TYPE_LABELS.get(t, t)} heads")
        if c in table and table[f"{TYPE_LABELS.get(t, t)} heads"].isna().all()
    ]
    if len(undecided) < 2 * len(HEAD_TYPES):  # some type is decided: leave out those none is (else say none is)
        table = table.drop(columns=undecided)
    ints = {c: "Int64" for c in table.columns if c.endswith(" first step") or c.endswith(" heads") or c == "tokens"}
    return table.astype(ints)


def consolidation_table(
    stores: dict[str, Store], *, matrix: str = "qk", statistics: tuple[str, ...] = SIZE_STATS
) -> pd.DataFrame:
    """One row per run, layer and statistic: when the layer's mean statistic (over its heads) consolidated
    (`analysis.across_sizes.scaling.consolidation_index`, share `CONSOLIDATION_SHARE`): ``step``, ``tokens``, ``fraction`` (of the
    run's last step), ``relative depth`` (layer / n_layers); empty where the mean has no total change."""
    rows = []
    for name, store in stores.items():
        tokens = _tokens(store)
        last = float(store.steps[-1])
        for stat in statistics:
            with np.errstate(all="ignore"):
                mean = np.nanmean(store.array(stat, matrix=matrix).astype(np.float64), axis=2)  # (S, n_layers)
            for layer in range(store.n_layers):
                i = consolidation_index(mean[:, layer])
                step = int(store.steps[i]) if i is not None else None
                rows.append(
                    {
                        "run": name,
                        "statistic": stat,
                        "layer": layer,
                        "relative depth": layer / store.n_layers,
                        "step": step,
                        "tokens": int(tokens[i]) if i is not None and tokens is not None else None,
                        "fraction": step / last if step is not None and last > 0 else None,
                    }
                )
    return pd.DataFrame(rows).astype({"step": "Int64", "tokens": "Int64", "fraction": "float64"})


@dataclass(frozen=True)
class JointClusters:
    """The joint trajectory clusters of several runs.

    Attributes:
        association: what the clusters follow (`analysis.across_sizes.joint_clusters.JointAssociation`).
        heads: one row per head: ``run``, ``layer``, ``head``, ``type`` (at the run's last checkpoint with head
            types), ``cluster``.
        traj: ``(N, G)`` the trajectories clustered (raw values on the common grid, rows as ``heads``).
        grid: ``(G,)`` the common grid's times (fractions of the run, or tokens; steps when the runs share them).
        same_times: whether the runs' checkpoints sat at the same aligned times (no resampling).
        align: the time axis.
    """

    association: JointAssociation
    heads: pd.DataFrame
    traj: np.ndarray
    grid: np.ndarray
    same_times: bool
    align: str


def joint_clusters(
    stores: dict[str, Store],
    values: dict[str, np.ndarray],
    *,
    align: JointAlign = "fraction",
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> JointClusters:
    """Cluster every head of ``stores`` on one time axis and measure the clusters against types and runs.

    Args:
        stores: the runs, by name.
        values: each run's ``(S, n_layers, n_heads)`` statistic (`analysis.findings.values.stat_values`).
        align: the common time axis (`JOINT_ALIGNMENTS`; `analysis.findings.comparison.common_grid` is the rule).
        permutations: shuffles per p-value.

    Raises:
        StoreError: ``align`` is ``tokens`` and a run has no token counts.
    """
    names = list(stores)
    tokens = [_tokens(stores[n]) for n in names] if align == "tokens" else None
    if tokens is not None:
        lacking = [n for n, t in zip(names, tokens, strict=True) if t is None]
        if lacking:
            raise StoreError(f"run {lacking[0]} records no tokens per step: align by fraction of training instead")
    known = [t for t in tokens if t is not None] if tokens is not None else None
    steps = [stores[n].steps for n in names]
    grid, _, _ = common_grid(steps, align=align, tokens=known)
    traj, index, same = joint_trajectories([values[n] for n in names], steps, align=align, tokens=known)
    types = []
    for n in names:
        found = end_types(stores[n])
        s = stores[n]
        types.append(found[0] if found is not None else np.full(s.n_layers * s.n_heads, NO_TYPES))
    type_labels = np.concatenate(types)
    run_labels = np.array([names[i] for i in index[:, 0]])
    depth = np.array([f"layer {layer} of {stores[names[r]].n_layers}" for r, layer in index[:, :2]])
    result, clusters = joint_associate(traj, run_labels, type_labels, layers=depth, permutations=permutations, seed=seed)
    lacking = [n for n, t in zip(names, types, strict=True) if (t == NO_TYPES).all()]
    if lacking:  # the types of the runs that have them cannot stand for the others'
        result = result.untestable(f"run {lacking[0]} has no head types (head_types.parquet)")
    heads = pd.DataFrame({"run": run_labels, "layer": index[:, 1], "head": index[:, 2], "type": type_labels, "cluster": clusters})
    return JointClusters(result, heads, traj, grid, same, align)


def store_joint_clusters(
    stores: dict[str, Store],
    statistic: str,
    *,
    matrix: str = "qk",
    align: JointAlign = "fraction",
    permutations: int = PERMUTATIONS,
) -> JointClusters:
    """`joint_clusters` of one statistic of each named store (`analysis.findings.values.stat_values`): what the
    Trajectory map's joint map, Compare runs' Across sizes and ``headwatch compare`` read."""
    values = {n: stat_values(s, statistic, matrix=matrix) for n, s in stores.items()}
    return joint_clusters(stores, values, align=align, permutations=permutations)


def size_tables(stores: dict[str, Store], *, matrix: str = "qk") -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, PowerLaw]]]:
    """The named runs' `size_table`, `consolidation_table` and `scaling_fits`, in that order."""
    table = size_table(stores)
    consolidation = consolidation_table(stores, matrix=matrix)
    return table, consolidation, scaling_fits(table, consolidation)


def association_table(associations: dict[str, JointAssociation]) -> pd.DataFrame:
    """One row per test and statistic (`analysis.across_sizes.joint_clusters.TESTS`, each test's rows together, for Holm corrects
    each test over the statistics asked together): the AMI (or, leaving a run out, the gain over shuffled types in
    nats per head), the permutation p with its Monte Carlo standard error, Holm's adjusted p, its Monte Carlo
    interval, and the verdict (`analysis.trajectories.significance`). What `headwatch compare` writes, Compare runs' Across sizes
    and the Trajectory map's joint map show."""
    verdicts = judge_joint(associations)
    rows = []
    for test, name in TESTS.items():
        for stat, a in associations.items():
            j = verdicts[stat].tests[test]
            value = {"types": a.ami_type, "types_layers": a.ami_type, "runs": a.ami_run, "transfer": a.transfer_gain}
            rows.append(
                {
                    "test": name,
                    "statistic": SIZE_STAT_TITLES.get(stat, stat),
                    "clusters (k)": a.clusters,
                    "heads": a.heads,
                    "AMI or gain": value[test],
                    "p": j.p,
                    "Monte Carlo s.e.": j.se,
                    "p, Holm": j.adjusted,
                    f"Holm p, {MONTE_CARLO_LEVEL:.0%} Monte Carlo interval": "–"
                    if not np.isfinite(j.low)
                    else f"{j.low:.3g} to {j.high:.3g}",
                    "Holm over": f"{j.family} statistics",
                    "verdict": j.words,
                }
            )
    return pd.DataFrame(rows)


def joint_readings(joint: dict[str, JointClusters]) -> dict[str, str]:
    """Per statistic, one paragraph (Markdown): the runs it was asked of, k and the heads, what the tests say
    (`analysis.across_sizes.joint_clusters.reading`, over the statistics of ``joint`` together) and the heads that break the
    match of types and clusters (`type_breaks`)."""
    verdicts = judge_joint({stat: j.association for stat, j in joint.items()})
    out = {}
    for stat, j in joint.items():
        a = j.association
        runs = ", ".join(run_order(set(j.heads["run"])))
        text = f"**{SIZE_STAT_TITLES.get(stat, stat)}** (asked of {runs}; "
        text += f"{a.clusters} joint clusters of {a.heads} heads): {verdicts[stat].reading}"
        breaks = type_breaks(j.heads)
        out[stat] = text + (f" Heads that break the match of types and clusters: {breaks}." if breaks and a.testable else "")
    return out


def run_order(names: Iterable[str]) -> list[str]:
    """Run names in natural order (digits as numbers: ``d64`` before ``d128``): how a sentence lists the runs it was
    asked of, the same for the runs given in any order."""
    return sorted(names, key=lambda n: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)])


def type_breaks(heads: pd.DataFrame) -> str:
    """Per head type held at the end (`HEAD_TYPES`), where its heads fall: the joint cluster holding most of them,
    each of its heads outside that cluster (named: run, layer, head, cluster) and how many heads without the type
    share that cluster, per run. Runs in `run_order`, heads layer-major: the text does not depend on the order the
    runs were given in. '' without typed heads."""
    parts = []
    rank = {r: i for i, r in enumerate(run_order(set(heads["run"])))}
    heads = heads.assign(rank=heads["run"].map(rank)).sort_values(["rank", "layer", "head"], kind="stable")
    held = heads["type"].str.split("+")
    for t in HEAD_TYPES:
        has = held.apply(lambda ts, t=t: t in ts).to_numpy()
        if not has.any():
            continue
        counts = heads.loc[has, "cluster"].value_counts()
        home = int(min(c for c in counts.index if counts[c] == counts.max()))
        outside = heads[has & (heads["cluster"] != home).to_numpy()]
        stray = heads[~has & (heads["cluster"] == home).to_numpy()]
        text = f"{TYPE_LABELS.get(t, t)}, {int(counts.max())} of {int(has.sum())} heads in joint cluster {home + 1}"
        if len(outside):
            named = outside[["run", "layer", "head", "cluster"]].itertuples(index=False)
            text += "; outside it: " + ", ".join(f"{r} {head_name(la, h)} (cluster {c + 1})" for r, la, h, c in named)
        if len(stray):
            per_run = stray.groupby("rank", sort=True).size().rename(index=dict(enumerate(rank)))
            text += f"; with it, {len(stray)} heads without the type ("
            text += ", ".join(f"{r} {int(n)}" for r, n in per_run.items()) + ")"
        parts.append(text)
    return "; ".join(parts)


def scaling_series(
    sizes: pd.DataFrame, consolidation: pd.DataFrame, *, unit: str = "step"
) -> list[tuple[str, np.ndarray, np.ndarray, list[str]]]:
    """The timescales compared across sizes: each head type's first emergence step (types no run has left out), then
    each statistic's consolidation time in the first and in the last layer (``unit``: step, tokens or fraction).

    Returns:
        ``(what, parameters (R,), times (R,) with NaN where a run has none, runs)`` per timescale.
    """
    params = dict(zip(sizes["run"], sizes["parameters"], strict=True))
    out = []
    for t in HEAD_TYPES:
        label = TYPE_LABELS.get(t, t)
        column = f"{label} first step"
        if column in sizes and sizes[column].notna().any():
            times = sizes[column].astype("float64").to_numpy()
            if unit != "step":  # the emergence step's tokens or fraction: the run's own conversion
                times = np.array([_convert(sizes, r, v, unit) for r, v in zip(sizes["run"], times, strict=True)])
            out.append((f"first {label} emergence", sizes["parameters"].to_numpy(np.float64), times, list(sizes["run"])))
    for stat in consolidation["statistic"].unique() if len(consolidation) else []:
        part = consolidation[consolidation["statistic"] == stat]
        for which, pick in (("first layer", "min"), ("last layer", "max")):
            rows = part[part["layer"] == part.groupby("run")["layer"].transform(pick)]
            times = rows[unit].astype("float64").to_numpy()
            n = np.array([params[r] for r in rows["run"]], dtype=np.float64)
            out.append((f"{SIZE_STAT_TITLES.get(stat, stat)}: consolidation, {which}", n, times, list(rows["run"])))
    return out


def _convert(sizes: pd.DataFrame, run: str, step: float, unit: str) -> float:
    """A step of ``run`` as tokens (tokens per step from the table's last step and tokens) or a fraction of its run."""
    row = sizes[sizes["run"] == run].iloc[0]
    if not np.isfinite(step):
        return float("nan")
    if unit == "fraction":
        return step / float(row["last step"])
    tokens = row["tokens"]
    return step * float(tokens) / float(row["last step"]) if tokens is not pd.NA and tokens is not None else float("nan")


def scaling_fits(sizes: pd.DataFrame, consolidation: pd.DataFrame) -> list[tuple[str, PowerLaw]]:
    """Power laws of each timescale of `scaling_series`, in steps, against the parameter count
    (`analysis.across_sizes.scaling.fit_power_law`; no fit, with the reason in words, where the sizes are too few)."""
    return [(f"{what}, in steps", fit_power_law(n, t)) for what, n, t, _ in scaling_series(sizes, consolidation)]


def consolidation_wide(consolidation: pd.DataFrame, *, unit: str = "step") -> pd.DataFrame:
    """`consolidation_table` as one row per run and layer, one column per statistic (its ``unit``: step, tokens or
    fraction)."""
    if consolidation.empty:
        return consolidation
    wide = consolidation.pivot_table(index=["run", "layer"], columns="statistic", values=unit, aggfunc="first", sort=False)
    order = [s for s in consolidation["statistic"].unique() if s in wide.columns]
    out = wide[order].reset_index()
    out.columns = [SIZE_STAT_TITLES.get(str(c), str(c)) for c in out.columns]
    return out
