"""The Heads view's table: every head's row with its columns named and explained on screen, the row selection that
opens a head, the CSV of what is shown (its columns named as on screen) and the caption saying what the columns
are."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from headwatch.analysis.llc.diagnostics import FLAG_NOTES, NEGATIVE_NOTE
from headwatch.dashboard import charts, export
from headwatch.dashboard.labels import MATRIX_LABELS, STATS
from headwatch.dashboard.views.heads import data
from headwatch.dashboard.views.heads.data import Options

# How each ablation method replaces a head's output (meta.json ``ablation`` method; docs/store.md).
ABLATION_WORDS = {
    "mean": ("mean-ablated", "replaced by its mean over the evaluation tokens"),
    "zero": ("zero-ablated", "replaced by zero"),
}


def ablation_words(method: str) -> tuple[str, str]:
    """``(adjective, what replaces the output)`` for the store's ablation ``method`` (an unknown one named as is)."""
    return ABLATION_WORDS.get(method, (f"{method}-ablated", f"ablated ({method})"))


def table_panel(table: pd.DataFrame, run: str, opts: Options, note: str, *, method: str = "mean") -> Any:
    """The table, its CSV button (the columns named as on screen, the filters in its name) and its caption; returns
    the row selection. ``method``: how the store's heads were ablated (`analysis.findings.ablation.ablation_method`)."""
    stat, k, matrix, step, since, layers = opts.stat, opts.k, opts.matrix, opts.step, opts.since, opts.layers
    label = STATS[stat].short(k)
    of = f" of {MATRIX_LABELS[matrix].split(' ')[0]}" if matrix is not None else ""
    st.subheader(f"{label}{of} of every head at step {step:,}")
    by_uniform = matrix is None and "over reference" in table.columns
    ablated, replaced = ablation_words(method)
    config = {
        "layer": st.column_config.NumberColumn("layer", width="small"),
        "head": st.column_config.NumberColumn("head", width="small"),
        "matrix": st.column_config.TextColumn("matrix", width="small"),
        "value": st.column_config.NumberColumn(label, format="%.5g", help=STATS[stat].doc),
        "change": st.column_config.NumberColumn(f"change since {since:,}", format="%+.4g"),
        "rank": st.column_config.NumberColumn("rank", width="small", help="1 = the largest value at this step"),
        "over reference": st.column_config.NumberColumn(
            "÷ uniform" if by_uniform else "÷ random head",
            format="%.3g",
            help="The value divided by what uniform causal attention scores on the same sequences"
            if by_uniform
            else "The value divided by its mean over random heads (Gaussian factors of this run's shape and init σ)",
        ),
        "in 5-95% band": st.column_config.CheckboxColumn(
            "in random band", help="Within the 5-95% band of the same statistic over random heads"
        ),
        "± chains": st.column_config.NumberColumn(
            "± chains", format="%.3g", help="The standard deviation of the estimate over the sampler's chains"
        ),
        "flag": st.column_config.TextColumn(
            "flag", help="Whether the estimate's chains converged: " + "; ".join(f"{k}: {v}" for k, v in FLAG_NOTES.items())
        ),
        "type": st.column_config.TextColumn(
            "type", help="The head types the head holds at this step under the hysteresis rule (docs/head-types.md)"
        ),
        "emerged": st.column_config.NumberColumn(
            "emerged at step",
            format="%d",
            help="The first checkpoint from which the head holds its type (the filtered types, else any) to the "
            "end of training; empty: it holds none at the end",
        ),
        "probe ablation": st.column_config.NumberColumn(
            "Δ loss ablated: probe",
            format="%.4f",
            help="The loss increase on the induction probe's second copy (nats per token, positions R+1..2R-1) when the "
            f"head is {ablated} at this step (ablation.parquet; docs/store.md)",
        ),
        "± probe": st.column_config.NumberColumn("± probe", format="%.2g", help="Its standard error over the probe sequences"),
        "text ablation": st.column_config.NumberColumn(
            "Δ loss ablated: text",
            format="%.4f",
            help="The loss increase on the evaluation text (nats per token, every position) when the head is "
            f"{ablated} at this step (ablation.parquet; docs/store.md)",
        ),
        "± text": st.column_config.NumberColumn("± text", format="%.2g", help="Its standard error over the text sequences"),
        "approaches": st.column_config.NumberColumn("approaches", width="small"),
        "crossings": st.column_config.NumberColumn("crossings", width="small"),
        "repulsions": st.column_config.NumberColumn("repulsions", width="small"),
        "open": st.column_config.LinkColumn(
            "open", display_text="open ↗", width="small", help="Open the head in the head explorer"
        ),
    }
    event = st.dataframe(
        table,
        hide_index=True,
        key="heads_table",
        on_select="rerun",
        selection_mode="single-row",
        column_config=config,
        height=min(40 + 35 * len(table), 640),
    )
    filters = [*(f"L{layer}" for layer in layers), *opts.picked_types]
    charts.download(
        "Table (CSV)",
        lambda: export.to_csv(data.screen_table(table, config, run=run, stat=stat, k=k, matrix=matrix, step=step, since=since)),
        file_name=f"{export.safe_name(run, 'heads', label, 'step', step, *filters)}.csv",
        mime="text/csv",
        key="heads_table_csv",
    )
    parts = [
        f"One row per head{' of the chosen layers' if layers else ''}: {label}{of} at step {step:,}, its change "
        f"since step {since:,}, its rank among all heads (1 = largest)"
    ]
    if "in 5-95% band" in table.columns:
        parts.append("the value divided by the random-head mean and whether it lies in the random heads' 5-95% band")
    elif by_uniform:
        parts.append("the value divided by uniform attention's")
    if "type" in table.columns:
        parts.append(
            "the head types it holds at this step (previous-token, induction, sink: its score against uniform "
            "attention, an entry threshold and an exit level, docs/head-types.md) and the step from which it holds "
            "one to the end of training"
        )
    if "probe ablation" in table.columns:
        parts.append(
            "the loss increase (nats per token, ± 1 standard error over sequences) on the induction probe's second copy "
            f"and on the evaluation text when the head's output is {replaced} at this step (sort by probe "
            "ablation or text ablation for the heads the loss needs most)"
        )
    if "approaches" in table.columns:
        parts.append("and its close approaches of λ_0 … λ_3 at the chosen gap")
    if "flag" in table.columns:
        parts.append(
            "the spread of the estimate over the sampler's chains and its flag (the Refined LLC page's "
            "diagnostics; a step without estimates has none). A negative estimate: " + NEGATIVE_NOTE
        )
    st.caption(", ".join(parts) + ". Click a column header to sort, tick a row (or its *open* link) to open the head. " + note)
    return event
