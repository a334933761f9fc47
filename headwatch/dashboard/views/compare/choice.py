"""What the Compare runs page compares (`views.compare.page` lays it out): the runs picked and opened, and the
statistic, as one frozen record (`Statistic`) that the panels (`views.compare.panels`) read; how the runs line up
in time and depth is `views.compare.alignment`'s.

A run that cannot be opened, or lacks the statistic or the matrix, is named in a warning here; the others are
shown. What the runs offer is `views.compare.data`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings import comparison
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.analysis.store.lenses.llc import LLC
from headwatch.dashboard import derived, loader, widgets
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.labels import LAYER_STATS, MATRIX_LABELS, STATS, layer_column
from headwatch.dashboard.views.compare import data

UNKNOWN_RUN = (
    "A run is a statistics store the run picker offers (a folder under data/, $HEADWATCH_STORE or a store "
    "of $STORE_REPO): pick it from the list above, or put its store there and reload."
)

# one column of each run's whole-layer matrices (`views.compare.data.layer_table`)
_layer_values = store_cached(data.layer_table)


@dataclass(frozen=True)
class Statistic:
    """What the runs are compared on (the widgets under the run picker).

    Attributes:
        stat: the statistic (URL ``stat``); info: its label record.
        matrix: ``qk`` or ``ov`` (per-head statistics of the weights), a weight role (per-layer statistics,
            URL ``role``), or ``forward`` (the forward lens and the refined LLC, per head whatever the matrix).
        log_y: the log y toggle (URL ``logy``).
        have: per run, the statistics its store has.
        tables: per run, its whole-layer table of a per-layer statistic (None without one).
    """

    stat: str
    info: Any
    matrix: str
    log_y: bool
    have: dict[str, set[str]]
    tables: dict[str, Any]

    @property
    def per_layer(self) -> bool:
        return self.stat in LAYER_STATS

    @property
    def unit(self) -> str:
        return "layer" if self.per_layer else "head"

    @property
    def what(self) -> str:
        """What the charts draw: ``σ of W_QK``, ``H_attn (forward lens)``, ``‖W‖_F of attn_out``."""
        label = self.info.short()
        if self.per_layer:
            return f"{label} of {self.matrix}"
        if self.info.forward:
            return f"{label} (forward lens)"
        if self.info.llc:
            return f"{label} (per head)"
        return f"{label} of {'W_QK' if self.matrix == 'qk' else 'W_OV'}"


def pick_runs(frame) -> list[str]:
    """The runs multiselect (URL ``runs``): the sidebar's run and one more by default; asks for a second."""
    names = list(frame.runs)
    default = ([frame.run] if frame.run in frame.runs else []) + [n for n in names if n != frame.run][:1]
    chosen = widgets.multiselect(
        "runs", "Runs", names, default, hint=UNKNOWN_RUN, help="Two or more runs; every run the sidebar's run picker offers."
    )
    if len(chosen) < 2:
        st.info("Choose two or more runs to compare (every run the sidebar's run picker offers is in the list).")
    return chosen


def open_runs(frame, names: list[str]) -> dict:
    """The stores of the runs ``names`` that open and have checkpoints; each other one is named in a warning."""
    stores = {}
    for r in names:
        opened = loader.try_load_store(frame.runs[r])
        if isinstance(opened, StoreError):
            st.warning(f"Run **{r}** cannot be opened and is left out: {opened}", icon=":material/error:")
        elif len(opened.steps) == 0:
            st.warning(
                f"Run **{r}** has no checkpoints with statistics yet and is left out; run `headwatch precompute` on it first.",
                icon=":material/error:",
            )
        else:
            stores[r] = opened
    return stores


