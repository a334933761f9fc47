"""The Compare runs page's panels (`views.compare.page` lays them out): the numbers per run, the depth bins'
means over training, one bin's heads, the distribution over heads at a point, the head-type counts and the losses,
one function each, reading the page's choices (`views.compare.choice`, `views.compare.alignment`).

What the panels say is computed in `analysis.findings.comparison` (depth bins, alignment, the numbers per run, the
head-type counts) and `views.compare.data` (the captions' words, the charts' tables); the figures are
`views.compare.figures`' and `views.compare.figures.depth`'.
"""

from __future__ import annotations

import streamlit as st

from headwatch.analysis.findings import comparison
from headwatch.analysis.findings.held_types import missing_text
from headwatch.analysis.store.lenses.types import HEAD_TYPES
from headwatch.dashboard import charts, derived, export
from headwatch.dashboard.data import loss_curve
from headwatch.dashboard.views.compare import data, figures
from headwatch.dashboard.views.compare.alignment import Time
from headwatch.dashboard.views.compare.choice import Statistic
from headwatch.dashboard.views.compare.figures import depth as depth_figures

_SCALE_TEXT = {  # what the sidebar's time scale does here
    "linear": "",
    "log": "Log time axis (the sidebar): x plus one step. ",
    "index": "Checkpoint-index axis (the sidebar): every time at which some run has a checkpoint, one unit apart, "
    "its ticks labelled with that time. ",
}


