"""``headwatch compare STORE... --out DIR``: are the trajectory types and timescales universal across runs?

Writes ``compare.md`` with its figures as SVG beside it (matplotlib, offline), from any number (two or more)
of stores: per run its parameter count, tokens, each head type's first emergence step and heads, and each
layer's consolidation time for the study's statistics; the joint trajectory clusters of every head of every
run against the head types and against the runs, with a left-out run's types predicted by clusters fitted without
it (permutation p-values with their Monte Carlo error, corrected by Holm over the statistics); and the timescales
against the parameter count, fitted where the sizes allow and said in words where they do not. Everything it says is
computed by `analysis.findings.sizes`, as the Compare runs page shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from headwatch.analysis.across_sizes.scaling import CONSOLIDATION_SHARE, MIN_SIZES
from headwatch.analysis.findings import sizes
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.store.outputs import check_files_folder
from headwatch.analysis.trajectories.significance import MONTE_CARLO_LEVEL, SIGNIFICANCE
from headwatch.analysis.trajectories.type_association import PERMUTATIONS

COMPARE_FILE = "compare.md"
SCALING_SVG = "scaling.svg"
CLUSTERS_SVG = "clusters.svg"


def _table(frame: pd.DataFrame) -> str:
    """A Markdown table (missing values as an en dash, pipes in cells escaped)."""
    cols = [str(c).replace("|", "\\|") for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for row in frame.itertuples(index=False):
        cells = ["–" if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else _cell(v) for v in row]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _cell(v: object) -> str:
    if isinstance(v, bool | np.bool_):
        return str(v)
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    if isinstance(v, float | np.floating):
        return f"{float(v):.3g}"
    return str(v)


def scaling_figure(table: pd.DataFrame, consolidation: pd.DataFrame, path: Path) -> None:
    """Two log-log panels against the parameter count: each head type's first emergence step, and each
    statistic's consolidation step in the first and last layer (`analysis.findings.sizes.scaling_series`); one
    point per run (seeds side by side)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5.5))
    markers = "os^vD<>ph*"
    for i, (what, params, times, _runs) in enumerate(sizes.scaling_series(table, consolidation)):
        ax = left if what.endswith("emergence") else right
        ok = np.isfinite(times) & (times > 0)
        if ok.any():
            ax.scatter(params[ok], times[ok], label=what, color=f"C{i % 10}", marker=markers[i % len(markers)])
    left.set_title("first emergence of each head type", fontsize=10)
    right.set_title(f"layer consolidation ({CONSOLIDATION_SHARE:.0%} of the layer mean's change, kept)", fontsize=10)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("non-embedding parameters (log)")
        ax.set_ylabel("training step (log)")
        if ax.get_legend_handles_labels()[0]:  # below the axes, off the points
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text: smaller files, faster to write
        fig.savefig(path, format="svg")
    plt.close(fig)


