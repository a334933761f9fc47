"""What the Compare runs page computes before it draws: what the chosen runs offer (statistics, weights, matrices), the
checkpoint-index axis shared by their schedules, how far each run's refined-LLC estimates can be trusted, the words
of the captions that read the runs' depth bins and checkpoints, and the charts' points as tidy tables.

Pure (no streamlit): the alignment, the depth bins and the checkpoint at a point are `analysis.findings.comparison`'s;
``views.compare.choice`` and ``views.compare.panels`` call these.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.findings import comparison
from headwatch.analysis.findings.held_types import TYPE_LABELS
from headwatch.analysis.findings.values import llc_shown
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.layers import LAYER_ROLES, LAYERS
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, llc_data_words
from headwatch.dashboard import export
from headwatch.dashboard.data import INDEX_TICKS, index_ticks
from headwatch.dashboard.labels import LAMBDA, LAYER_STATS, MATRIX_LABELS, STATS, stats_for


def layer_table(store: Store, column: str):
    """One column of the store's whole-layer matrices (step, layer, role and ``column``); None without them.

    Raises:
        StoreError: ``layers.parquet`` is unreadable or lacks ``column``.
    """
    return store.frame(LAYERS, columns=[column])


def statistics_of(stores: dict[str, Store]) -> dict[str, set[str]]:
    """Per run, the statistics its store has: the per-head ones a picker offers for it (lambda_k aside) and, with
    whole-layer matrices, every per-layer one."""
    return {r: (set(stats_for(s)) - {LAMBDA}) | (set(LAYER_STATS) if s.has(LAYERS) else set()) for r, s in stores.items()}


def offered(have: dict[str, set[str]]) -> list[str]:
    """Every statistic some run has (`statistics_of`), per-head ones first, in the labels' order."""
    return [n for n in (*STATS, *LAYER_STATS) if any(n in h for h in have.values())]


def weights_of(tables: dict[str, Any]) -> list[str]:
    """The weights (layer roles, in `LAYER_ROLES` order) that some run's whole-layer table holds; ``attn_out`` when
    none does."""
    return [x for x in LAYER_ROLES if any(t is not None and x in set(t["role"]) for t in tables.values())] or ["attn_out"]


def matrices_of(stores: dict[str, Store]) -> list[str]:
    """The per-head products (``qk``, ``ov``) that some run's store holds; ``qk`` when none does."""
    return [m for m in MATRIX_LABELS if any(m in s.meta.matrices for s in stores.values())] or ["qk"]


def point_text(value, align: str) -> str:
    """A point of training in the alignment's unit: ``0.5``, ``1,024 tokens``, ``step 1,000``."""
    if align == "fraction":
        return f"{value:.4g}"
    if align == "tokens":
        return f"{value:,.0f} tokens"
    return f"step {value:,}"


def steps_at(series: list[comparison.RunSeries], point) -> str:
    """`` (run A: step 768; run B: step 1,024)``: the checkpoint each run shows at ``point``."""
    parts = []
    for s in series:
        i = comparison.checkpoint_at(s.x, point)
        parts.append(f"{s.run}: step {int(s.steps[i]):,}" if i is not None else f"{s.run}: none yet")
    return " (" + "; ".join(parts) + ")"


def time_grid(stores: dict[str, Store], *, align: comparison.Align) -> np.ndarray:
    """Every time at which some run has a checkpoint, aligned by ``align`` (`analysis.findings.comparison.index_grid`): the
    checkpoint-index axis's times; runs without tokens seen are left out of a tokens axis."""
    xs = []
    for s in stores.values():
        tokens = s.meta.tokens_at(s.steps) if align == "tokens" else None
        if align != "tokens" or tokens is not None:
            xs.append(comparison.aligned_time(s.steps, align=align, tokens=tokens))
    return comparison.index_grid(xs)


def index_labels(grid: np.ndarray, *, align: comparison.Align, most: int = INDEX_TICKS) -> tuple[list[float], list[str]]:
    """Tick positions and labels of a checkpoint-index axis over ``grid``: at most ``most`` of its times, each
    labelled in the alignment's unit (step, tokens, fraction of the run)."""
    ticks = index_ticks(len(grid), most=most)

    def label(v: float) -> str:
        if align == "fraction":
            return f"{v:.3g}"
        if align == "tokens":
            for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
                if abs(v) >= div:
                    return f"{v / div:.3g}{suffix}"
        return f"{v:.0f}" if v < 10_000 else f"{v / 1e3:.3g}k"

    return [float(i) for i in ticks], [label(float(grid[i])) for i in ticks]


def bins_text(series: list[comparison.RunSeries], n_bins: int) -> str:
    """Each run's layers in each depth bin: ``run (12 layers): [0, 0.25) L0-2, ...; ...``."""
    return "; ".join(
        f"{s.run} ({s.n_layers} layers): "
        + ", ".join(
            f"{comparison.bin_label(i, n_bins)} L{'-'.join(map(str, _ends(comparison.bin_layers(s.n_layers, n_bins, i))))}"
            if comparison.bin_layers(s.n_layers, n_bins, i)
            else f"{comparison.bin_label(i, n_bins)} none"
            for i in range(n_bins)
        )
        for s in series
    )


