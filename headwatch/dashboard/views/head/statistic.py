"""The head explorer's statistic panels (tab ``statistic``): any statistic of the head against the other heads of its
layer (the overlaid heads and its random-head band too), then, for stores with both, its W_QK and W_OV on one pair of
axes.

The figures are `views.head.figures.lines`'; the CSV table of the first is `views.head.data.in_layer_table`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from headwatch.dashboard import charts, derived, export, widgets
from headwatch.dashboard.data import fixed_range
from headwatch.dashboard.figures.common import stacked
from headwatch.dashboard.labels import LAMBDA, STATS, stats_for
from headwatch.dashboard.tables import REFERENCE_FACTORS, reference_of
from headwatch.dashboard.views.head import data
from headwatch.dashboard.views.head.choice import STACK_RIGHT, Head
from headwatch.dashboard.views.head.figures import lines as lines_figs
from headwatch.dashboard.views.head.figures import over_training

STATISTIC_PANEL = "head_statistic"  # the key of the statistic against its layer (heading, choice, chart, caption)


def statistic_panels(h: Head) -> tuple[str, int | None, bool, Any] | None:
    """One statistic of the head against its layer, then (stores with both) its W_QK and W_OV on one pair of axes;
    returns `_head_in_layer`'s choice and selection, or None when the store has no values of the statistic."""
    with st.container(key=STATISTIC_PANEL):
        picked = _head_in_layer(h)
    if picked is None:
        return None
    stat, k, log_y, _ = picked
    _both_matrices(h.frame.run, h.store, h.axis, layer=h.layer, head=h.head, stat=stat, k=k, log_y=log_y)
    return picked


def _head_in_layer(h: Head) -> tuple[str, int | None, bool, Any] | None:
    """Any statistic (URL ``stat``, ``k``, ``logy``) of the head against the other heads of its layer, the overlaid
    heads and its random-head band; returns the choice and the chart's selection, or None when the store has no
    values of it (said on the page)."""
    st.subheader("One statistic, head against its layer")
    c_stat, c_k, c_log = st.columns([4, 3, 3], vertical_alignment="bottom")
    store, matrix, layer, head, pairs, run = h.store, h.matrix, h.layer, h.head, h.pairs, h.frame.run
    stat, k, log_y = widgets.statistic(
        store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log, log=("logy", "log y axis"), options=stats_for(store)
    )
    values = derived.stat_values(store, stat, k=k or 0, matrix=matrix)
    if charts.no_values(values, STATS[stat].label, matrix):
        return None
    band = reference_of(h.refs, stat, k)
    rule = data.type_threshold(store, stat)  # on a head type's score: its threshold and exit level
    shown = over_training.with_band(values, band)
    if rule is not None:  # the y range holds the lines
        shown = np.concatenate([shown.ravel(), [rule.threshold] + ([rule.exit] if rule.exit is not None else [])])
    event = charts.chart(
        h.over_time(
            lines_figs.head_in_layer(
                h.axis,
                values[:, layer, :],
                head=head,
                stat=STATS[stat],
                k=k,
                y_range=fixed_range(shown, log=log_y),
                log_y=log_y,
                chosen_x=h.chosen_x,
                colours=h.colours,
                layer=layer,
                compare=[(lay, hd, values[:, lay, hd]) for lay, hd in pairs],
                band=band,
                threshold=rule,
            )
        ),
        "head_in_layer",
        title=f"{run} · {h.shown_for(stat)} · {STATS[stat].short(k)} against its layer",
        filename=export.safe_name(run, h.tag, stat if stat != LAMBDA else f"lambda_{k}", "in-layer"),
        csv=lambda: data.in_layer_table(
            values, steps=store.steps, run=run, statistic=stat, k=k, matrix=matrix, layer=layer, pairs=pairs
        ),
        select=True,
    )
    ref = (
        f" Grey band: 5-95% over random heads of {h.w_name} (Gaussian {REFERENCE_FACTORS[matrix]} of this shape and "
        f"init scale; {band.mean:.3g} on average)."
        if band is not None
        else ""
    )
    rule_text = (
        f" Purple: this run's {rule.type} threshold {rule.threshold:.3g}, dashed"
        + (f", and exit level {rule.exit:.3g}, dotted" if rule.exit is not None else "")
        + " (meta.json types): a head holds the type from the checkpoint its score reaches the threshold, and keeps it "
        "while the score stays at or above the exit level (docs/head-types.md)."
        if rule is not None
        else ""
    )
    st.caption(
        f"{STATS[stat].short(k)} of head {head} (dark) over training, the other heads of layer {layer} "
        "in grey (click one to open it) and the layer mean red dashed"
        f"{', the overlaid heads dotted' if pairs else ''}; y range fixed over all layers and heads.{ref}{rule_text}"
    )
    return stat, k, log_y, event


def _both_matrices(run, store, axis, *, layer: int, head: int, stat: str, k, log_y: bool) -> None:
    """The chosen statistic of this head for W_QK and W_OV over training, shared axes (stores with both)."""
    if not {"qk", "ov"} <= set(store.meta.matrices):
        return
    series = {m: derived.stat_values(store, stat, k=k or 0, matrix=m)[:, layer, head] for m in ("qk", "ov")}
    if np.array_equal(series["qk"], series["ov"], equal_nan=True):  # a forward statistic: one value per head
        return
    st.subheader(f"W_QK and W_OV of L{layer} H{head}")
    both = np.concatenate(list(series.values()))
    charts.chart(
        stacked(
            lines_figs.both_matrices(axis, series, stat=STATS[stat], k=k, y_range=fixed_range(both, log=log_y), log_y=log_y),
            right=STACK_RIGHT,
        ),
        "both_matrices",
        title=f"{run} · L{layer} H{head} · {STATS[stat].short(k)} of W_QK and W_OV",
        filename=export.safe_name(run, f"L{layer}H{head}", stat if k is None else f"lambda_{k}", "qk-ov"),
        csv=lambda: pd.concat(
            export.tidy(
                derived.stat_values(store, stat, k=k or 0, matrix=m),
                store.steps,
                run=run,
                statistic=stat,
                k=k,
                matrix=m,
                layers=[layer],
                heads=[head],
            )
            for m in ("qk", "ov")
        ),
    )
    st.caption(
        f"{STATS[stat].short(k)} of head {head} of layer {layer} for both of its matrices over training, on one "
        "pair of axes (the statistic and log y chosen above; y range over both): W_QK (blue), where the head "
        "looks, and W_OV (orange), what it writes."
    )
