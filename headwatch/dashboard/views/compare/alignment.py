"""How the Compare runs page lines the runs up (`views.compare.page` lays it out): the alignment, the depth bins, the
bin shown head by head and the point of training, with the runs as series on that time axis, as one frozen record
(`Time`) that the panels (`views.compare.panels`) read.

Alignment, bins and the checkpoint at a point are `analysis.findings.comparison`'s; the checkpoint-index axis's times and
labels `views.compare.data`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from headwatch.analysis.findings import comparison
from headwatch.dashboard import widgets
from headwatch.dashboard.figures.common import stacked
from headwatch.dashboard.views.compare import data, figures

STACK_RIGHT = 24  # px: the time charts' right margin (their legends sit above them)


ALIGN_TEXT = {"step": "step", "tokens": "tokens seen", "fraction": "fraction of the run"}


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

    align: comparison.Align
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
        return data.point_text(self.point, self.align)


def pick_time(frame, stores: dict, shown: dict, colour: dict) -> Time:
    """The alignment, the depth bins and the bin shown (one row), then the point of training; the runs as series."""
    tokens = {r: s.meta.tokens_at(s.steps) for r, (s, _) in shown.items()}
    no_tokens = [r for r, t in tokens.items() if t is None]
    c_align, c_bins, c_bin = st.columns([3, 2, 2])
    aligns = [a for a in comparison.ALIGNMENTS if a != "tokens" or not no_tokens]
    align = widgets.select(
        "align",
        "Align runs by",
        aligns,
        "fraction",
        kind="radio",
        fmt=ALIGN_TEXT.__getitem__,
        where=c_align,
        help="; ".join(f"{k}: {v}" for k, v in comparison.ALIGNMENTS.items()),
    )
    if no_tokens:
        c_align.caption(f"Tokens seen are not recorded for {', '.join(no_tokens)}, so runs align by step or fraction.")
    n_bins = widgets.select(
        "nbins",
        "Depth bins",
        list(comparison.BIN_COUNTS),
        comparison.DEFAULT_BINS,
        where=c_bins,
        help="relative depth = layer / n_layers, cut into this many bins of equal width",
    )
    b = widgets.select(
        "bin",
        "Depth bin shown head by head",
        list(range(n_bins)),
        comparison.default_bin([s.n_layers for s, _ in shown.values()], n_bins),
        where=c_bin,
        fmt=lambda i: comparison.bin_label(i, n_bins),
    )
    series = [
        comparison.run_series(
            r,
            s.steps,
            values,
            align=align,
            tokens=tokens[r] if align == "tokens" else None,
            tokens_per_step=s.meta.tokens_per_step,
        )
        for r, (s, values) in shown.items()
    ]
    points = comparison.point_options([s.x for s in series], align=align)
    point = widgets.select(
        "point",
        "Point of training (the table and the distribution over heads; each run at its last checkpoint at or before it)",
        points,
        comparison.default_point(points, [s.x for s in series]),
        kind="select_slider",
        fmt=lambda v: data.point_text(v, align) + ("" if align == "step" else data.steps_at(series, v)),
    )
    x_title = ALIGN_TEXT[align] + (" (checkpoint index)" if frame.scale == "index" else "")
    return Time(
        align=align,
        n_bins=n_bins,
        b=b,
        point=point,
        series=series,
        colours=[colour[s.run] for s in series],
        indices=[comparison.checkpoint_at(s.x, point) for s in series],
        x_title=x_title,
        log_x=frame.scale == "log",
        scale=frame.scale,
        on_axis=_time_axis(stores, align=align, index=frame.scale == "index"),
    )


def _time_axis(stores: dict, *, align: comparison.Align, index: bool):
    """What puts the page's charts over training on its time axis: a function that takes a list of series (moved to
    the runs' shared checkpoint index when ``index``, `analysis.findings.comparison.on_index`) or a figure (its time axes then
    index ticks labelled with their times; its margins shared with the page's other time charts, `stacked`, so the
    charts one above the other line up to the pixel)."""
    grid = None
    if index:
        grid = data.time_grid(stores, align=align)
        ticks = data.index_labels(grid, align=align)

    def on_axis(thing):
        if isinstance(thing, list):
            return thing if grid is None else comparison.on_index(thing, grid)
        return stacked(thing if grid is None else figures.index_axes(thing, ticks), right=STACK_RIGHT)

    return on_axis
