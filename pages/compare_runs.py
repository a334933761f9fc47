"""Compare runs: two or more runs side by side, lined up in relative depth and in training time.

The binning and alignment are `dashboard.compare`'s, the figures `dashboard.figures.compare`'s. A run
that cannot be opened, or lacks the statistic or the matrix, is named in a warning; the others are shown.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from analysis.errors import StoreError
from analysis.store.format import ATTENTION, HEAD_TYPES, LAYER_ROLES, LAYERS, LLC
from dashboard import charts, compare, export, loader, viewstate, widgets
from dashboard.data import loss_curve
from dashboard.figures import compare as figs
from dashboard.figures.common import stacked
from dashboard.head_types import head_types, missing_text
from dashboard.labels import LAMBDA, LAYER_STATS, MATRIX_LABELS, STATS, layer_column, stats_for

STACK_RIGHT = 24  # px: the time charts' right margin (their legends sit above them)
ALIGN_TEXT = {"step": "step", "tokens": "tokens seen", "fraction": "fraction of the run"}
_SCALE_TEXT = {  # what the sidebar's time scale does here
    "linear": "",
    "log": "Log time axis (the sidebar): x plus one step. ",
    "index": "Checkpoint-index axis (the sidebar): every time at which some run has a checkpoint, one unit apart, "
    "its ticks labelled with that time. ",
}
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


@dataclass(frozen=True)
class _Statistic:
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
class _Time:
    """How the runs line up in time and depth (the widgets above the panels), and the runs as series.

    Attributes:
        align: ``step``, ``tokens`` or ``fraction`` (URL ``align``); n_bins, b: the depth bins and the one
            shown head by head (URL ``nbins``, ``bin``); point: the point of training (URL ``point``).
        series: each shown run's statistic on the aligned time axis; colours: each one's colour index.
        indices: each run's checkpoint at or before ``point`` (None when it has none).
        x_title: the time axis's title; log_x: the sidebar's log time scale; scale: the sidebar's time scale.
        on_axis: puts series and figures on the page's time axis (`_time_axis`).
    """

    align: compare.Align
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


def main() -> None:
    st.title("Compare runs")
    # --- empty case: nothing offered ---
    frame = viewstate.frame()
    if not frame.runs:
        st.info(
            "No runs to compare: put statistics stores under data/ (`python -m precompute --out data/NAME`), "
            "or point HEADWATCH_STORE at one."
        )
        return

    # --- widgets: the runs; open them (one that cannot be opened is named, the others shown) ---
    runs = _pick_runs(frame)
    colour = {r: i for i, r in enumerate(runs)}  # a run keeps its colour when another is left out
    stores = _open_runs(frame, runs)
    if not stores:
        return

    # --- widgets: statistic and matrix (every statistic some run has; a run without it is named below) ---
    pick = _pick_statistic(stores)
    shown = _run_values(stores, pick)
    if not shown:
        st.info("None of the chosen runs has this statistic; choose another.")
        return

    # --- widgets: time alignment, depth bins, the point of training ---
    time = _pick_time(frame, stores, shown, colour)

    # --- in numbers: the statistic at the point and each run's loss, where curves overlap ---
    _summary_section(
        time.series, time.indices, shown, label=pick.info.short(), what=pick.what, point=time.point_text, unit=pick.unit
    )

    # --- panel (a): mean and spread per relative-depth bin over training ---
    _bands_panel(pick, time)
    if pick.info.llc:
        st.caption(_llc_trust({s.run: stores[s.run] for s in time.series}))

    # --- panel (b): one depth bin's heads, run by run on shared axes ---
    _bin_panel(pick, time)

    # --- panel (c): the distribution over all heads (layers) at one point of training ---
    _distribution_panel(pick, time)

    # --- panel: heads of each type over training ---
    _type_counts_panel(stores, colour, time)

    # --- panel (d): the runs' losses on the same time axis ---
    _loss_panel(shown, colour, time)


def _pick_runs(frame) -> list[str]:
    """The runs multiselect (URL ``runs``): the sidebar's run and one more by default; asks for a second."""
    names = list(frame.runs)
    default = ([frame.run] if frame.run in frame.runs else []) + [n for n in names if n != frame.run][:1]
    runs = widgets.multiselect(
        "runs", "Runs", names, default, hint=UNKNOWN_RUN, help="Two or more runs; every run the sidebar's run picker offers."
    )
    if len(runs) < 2:
        st.info("Choose two or more runs to compare (every run the sidebar's run picker offers is in the list).")
    return runs


