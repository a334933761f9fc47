"""What the Compare runs page compares (``pages/compare_runs.py``): the runs picked and opened, the statistic, and
the time alignment and depth bins, as two frozen records (`Statistic`, `Time`) that the panels
(`dashboard.pagepanels.compare_runs`) read.

A run that cannot be opened, or lacks the statistic or the matrix, is named in a warning here; the others are
shown. Alignment, bins and the checkpoint at a point are `analysis.findings.runs`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings import runs
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import ATTENTION, LAYER_ROLES, LAYERS, LLC
from headwatch.dashboard import derived, loader, widgets
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.data import INDEX_TICKS, index_ticks
from headwatch.dashboard.figures import compare as figs
from headwatch.dashboard.figures.common import stacked
from headwatch.dashboard.labels import LAMBDA, LAYER_STATS, MATRIX_LABELS, STATS, layer_column, stats_for

STACK_RIGHT = 24  # px: the time charts' right margin (their legends sit above them)


ALIGN_TEXT = {"step": "step", "tokens": "tokens seen", "fraction": "fraction of the run"}


UNKNOWN_RUN = (
    "A run is a statistics store the run picker offers (a folder under data/, $HEADWATCH_STORE or a store "
    "of $STORE_REPO): pick it from the list above, or put its store there and reload."
)


def _point_text(value, align: str) -> str:
    if align == "fraction":
        return f"{value:.4g}"
    if align == "tokens":
        return f"{value:,.0f} tokens"
    return f"step {value:,}"


def _layer_table(store: Store, column: str):
    """One column of the store's whole-layer matrices (step, layer, role and ``column``); None without them.

    Raises:
        StoreError: ``layers.parquet`` is unreadable or lacks ``column``.
    """
    return store.frame(LAYERS, columns=[column])


_layer_values = store_cached(_layer_table)


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


@dataclass(frozen=True)
class Time:
    """How the runs line up in time and depth (the widgets above the panels), and the runs as series.

    Attributes:
        align: ``step``, ``tokens`` or ``fraction`` (URL ``align``); n_bins, b: the depth bins and the one
            shown head by head (URL ``nbins``, ``bin``); point: the point of training (URL ``point``).
        series: each shown run's statistic on the aligned time axis; colours: each one's colour index.
        indices: each run's checkpoint at or before ``point`` (None when it has none).
        x_title: the time axis's title; log_x: the sidebar's log time scale; scale: the sidebar's time scale.
        on_axis: puts series and figures on the page's time axis (`_time_axis`).
    """

    align: runs.Align
    n_bins: int
    b: int
    point: Any
    series: list
    colours: list[int]
    indices: list
    x_title: str
    log_x: bool
    scale: str
    on_axis: Callable[[Any], Any]

    @property
    def runs_title(self) -> str:
        return " vs ".join(s.run for s in self.series)

    @property
    def point_text(self) -> str:
        return _point_text(self.point, self.align)


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
    have = {r: (set(stats_for(s)) - {LAMBDA}) | (set(LAYER_STATS) if s.has(LAYERS) else set()) for r, s in stores.items()}
    options = [n for n in (*STATS, *LAYER_STATS) if any(n in h for h in have.values())]
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
        roles = [x for x in LAYER_ROLES if any(t is not None and x in set(t["role"]) for t in tables.values())] or ["attn_out"]
        matrix = widgets.select("role", "Weight", roles, "attn_out" if "attn_out" in roles else roles[0], where=c_matrix)
    elif not info.forward and not info.llc:  # the forward lens and the refined LLC are per head, whatever the matrix
        kinds = [m for m in MATRIX_LABELS if any(m in s.meta.matrices for s in stores.values())] or ["qk"]
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
            values = runs.layer_values(table, s.steps, n_layers=s.n_layers, role=matrix, column=layer_column(stat))
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


def pick_time(frame, stores: dict, shown: dict, colour: dict) -> Time:
    """The alignment, the depth bins and the bin shown (one row), then the point of training; the runs as series."""
    tokens = {r: s.meta.tokens_at(s.steps) for r, (s, _) in shown.items()}
    no_tokens = [r for r, t in tokens.items() if t is None]
    c_align, c_bins, c_bin = st.columns([3, 2, 2])
    aligns = [a for a in runs.ALIGNMENTS if a != "tokens" or not no_tokens]
    align = widgets.select(
        "align",
        "Align runs by",
        aligns,
        "fraction",
        kind="radio",
        fmt=ALIGN_TEXT.__getitem__,
        where=c_align,
        help="; ".join(f"{k}: {v}" for k, v in runs.ALIGNMENTS.items()),
    )
    if no_tokens:
        c_align.caption(f"Tokens seen are not recorded for {', '.join(no_tokens)}, so runs align by step or fraction.")
    n_bins = widgets.select(
        "nbins",
        "Depth bins",
        list(runs.BIN_COUNTS),
        runs.DEFAULT_BINS,
        where=c_bins,
        help="relative depth = layer / n_layers, cut into this many bins of equal width",
    )
    b = widgets.select(
        "bin",
        "Depth bin shown head by head",
        list(range(n_bins)),
        runs.default_bin([s.n_layers for s, _ in shown.values()], n_bins),
        where=c_bin,
        fmt=lambda i: runs.bin_label(i, n_bins),
    )
    series = [
        runs.run_series(
            r,
            s.steps,
            values,
            align=align,
            tokens=tokens[r] if align == "tokens" else None,
            tokens_per_step=s.meta.tokens_per_step,
        )
        for r, (s, values) in shown.items()
    ]
    points = runs.point_options([s.x for s in series], align=align)
    point = widgets.select(
        "point",
        "Point of training (the table and the distribution over heads; each run at its last checkpoint at or before it)",
        points,
        runs.default_point(points, [s.x for s in series]),
        kind="select_slider",
        fmt=lambda v: _point_text(v, align) + ("" if align == "step" else _steps_at(series, v)),
    )
    x_title = ALIGN_TEXT[align] + (" (checkpoint index)" if frame.scale == "index" else "")
    return Time(
        align=align,
        n_bins=n_bins,
        b=b,
        point=point,
        series=series,
        colours=[colour[s.run] for s in series],
        indices=[runs.checkpoint_at(s.x, point) for s in series],
        x_title=x_title,
        log_x=frame.scale == "log",
        scale=frame.scale,
        on_axis=_time_axis(stores, align=align, index=frame.scale == "index"),
    )


def _time_axis(stores: dict, *, align: runs.Align, index: bool):
    """What puts the page's charts over training on its time axis: a function that takes a list of series (moved to
    the runs' shared checkpoint index when ``index``, `analysis.findings.runs.on_index`) or a figure (its time axes then
    index ticks labelled with their times; its margins shared with the page's other time charts, `stacked`, so the
    charts one above the other line up to the pixel)."""
    grid = None
    if index:
        xs = []
        for s in stores.values():
            tokens = s.meta.tokens_at(s.steps) if align == "tokens" else None
            if align != "tokens" or tokens is not None:
                xs.append(runs.aligned_time(s.steps, align=align, tokens=tokens))
        grid = runs.index_grid(xs)
        ticks = _index_labels(grid, align=align)

    def on_axis(thing):
        if isinstance(thing, list):
            return thing if grid is None else runs.on_index(thing, grid)
        return stacked(thing if grid is None else figs.index_axes(thing, ticks), right=STACK_RIGHT)

    return on_axis


def _index_labels(grid: np.ndarray, *, align: runs.Align, most: int = INDEX_TICKS) -> tuple[list[float], list[str]]:
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


def _steps_at(series: list, point) -> str:
    """`` (run A: step 768; run B: step 1,024)``: the checkpoint each run shows at ``point``."""
    parts = []
    for s in series:
        i = runs.checkpoint_at(s.x, point)
        parts.append(f"{s.run}: step {int(s.steps[i]):,}" if i is not None else f"{s.run}: none yet")
    return " (" + "; ".join(parts) + ")"


def _info(name: str):
    """The label record of a per-head, forward or per-layer statistic."""
    return STATS[name] if name in STATS else LAYER_STATS[name]