def clusters_figure(joint: dict[str, sizes.JointClusters], path: Path) -> None:
    """Per statistic, each joint cluster's mean per-head-normalised trajectory over the common time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headwatch.analysis.trajectories.maps import normalise

    fig, axes = plt.subplots(1, len(joint), figsize=(3.2 * len(joint), 3.2), squeeze=False)
    for ax, (stat, j) in zip(axes[0], joint.items(), strict=True):
        z = normalise(j.traj, "zscore")  # (N, G)
        labels = j.heads["cluster"].to_numpy()
        for c in np.unique(labels):
            ax.plot(j.grid, z[labels == c].mean(axis=0), label=f"joint cluster {c + 1} ({int((labels == c).sum())} heads)")
        ax.set_title(sizes.SIZE_STAT_TITLES.get(stat, stat), fontsize=9)
        ax.set_xlabel(sizes.JOINT_ALIGNMENTS[j.align], fontsize=7)
        ax.set_ylabel("cluster mean of z-scored trajectory", fontsize=7)
        ax.legend(fontsize=6)
    fig.tight_layout()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text: smaller files, faster to write
        fig.savefig(path, format="svg")
    plt.close(fig)


def _association_rows(joint: dict[str, sizes.JointClusters]) -> pd.DataFrame:
    return sizes.association_table({stat: j.association for stat, j in joint.items()})


def write_compare(
    store_paths: Sequence[str | Path],
    out: str | Path,
    *,
    matrix: str = "qk",
    align: sizes.JointAlign = "fraction",
    permutations: int = PERMUTATIONS,
) -> Path:
    """Write ``compare.md`` and its SVG figures into ``out`` (created if missing).

    Returns:
        The Markdown file's path.

    Raises:
        StoreError: ``out`` is a file or a store (`analysis.store.outputs.check_files_folder`), a store cannot be
            opened, two stores have the same folder name, or the stores cannot be compared
            (`analysis.findings.sizes.check_comparable`); nothing is written then.
    """
    from headwatch.analysis.errors import StoreError

    check_files_folder(out, what="compare.md and its figures")
    stores: dict[str, Store] = {}
    for p in store_paths:
        store = open_store(p)
        name = store.path.name
        if name in stores:
            raise StoreError(f"two stores are named {name} ({stores[name].path} and {store.path}): name each run once")
        stores[name] = store
    sizes.check_comparable(stores, matrix=matrix)
    table, consolidation, fits = sizes.size_tables(stores, matrix=matrix)
    joint = {
        stat: sizes.store_joint_clusters(stores, stat, matrix=matrix, align=align, permutations=permutations)
        for stat in sizes.SIZE_STATS
    }

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scaling_figure(table, consolidation, out / SCALING_SVG)
    clusters_figure(joint, out / CLUSTERS_SVG)
    mat = "W_QK" if matrix == "qk" else "W_OV"
    first = next(iter(joint.values()))
    when = (
        f"the runs' {first.traj.shape[1]} shared checkpoints"
        if first.same_times
        else f"{first.traj.shape[1]} points of {sizes.JOINT_ALIGNMENTS[align]}: the checkpoints of the run with the fewest, "
        "each other run contributing its last checkpoint at or before each (picked, not interpolated)"
    )
    lines = [
        f"# Across runs: {', '.join(f'`{n}`' for n in stores)}",
        "",
        f"Made by `headwatch compare` from {len(stores)} stores ({', '.join(f'`{s.path}`' for s in stores.values())}). "
        f"Statistics of {mat}; every number below is computed from these stores as they are.",
        "",
        "## Per run",
        "",
        "Parameters: non-embedding weight matrices (attention and MLP; embeddings, biases and LayerNorms left out). "
        "First step: the earliest emergence step (head_emergence.parquet: the first checkpoint from which a head holds "
        "the type to the end) among the heads that hold the type at the end; heads: how many hold it at the end; "
        "– where none does.",
        "",
        _table(table),
        "",
        "## Consolidation per layer",
        "",
        f"The checkpoint from which the layer's mean statistic over its heads stays within "
        f"{1 - CONSOLIDATION_SHARE:.0%} of its total change (last checkpoint minus first) of its final value: it has "
        f"made {CONSOLIDATION_SHARE:.0%} of its change and keeps it (analysis/across_sizes/scaling.py). As a training step:",
        "",
        _table(sizes.consolidation_wide(consolidation, unit="step")),
        "",
        "As tokens seen:",
        "",
        _table(sizes.consolidation_wide(consolidation, unit="tokens")),
        "",
        "As a fraction of the run (step / last step):",
        "",
        _table(sizes.consolidation_wide(consolidation, unit="fraction")),
        "",
        "## Joint trajectory clusters: universal or size-specific?",
        "",
        f"Asked of {', '.join(f'`{n}`' for n in sizes.run_order(stores))}. Every head of every run, its statistic at {when}, "
        "normalised per head (minus its mean, divided by its standard deviation: the shape of the curve), clustered "
        "together by k-means from deterministic starts (Ward's partition and farthest-point starts: no seed, and the "
        "same clusters for the runs in any order), k in 2..6 by the largest silhouette, chosen without the types or "
        "the runs. Types: each head's at its run's last checkpoint with head types. Four tests per statistic, each a "
        f"permutation p-value from {permutations:,} shuffles: the AMI (scikit-learn's adjusted mutual information, 0 "
        "what independent labels give on average, 1 the same partition) with the types, the types shuffled within "
        "each run, and again within each layer of each run (does it hold beyond depth?); the AMI with the runs, the "
        "runs shuffled within each type; and, leaving each run out in turn, whether clusters fitted on the other runs "
        "predict its types better than shuffled types do (the gain in nats per head, the types shuffled within each "
        f"run). Each p comes with its Monte Carlo standard error; each test is corrected by Holm's method over the "
        f"{len(joint)} statistics, and its verdict reads the adjusted p's {MONTE_CARLO_LEVEL:.0%} Monte Carlo "
        f"(Clopper-Pearson) interval: associated below {SIGNIFICANCE}, no association shown at or above it, "
        "undecided where the interval holds it (another seed could put p on either side). The words universal kinds "
        "of trajectory are said only where the first, second and fourth tests are associated and the runs' is not.",
        "",
        _table(_association_rows(joint)),
        "",
        *(f"- {line}" for line in sizes.joint_readings(joint).values()),
        "",
        f"![Each joint cluster's mean trajectory, per statistic]({CLUSTERS_SVG})",
        "",
        "## Timescales against the parameter count",
        "",
        f"A power law `T ~ N^b` (least squares of log10 T on log10 N over the runs, seeds as replicates; the "
        f"exponent's uncertainty from the scatter among the seeds of one size) needs at least {MIN_SIZES} sizes: "
        "through three points a line has one degree of freedom left, so any three times fit some exponent.",
        "",
        *(f"- {fit.text(what)}" for what, fit in fits),
        "",
        f"![Emergence and consolidation steps against the parameter count]({SCALING_SVG})",
    ]
    path = out / COMPARE_FILE
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(stores: list[str], out: str, *, matrix: str = "qk", align: str = "fraction", permutations: int | None = None) -> int:
    """The ``headwatch compare`` subcommand (``permutations``: None for `PERMUTATIONS`): the exit status."""
    axis: sizes.JointAlign = "tokens" if align == "tokens" else "fraction"  # argparse's choices
    path = write_compare(stores, out, matrix=matrix, align=axis, permutations=permutations or PERMUTATIONS)
    print(f"wrote {path} with {SCALING_SVG} and {CLUSTERS_SVG}")
    return 0