def _open_runs(frame, runs: list[str]) -> dict:
    """The stores of ``runs`` that open and have checkpoints; each other one is named in a warning."""
    stores = {}
    for r in runs:
        opened = loader.try_load_store(frame.runs[r])
        if isinstance(opened, StoreError):
            st.warning(f"Run **{r}** cannot be opened and is left out: {opened}", icon=":material/error:")
        elif len(opened.steps) == 0:
            st.warning(
                f"Run **{r}** has no checkpoints with statistics yet and is left out; run `python -m precompute` on it first.",
                icon=":material/error:",
            )
        else:
            stores[r] = opened
    return stores


def _pick_statistic(stores: dict) -> _Statistic:
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
                tables[r] = loader.layer_column(s, layer_column(stat)) if s.has(LAYERS) else None
            except StoreError as exc:
                st.warning(f"Run **{r}**: {exc}", icon=":material/error:")
                tables[r] = None
        roles = [x for x in LAYER_ROLES if any(t is not None and x in set(t["role"]) for t in tables.values())] or ["attn_out"]
        matrix = widgets.select("role", "Weight", roles, "attn_out" if "attn_out" in roles else roles[0], where=c_matrix)
    elif not info.forward and not info.llc:  # the forward lens and the refined LLC are per head, whatever the matrix
        kinds = [m for m in MATRIX_LABELS if any(m in s.meta.matrices for s in stores.values())] or ["qk"]
        matrix = widgets.select("matrix", "Matrix", kinds, kinds[0], fmt=MATRIX_LABELS.__getitem__, kind="radio", where=c_matrix)
    log_y = widgets.toggle("logy", "log y", False, where=c_log) if info.positive else False
    return _Statistic(stat=stat, info=info, matrix=matrix, log_y=log_y, have=have, tables=tables)