def _ends(layers: list[int]) -> list[int]:
    return [layers[0]] if len(layers) == 1 else [layers[0], layers[-1]]


def llc_trust_text(stores: dict[str, Store], flags: dict[str, Any]) -> str:
    """How far each run's refined-LLC estimates can be trusted: flagged and negative estimates, per run.

    Args:
        stores: the runs with a refined LLC.
        flags: per run, its estimates' flags (`analysis.llc.diagnostics.store_flags`; None without chain
            diagnostics).
    """
    parts = []
    for run, store in stores.items():
        shown = llc_shown(store)  # the distribution compared (train where held, else text), as the bands draw it
        values = store.dense(LLC, "llc", at={LLC_DATA_COLUMN: shown})
        assert values is not None  # the runs shown on the refined LLC have it (`views.compare.choice.run_values`)
        n = int(np.isfinite(values).sum())
        negative = int((values < 0).sum())
        flagged = flags[run]
        if flagged is None:
            parts.append(
                f"**{run}** (refined LLC {llc_data_words(shown)}): {n} estimates, no chain diagnostics stored; "
                f"{negative} negative"
            )
            continue
        counts = Counter(f for f in flagged[0].ravel() if f)  # a negative estimate is flagged "negative", never converged
        unsure = ", ".join(f"{c} {f}" for f, c in sorted(counts.items()) if f != "converged") or "none flagged"
        parts.append(
            f"**{run}** (refined LLC {llc_data_words(shown)}): {n} estimates, {counts.get('converged', 0)} converged ({unsure})"
        )
    return (
        "Refined-LLC estimates are sampled: " + "; ".join(parts) + ". Flags and their rule, and what a negative estimate "
        "means, on the Refined LLC page; the bands above average flagged estimates with the others."
    )


def thresholds_text(stores: dict[str, Store]) -> str:
    """Each run's own head-type rule as its ``meta.json`` ``types`` records it: ``induction-d128: previous-token 0.3
    (exit 0.2), induction 0.3 (exit 0.2), sink 0.371 (exit 0.247); ...``. A type's entry threshold is
    max(absolute, ratio x the run's uniform-attention null), so it differs between runs; runs without head types are
    left out."""
    parts = []
    for run, store in stores.items():
        rules = (store.meta.types or {}).get("types") or {}
        said = [
            f"{TYPE_LABELS.get(name, name)} {r['threshold']:.3g}"
            + (f" (exit {r['exit']:.3g})" if isinstance(r.get("exit"), int | float) else "")
            for name, r in rules.items()
            if isinstance(r, dict) and isinstance(r.get("threshold"), int | float)
        ]
        if said:
            parts.append(f"{run}: " + ", ".join(said))
    return "; ".join(parts)


def bin_csv(series: list[comparison.RunSeries], n_bins: int, b: int, stat: str, matrix: str) -> pd.DataFrame:
    """Panel (b)'s points, tidy, with each checkpoint's aligned time."""
    parts = []
    for s in series:
        layers = comparison.bin_layers(s.n_layers, n_bins, b)
        if layers:
            rows = export.tidy(s.values, s.steps, run=s.run, statistic=stat, matrix=matrix, layers=layers)
            parts.append(rows.assign(time=np.repeat(s.x, len(layers) * s.values.shape[2])))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=export.TIDY_COLUMNS)


def dist_csv(series: list[comparison.RunSeries], indices: list, stat: str, matrix: str) -> pd.DataFrame:
    """Panel (c)'s values: every head of each run at the checkpoint used."""
    parts = [
        export.tidy(s.values[i : i + 1], s.steps[i : i + 1], run=s.run, statistic=stat, matrix=matrix)
        for s, i in zip(series, indices, strict=True)
        if i is not None
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=export.TIDY_COLUMNS)


def losses_csv(curves: list[tuple[comparison.RunSeries, np.ndarray, str]]) -> pd.DataFrame:
    """Panel (d)'s points: each run's loss (``curves``: run, loss, label) at its checkpoints, with their aligned time."""
    return pd.concat(
        [
            pd.DataFrame(
                {"run": s.run, "statistic": lab, "step": s.steps, "time": s.x, "value": np.asarray(loss, dtype=np.float64)}
            )
            for s, loss, lab in curves
        ],
        ignore_index=True,
    )


def scaling_csv(points: list[tuple[str, np.ndarray, np.ndarray, list[str]]], *, unit: str) -> pd.DataFrame:
    """The scaling chart's points (`analysis.findings.sizes.scaling_series`): one row per timescale and run."""
    return pd.DataFrame(
        [
            {"timescale": what, "run": run, "parameters": n, unit: t}
            for what, params, times, names in points
            for run, n, t in zip(names, params, times, strict=True)
        ]
    )