def pick_statistic(stores: dict) -> Statistic:
    """The statistic (every one some run has), the matrix or weight, and log y, in one row."""
    have = data.statistics_of(stores)
    options = data.offered(have)
    c_stat, c_matrix, c_log = st.columns([3, 3, 1], vertical_alignment="bottom")
    stat = widgets.select(
        "stat",
        "Statistic",
        options,
        "std",
        where=c_stat,
        fmt=lambda n: _info(n).label + ("" if all(n in h for h in have.values()) else " (not in every run)"),
    )
    info = _info(stat)
    tables = {}
    matrix = "forward"
    if stat in LAYER_STATS:  # whole-layer matrices: one value per layer of the weight chosen as `role`
        for r, s in stores.items():
            try:
                tables[r] = _layer_values(s, layer_column(stat)) if s.has(LAYERS) else None
            except StoreError as exc:
                st.warning(f"Run **{r}**: {exc}", icon=":material/error:")
                tables[r] = None
        roles = data.weights_of(tables)
        matrix = widgets.select("role", "Weight", roles, "attn_out" if "attn_out" in roles else roles[0], where=c_matrix)
    elif not info.forward and not info.llc:  # the forward lens and the refined LLC are per head, whatever the matrix
        kinds = data.matrices_of(stores)
        matrix = widgets.select("matrix", "Matrix", kinds, kinds[0], fmt=MATRIX_LABELS.__getitem__, kind="radio", where=c_matrix)
    log_y = widgets.toggle("logy", "log y", False, where=c_log) if info.positive else False
    return Statistic(stat=stat, info=info, matrix=matrix, log_y=log_y, have=have, tables=tables)


def run_values(stores: dict, pick: Statistic) -> dict:
    """run -> (store, values ``(S, n_layers, n_units)``) of every run that has the statistic; the others are named
    in a warning that says how to add what they lack."""
    info, matrix, stat = pick.info, pick.matrix, pick.stat
    shown = {}
    for r, s in stores.items():
        if pick.per_layer:
            if pick.tables[r] is None:
                st.warning(
                    f"Run **{r}** has no whole-layer matrices (`layers.parquet`), so no {info.short()}; it is "
                    f"left out. Add them with `python -m headwatch.precompute --source SOURCE --out {s.path} --matrices "
                    "layers`.",
                    icon=":material/visibility_off:",
                )
                continue
            table = pick.tables[r]
            assert table is not None  # checked above
            if matrix not in set(table["role"]):
                st.warning(
                    f"Run **{r}** has no {matrix} weight (its weights: {', '.join(sorted(set(table['role'])))}) "
                    "and is left out; choose another weight.",
                    icon=":material/visibility_off:",
                )
                continue
            values = comparison.layer_values(table, s.steps, n_layers=s.n_layers, role=matrix, column=layer_column(stat))
            shown[r] = (s, values)
            continue
        if info.forward and not s.has(ATTENTION):
            st.warning(
                f"Run **{r}** has no forward-lens tables, so no {info.short()}; it is left out. Add them with "
                f"`python -m headwatch.precompute --source SOURCE --out {s.path} --lenses attention`.",
                icon=":material/visibility_off:",
            )
            continue
        if info.llc and not s.has(LLC):
            st.warning(
                f"Run **{r}** has no refined LLC (`llc.parquet`) and is left out. Add it with "
                f"`python -m headwatch.precompute --source SOURCE --out {s.path} --lenses llc`.",
                icon=":material/visibility_off:",
            )
            continue
        if stat not in pick.have[r]:  # any other statistic read from a table this store lacks
            st.warning(
                f"Run **{r}** has no {info.label} (its store lacks the table it is read from) and is left out; "
                'see README "The statistics store" for the precompute option that adds it.',
                icon=":material/visibility_off:",
            )
            continue
        if not info.forward and not info.llc and matrix not in s.meta.matrices:
            st.warning(
                f"Run **{r}** has no {matrix.upper()} rows (only {', '.join(m.upper() for m in s.meta.matrices)}), "
                f"so it is left out here. A rerun of `python -m headwatch.precompute --source SOURCE --out {s.path}` with "
                "its checkpoints adds them; or choose another matrix.",
                icon=":material/visibility_off:",
            )
            continue
        values = derived.stat_values(s, stat, matrix=matrix if matrix in ("qk", "ov") else "qk")
        if not np.isfinite(values).any():
            st.warning(
                f"Run **{r}** has no values of {info.short()} for {matrix.upper()} and is left out: the circuit "
                "columns and the relative change came with schema version 3 (rerun `python -m headwatch.precompute` on "
                "the store with its checkpoints to add them; the relative change also needs overlaps, "
                "`--overlap-k` > 0).",
                icon=":material/visibility_off:",
            )
            continue
        shown[r] = (s, values)
    return shown


def _info(name: str):
    """The label record of a per-head, forward or per-layer statistic."""
    return STATS[name] if name in STATS else LAYER_STATS[name]