def _run_values(stores: dict, pick: _Statistic) -> dict:
    """run -> (store, values ``(S, n_layers, n_units)``) of every run that has the statistic; the others are named
    in a warning that says how to add what they lack."""
    info, matrix, stat = pick.info, pick.matrix, pick.stat
    shown = {}
    for r, s in stores.items():
        if pick.per_layer:
            if pick.tables[r] is None:
                st.warning(
                    f"Run **{r}** has no whole-layer matrices (`layers.parquet`), so no {info.short()}; it is "
                    f"left out. Add them with `python -m precompute --source SOURCE --out {s.path} --matrices "
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
            values = compare.layer_values(table, s.steps, n_layers=s.n_layers, role=matrix, column=layer_column(stat))
            shown[r] = (s, values)
            continue
        if info.forward and not s.has(ATTENTION):
            st.warning(
                f"Run **{r}** has no forward-lens tables, so no {info.short()}; it is left out. Add them with "
                f"`python -m precompute --source SOURCE --out {s.path} --lenses attention`.",
                icon=":material/visibility_off:",
            )
            continue
        if info.llc and not s.has(LLC):
            st.warning(
                f"Run **{r}** has no refined LLC (`llc.parquet`) and is left out. Add it with "
                f"`python -m precompute --source SOURCE --out {s.path} --lenses llc`.",
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
                f"so it is left out here. A rerun of `python -m precompute --source SOURCE --out {s.path}` with "
                "its checkpoints adds them; or choose another matrix.",
                icon=":material/visibility_off:",
            )
            continue
        values = loader.stat_values(s, stat, matrix=matrix if matrix in ("qk", "ov") else "qk")
        if not np.isfinite(values).any():
            st.warning(
                f"Run **{r}** has no values of {info.short()} for {matrix.upper()} and is left out: the circuit "
                "columns and the relative change came with schema version 3 (rerun `python -m precompute` on "
                "the store with its checkpoints to add them; the relative change also needs overlaps, "
                "`--overlap-k` > 0).",
                icon=":material/visibility_off:",
            )
            continue
        shown[r] = (s, values)
    return shown


def _pick_time(frame, stores: dict, shown: dict, colour: dict) -> _Time:
    """The alignment, the depth bins and the bin shown (one row), then the point of training; the runs as series."""
    tokens = {r: s.meta.tokens_at(s.steps) for r, (s, _) in shown.items()}
    no_tokens = [r for r, t in tokens.items() if t is None]
    c_align, c_bins, c_bin = st.columns([3, 2, 2])
    aligns = [a for a in compare.ALIGNMENTS if a != "tokens" or not no_tokens]
    align = widgets.select(
        "align",
        "Align runs by",
        aligns,
        "fraction",
        kind="radio",
        fmt=ALIGN_TEXT.__getitem__,
        where=c_align,
        help="; ".join(f"{k}: {v}" for k, v in compare.ALIGNMENTS.items()),
    )
    if no_tokens:
        c_align.caption(f"Tokens seen are not recorded for {', '.join(no_tokens)}, so runs align by step or fraction.")
    n_bins = widgets.select(
        "nbins",
        "Depth bins",
        list(compare.BIN_COUNTS),
        compare.DEFAULT_BINS,
        where=c_bins,
        help="relative depth = layer / n_layers, cut into this many bins of equal width",
    )
    b = widgets.select(
        "bin",
        "Depth bin shown head by head",
        list(range(n_bins)),
        n_bins - 1,
        where=c_bin,
        fmt=lambda i: compare.bin_label(i, n_bins),
    )
    series = [
        compare.run_series(
            r,
            s.steps,
            values,
            align=align,
            tokens=tokens[r] if align == "tokens" else None,
            tokens_per_step=s.meta.tokens_per_step,
        )
        for r, (s, values) in shown.items()
    ]
    points = compare.point_options([s.x for s in series], align=align)
    point = widgets.select(
        "point",
        "Point of training (the table and the distribution over heads; each run at its last checkpoint at or before it)",
        points,
        compare.default_point(points, [s.x for s in series]),
        kind="select_slider",
        fmt=lambda v: _point_text(v, align) + ("" if align == "step" else _steps_at(series, v)),
    )
    x_title = ALIGN_TEXT[align] + (" (checkpoint index)" if frame.scale == "index" else "")
    return _Time(
        align=align,
        n_bins=n_bins,
        b=b,
        point=point,
        series=series,
        colours=[colour[s.run] for s in series],
        indices=[compare.checkpoint_at(s.x, point) for s in series],
        x_title=x_title,
        log_x=frame.scale == "log",
        scale=frame.scale,
        on_axis=_time_axis(stores, align=align, index=frame.scale == "index"),
    )


def _bands_panel(pick: _Statistic, time: _Time) -> None:
    """Panel (a): the mean and spread of each relative-depth bin over training, every run in its colour."""
    series, n_bins, unit = time.series, time.n_bins, pick.unit
    st.subheader(f"Mean over the {unit}s of each depth bin, over training")
    charts.chart(
        time.on_axis(
            figs.depth_bands(
                time.on_axis(series),
                n_bins=n_bins,
                stat_title=pick.info.title(),
                x_title=time.x_title,
                log_x=time.log_x,
                log_y=pick.log_y,
                colours=time.colours,
            )
        ),
        "compare_bands",
        title=f"{time.runs_title} · {pick.what} by relative depth",
        filename=export.safe_name("compare", *[s.run for s in series], pick.stat, pick.matrix, "depth"),
        csv=lambda: _bands_csv(series, n_bins, pick.stat, pick.matrix),
    )
    layers_text = "; ".join(
        f"{s.run} ({s.n_layers} layers): "
        + ", ".join(
            f"{compare.bin_label(i, n_bins)} L{'-'.join(map(str, _ends(compare.bin_layers(s.n_layers, n_bins, i))))}"
            if compare.bin_layers(s.n_layers, n_bins, i)
            else f"{compare.bin_label(i, n_bins)} none"
            for i in range(n_bins)
        )
        for s in series
    )
    st.caption(
        f"Relative depth is layer / n_layers (0 for the first layer), cut into {n_bins} bins of width 1/{n_bins}, "
        f"so models of different depth line up: {layers_text}. Line: the mean of {pick.what} over every {unit} of the "
        f"bin's layers; band: ±1 standard deviation over the same {unit}s (population). Each run is drawn at its "
        f"own checkpoints (markers), aligned by {compare.ALIGNMENTS[time.align]}; nothing is interpolated. "
        f"{_SCALE_TEXT[time.scale]}The sidebar's time-axis unit does "
        "not apply here: this page's alignment does."
    )


def _bin_panel(pick: _Statistic, time: _Time) -> None:
    """Panel (b): one depth bin's heads (or layers), one panel per run on shared axes."""
    series, n_bins, b, unit = time.series, time.n_bins, time.b, pick.unit
    st.subheader(f"Depth bin {compare.bin_label(b, n_bins)}: every {unit}, run by run")
    charts.chart(
        time.on_axis(
            figs.bin_heads(
                time.on_axis(series),
                b=b,
                n_bins=n_bins,
                stat_title=pick.info.title(),
                x_title=time.x_title,
                log_x=time.log_x,
                log_y=pick.log_y,
                colours=time.colours,
                unit="" if pick.per_layer else "H",
            )
        ),
        "compare_bin",
        title=f"{time.runs_title} · {pick.what}, depth {compare.bin_label(b, n_bins)}",
        filename=export.safe_name("compare", *[s.run for s in series], pick.stat, pick.matrix, "bin", b),
        csv=lambda: _bin_csv(series, n_bins, b, pick.stat, pick.matrix),
    )
    st.caption(
        f"One panel per run, all on the same axes: each {unit} of the bin's layers is a thin line with a marker "
        "at each of its run's checkpoints, the bin's mean dashed black."
    )


def _distribution_panel(pick: _Statistic, time: _Time) -> None:
    """Panel (c): the distribution over every head (or layer) of each run at the point of training."""
    series, indices, unit = time.series, time.indices, pick.unit
    st.subheader(f"Distribution over {unit}s at {time.point_text}")
    charts.chart(
        figs.distributions(
            series, indices, stat_title=pick.info.title(), x_label=time.x_title, colours=time.colours, log_x=pick.log_y, unit=unit
        ),
        "compare_dist",
        title=f"{time.runs_title} · {pick.what} over {unit}s at {time.point_text}",
        filename=export.safe_name("compare", *[s.run for s in series], pick.stat, pick.matrix, "at", time.point),
        csv=lambda: _dist_csv(series, indices, pick.stat, pick.matrix),
    )
    used = "; ".join(
        f"{s.run}: step {int(s.steps[i]):,}" + ("" if time.align == "step" else f" ({time.x_title} {s.x[i]:.4g})")
        if i is not None
        else f"{s.run}: no checkpoint at or before this point (left out)"
        for s, i in zip(series, indices, strict=True)
    )
    st.caption(
        f"Empirical cumulative distribution of {pick.what} over all {unit}s of each run. Each run at its last "
        f"checkpoint at or before {time.point_text}: {used}."
    )


def _loss_panel(shown: dict, colour: dict, time: _Time) -> None:
    """Panel (d): each run's recorded loss on the page's time axis (runs without one are not drawn)."""
    curves = [(s, *c) for s, c in ((s, loss_curve(shown[s.run][0])) for s in time.series) if c is not None]
    if not curves:
        return
    st.subheader("Loss over training")
    charts.chart(
        time.on_axis(
            figs.losses(
                [(d, loss, lab) for d, (_, loss, lab) in zip(time.on_axis([s for s, _, _ in curves]), curves, strict=True)],
                x_title=time.x_title,
                log_x=time.log_x,
                colours=[colour[s.run] for s, _, _ in curves],
            )
        ),
        "compare_loss",
        title=f"{time.runs_title} · loss",
        filename=export.safe_name("compare", *[s.run for s, _, _ in curves], "loss"),
        csv=lambda: pd.concat(
            [
                pd.DataFrame(
                    {"run": s.run, "statistic": lab, "step": s.steps, "time": s.x, "value": np.asarray(loss, dtype=np.float64)}
                )
                for s, loss, lab in curves
            ],
            ignore_index=True,
        ),
    )
    st.caption(
        "Each run's loss as recorded with it (the forward lens's eval loss, else the validation loss of a "
        "run trained here), at its own checkpoints; runs without either are not drawn."
    )


def _time_axis(stores: dict, *, align: compare.Align, index: bool):
    """What puts the page's charts over training on its time axis: a function that takes a list of series (moved to
    the runs' shared checkpoint index when ``index``, `dashboard.compare.on_index`) or a figure (its time axes then
    index ticks labelled with their times; its margins shared with the page's other time charts, `stacked`, so the
    charts one above the other line up to the pixel)."""
    grid = None
    if index:
        xs = []
        for s in stores.values():
            tokens = s.meta.tokens_at(s.steps) if align == "tokens" else None
            if align != "tokens" or tokens is not None:
                xs.append(compare.aligned_time(s.steps, align=align, tokens=tokens))
        grid = compare.index_grid(xs)
        ticks = compare.index_labels(grid, align=align)

    def on_axis(thing):
        if isinstance(thing, list):
            return thing if grid is None else compare.on_index(thing, grid)
        return stacked(thing if grid is None else figs.index_axes(thing, ticks), right=STACK_RIGHT)

    return on_axis


def _type_counts_panel(stores: dict, colour: dict, time: _Time) -> None:
    """How many heads hold each head type over training, every run with head types on the page's time axis; the
    runs without them are named with the command that adds them."""
    st.subheader("Heads of each type over training")
    series, lacking = [], []
    for r, s in stores.items():
        kinds = head_types(s)
        tokens = s.meta.tokens_at(s.steps) if time.align == "tokens" else None
        if kinds is None or (time.align == "tokens" and tokens is None):
            lacking.append((r, s))
            continue
        counts = kinds.counts()
        values = np.stack([counts[name] for name in HEAD_TYPES], axis=-1)[:, None, :]  # (S, 1, types)
        series.append(
            compare.run_series(r, s.steps, values, align=time.align, tokens=tokens, tokens_per_step=s.meta.tokens_per_step)
        )
    for r, s in lacking:
        st.caption(f"Run **{r}**: " + missing_text(s.path))
    if not series:
        return
    charts.chart(
        time.on_axis(
            figs.type_counts(
                time.on_axis(series),
                types=HEAD_TYPES,
                x_title=time.x_title,
                log_x=time.log_x,
                colours=[colour[s.run] for s in series],
            )
        ),
        "compare_types",
        title=" vs ".join(s.run for s in series) + " · heads of each type",
        filename=export.safe_name("compare", *[s.run for s in series], "head-types"),
        csv=lambda: pd.concat(
            [
                pd.DataFrame(
                    {"run": s.run, "type": name, "step": s.steps, "time": s.x, "heads": s.values[:, 0, i].astype(np.int64)}
                )
                for s in series
                for i, name in enumerate(HEAD_TYPES)
            ],
            ignore_index=True,
        ),
    )
    rules = {name: r for s in stores.values() for name, r in ((s.meta.types or {}).get("types") or {}).items() if s.meta.types}
    st.caption(
        "One line per run (colour) and head type (solid: previous-token, dashed: induction, dotted: sink): how many "
        "of the run's heads hold the type at each of its checkpoints, under the rule of docs/head-types.md (score "
        "at least the entry threshold, kept until it falls below the exit level; thresholds: "
        + ", ".join(f"{name} {r['threshold']:.3g}" for name, r in rules.items())
        + f"). Aligned by {compare.ALIGNMENTS[time.align]}, as above."
    )


def _steps_at(series: list, point) -> str:
    """`` (run A: step 768; run B: step 1,024)``: the checkpoint each run shows at ``point``."""
    parts = []
    for s in series:
        i = compare.checkpoint_at(s.x, point)
        parts.append(f"{s.run}: step {int(s.steps[i]):,}" if i is not None else f"{s.run}: none yet")
    return " (" + "; ".join(parts) + ")"


def _summary_section(series: list, indices: list, shown: dict, *, label: str, what: str, point: str, unit: str) -> None:
    """A small table of numbers per run: the statistic over its units at the point, the final and minimum loss."""
    st.subheader("In numbers")
    losses = {s.run: c for s in series if (c := loss_curve(shown[s.run][0])) is not None}
    table = compare.summary_table(series, indices, losses, unit=unit)
    fmt = st.column_config.NumberColumn
    st.dataframe(
        table,
        hide_index=True,
        key="compare_summary",
        column_config={
            "step used": fmt(format="%d"),
            f"mean over {unit}s": fmt(format="%.4g"),
            "median": fmt(format="%.4g"),
            "smallest": fmt(format="%.4g"),
            "largest": fmt(format="%.4g"),
            "final loss": fmt(format="%.4f"),
            "final loss step": fmt(format="%d"),
            "minimum loss": fmt(format="%.4f"),
            "minimum loss step": fmt(format="%d"),
        },
    )
    st.caption(
        f"Per run: {what} over its {unit}s at {point} (mean, median, smallest and largest), at the run's last "
        "checkpoint at or before that point (step used); the run's loss at its last checkpoint and its smallest loss, "
        "with their steps (loss: what the run recorded, named in the last column). The point is the slider above."
    )
    st.download_button(
        "Download this table (CSV)",
        table.to_csv(index=False),
        file_name=export.safe_name("compare", *[s.run for s in series], label, "summary") + ".csv",
        mime="text/csv",
        key="compare_summary_csv",
    )


def _info(name: str):
    """The label record of a per-head, forward or per-layer statistic."""
    return STATS[name] if name in STATS else LAYER_STATS[name]


def _llc_trust(stores: dict) -> str:
    """How far each run's refined-LLC estimates can be trusted: flagged and negative estimates, per run."""
    parts = []
    for run, store in stores.items():
        values = store.dense(LLC, "llc")
        n = int(np.isfinite(values).sum())
        negative = int((values < 0).sum())
        flagged = loader.llc_flags(store)
        if flagged is None:
            parts.append(f"**{run}**: {n} estimates, no chain diagnostics stored; {negative} negative")
            continue
        counts = Counter(f for f in flagged[0].ravel() if f)
        unsure = ", ".join(f"{c} {f}" for f, c in sorted(counts.items()) if f != "converged") or "none flagged"
        parts.append(f"**{run}**: {n} estimates, {counts.get('converged', 0)} converged ({unsure}); {negative} negative")
    return (
        "Refined-LLC estimates are sampled: " + "; ".join(parts) + ". Flags and their rule, and what a negative estimate "
        "means, on the Refined LLC page; the bands above average flagged estimates with the others."
    )


def _ends(layers: list[int]) -> list[int]:
    return [layers[0]] if len(layers) == 1 else [layers[0], layers[-1]]


def _bands_csv(series: list, n_bins: int, stat: str, matrix: str) -> pd.DataFrame:
    """Panel (a)'s points: run, bin, its depth interval, step, aligned time, mean, sd, heads in the bin."""
    rows = []
    for s in series:
        mean, sd, count = compare.bin_summary(s.values, n_bins)
        for b in range(n_bins):
            if count[b]:
                rows.append(
                    pd.DataFrame(
                        {
                            "run": s.run,
                            "matrix": matrix,
                            "statistic": stat,
                            "bin": b,
                            "depth": compare.bin_label(b, n_bins),
                            "step": s.steps,
                            "time": s.x,
                            "mean": mean[:, b],
                            "sd": sd[:, b],
                            "heads": int(count[b]),
                        }
                    )
                )
    return pd.concat(rows, ignore_index=True)


def _bin_csv(series: list, n_bins: int, b: int, stat: str, matrix: str) -> pd.DataFrame:
    """Panel (b)'s points, tidy, with each checkpoint's aligned time."""
    parts = []
    for s in series:
        layers = compare.bin_layers(s.n_layers, n_bins, b)
        if layers:
            rows = export.tidy(s.values, s.steps, run=s.run, statistic=stat, matrix=matrix, layers=layers)
            parts.append(rows.assign(time=np.repeat(s.x, len(layers) * s.values.shape[2])))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=export.TIDY_COLUMNS)


def _dist_csv(series: list, indices: list, stat: str, matrix: str) -> pd.DataFrame:
    """Panel (c)'s values: every head of each run at the checkpoint used."""
    parts = [
        export.tidy(s.values[i : i + 1], s.steps[i : i + 1], run=s.run, statistic=stat, matrix=matrix)
        for s, i in zip(series, indices, strict=True)
        if i is not None
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=export.TIDY_COLUMNS)


main()