def bands_panel(pick: Statistic, time: Time, stores: dict) -> None:
    """Panel (a): the mean and spread of each relative-depth bin over training, every run in its colour (for the
    refined LLC, how far each run's estimates can be trusted)."""
    series, n_bins, unit = time.series, time.n_bins, pick.unit
    st.subheader(f"Mean over the {unit}s of each depth bin, over training")
    charts.chart(
        time.on_axis(
            depth_figures.depth_bands(
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
        csv=lambda: comparison.bands_frame(series, n_bins, stat=pick.stat, matrix=pick.matrix),
    )
    layers_text = data.bins_text(series, n_bins)
    st.caption(
        f"Relative depth is layer / n_layers (0 for the first layer), cut into {n_bins} bins of width 1/{n_bins}, "
        f"so models of different depth line up: {layers_text}. Line: the mean of {pick.what} over every {unit} of the "
        f"bin's layers; band: ±1 standard deviation over the same {unit}s (population). Each run is drawn at its "
        f"own checkpoints (markers), aligned by {comparison.ALIGNMENTS[time.align]}; nothing is interpolated. "
        f"{_SCALE_TEXT[time.scale]}The sidebar's time-axis unit does "
        "not apply here: this page's alignment does."
    )
    if pick.info.llc:
        shown = {s.run: stores[s.run] for s in series}
        st.caption(data.llc_trust_text(shown, {r: derived.llc_flags(store) for r, store in shown.items()}))


def bin_panel(pick: Statistic, time: Time) -> None:
    """Panel (b): one depth bin's heads (or layers), one panel per run on shared axes."""
    series, n_bins, b, unit = time.series, time.n_bins, time.b, pick.unit
    st.subheader(f"Depth bin {comparison.bin_label(b, n_bins)}: every {unit}, run by run")
    charts.chart(
        time.on_axis(
            depth_figures.bin_heads(
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
        title=f"{time.runs_title} · {pick.what}, depth {comparison.bin_label(b, n_bins)}",
        filename=export.safe_name("compare", *[s.run for s in series], pick.stat, pick.matrix, "bin", b),
        csv=lambda: data.bin_csv(series, n_bins, b, pick.stat, pick.matrix),
    )
    st.caption(
        f"One panel per run, all on the same axes: each {unit} of the bin's layers is a thin line with a marker "
        "at each of its run's checkpoints, the bin's mean dashed black."
    )


def distribution_panel(pick: Statistic, time: Time) -> None:
    """Panel (c): the distribution over every head (or layer) of each run at the point of training."""
    series, indices, unit = time.series, time.indices, pick.unit
    st.subheader(f"Distribution over {unit}s at {time.point_text}")
    charts.chart(
        figures.distributions(
            series, indices, stat_title=pick.info.title(), x_label=time.x_title, colours=time.colours, log_x=pick.log_y, unit=unit
        ),
        "compare_dist",
        title=f"{time.runs_title} · {pick.what} over {unit}s at {time.point_text}",
        filename=export.safe_name("compare", *[s.run for s in series], pick.stat, pick.matrix, "at", time.point),
        csv=lambda: data.dist_csv(series, indices, pick.stat, pick.matrix),
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


def loss_panel(shown: dict, colour: dict, time: Time) -> None:
    """Panel (d): each run's recorded loss on the page's time axis (runs without one are not drawn)."""
    curves = [(s, *c) for s, c in ((s, loss_curve(shown[s.run][0])) for s in time.series) if c is not None]
    if not curves:
        return
    st.subheader("Loss over training")
    charts.chart(
        time.on_axis(
            figures.losses(
                [(d, loss, lab) for d, (_, loss, lab) in zip(time.on_axis([s for s, _, _ in curves]), curves, strict=True)],
                x_title=time.x_title,
                log_x=time.log_x,
                colours=[colour[s.run] for s, _, _ in curves],
            )
        ),
        "compare_loss",
        title=f"{time.runs_title} · loss",
        filename=export.safe_name("compare", *[s.run for s, _, _ in curves], "loss"),
        csv=lambda: data.losses_csv(curves),
    )
    st.caption(
        "Each run's loss as recorded with it (the forward lens's eval loss, else the validation loss of a "
        "run trained here), at its own checkpoints; runs without either are not drawn."
    )


def type_counts_panel(stores: dict, colour: dict, time: Time) -> None:
    """How many heads hold each head type over training, every run with head types on the page's time axis; the
    runs without them are named with the command that adds them."""
    st.subheader("Heads of each type over training")
    series, lacking = [], []
    for r, s in stores.items():
        counted = comparison.type_count_series(r, s, align=time.align)
        if counted is None:
            lacking.append((r, s))
        else:
            series.append(counted)
    for r, s in lacking:
        st.caption(f"Run **{r}**: " + missing_text(s.path))
    if not series:
        return
    charts.chart(
        time.on_axis(
            figures.type_counts(
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
        csv=lambda: comparison.type_counts_frame(series),
    )
    st.caption(
        "One line per run (colour) and head type (solid: previous-token, dashed: induction, dotted: sink, dash-dot: "
        "current-token, long dash: multigram, long dash-dot: other; a type a run does not decide has no line, and "
        "multigram and other are counted at the checkpoints with tokens in context only; the legend keys the runs' "
        "colours and the types' dashes, and clicking a type there hides its lines in every run): how many "
        "of the run's heads hold the type at each of its checkpoints, under the rule of docs/head-types.md (score "
        "at least the entry threshold, kept while it stays at or above the exit level). Each run's own entry thresholds "
        "(the larger of an absolute share and a multiple of the score of uniform attention on that run's sequences) "
        "and exit levels, as its meta.json records them: "
        + data.thresholds_text({s.run: stores[s.run] for s in series})
        + f". Aligned by {comparison.ALIGNMENTS[time.align]}, as above."
    )


def summary_section(pick: Statistic, time: Time, shown: dict) -> None:
    """A small table of numbers per run: the statistic over its units at the point, the final and minimum loss
    (`analysis.findings.comparison.summary_table`)."""
    series, indices, what, point, unit = time.series, time.indices, pick.what, time.point_text, pick.unit
    st.subheader("In numbers")
    losses = {s.run: c for s in series if (c := loss_curve(shown[s.run][0])) is not None}
    table = comparison.summary_table(series, indices, losses, unit=unit)
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
    charts.table_csv(
        table, export.safe_name("compare", *[s.run for s in series], pick.info.short(), "summary"), key="compare_summary_csv"
    )


def emergence_section(stores: dict) -> None:
    """When each head type formed in each run (`analysis.findings.comparison.emergence_table`), with its CSV."""
    table = comparison.emergence_table(stores)
    if table.empty:
        return
    st.subheader("When each head type formed")
    fmt = st.column_config.NumberColumn
    st.dataframe(
        table,
        hide_index=True,
        key="compare_emergence",
        column_config={
            "first formed at step": fmt(format="%d"),
            "fraction of the run": fmt(format="%.3f"),
            "last formed at step": fmt(format="%d"),
        },
    )
    st.caption(
        "Per run and head type: the checkpoint from which its first heads hold the type to the end of training (their "
        "emergence step, docs/head-types.md), that step over the run's last step, those heads, how many heads hold the "
        "type at the end and when the last of them formed; a step shown as None: no head holds the type at the end. The "
        "Timeline of each run links every head to its evidence."
    )
    charts.table_csv(table, export.safe_name("compare", *stores, "emergence"), key="compare_emergence_csv")
