"""Heads: every head as one row of a sortable, filterable table of a statistic, and every close approach.

A row opens its head in the head explorer (with this page's statistic and step). This module: the layout, the widgets
read into one record (`views.heads.data.Options`), the table's rows gathered from the store's caches, the model's
close approaches; the table's panel is `views.heads.table`'s, the rows' columns, order and links
`views.heads.data`'s.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.ablation import ablation_effect, ablation_method, missing_ablation_text
from headwatch.analysis.findings.held_types import TYPE_LABELS, head_types, missing_text
from headwatch.analysis.findings.values import llc_shown
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.ablation import ABLATION
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, llc_data_order, llc_data_words
from headwatch.analysis.store.lenses.types import HEAD_TYPES
from headwatch.dashboard import charts, derived, export, viewstate, widgets
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import LAMBDA, LLC_STAT, PER_HEAD_STATS, STATS, stats_for
from headwatch.dashboard.tables import SWAP_SCORE_HELP, reference_of
from headwatch.dashboard.views.heads import data
from headwatch.dashboard.views.heads.data import SORTS, Options
from headwatch.dashboard.views.heads.table import table_panel

HEAD_PAGE = "pages/head_explorer.py"


def main() -> None:
    st.title("Heads")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return

    # --- widgets: what the table shows (one row), which heads and in which order (another) ---
    opts = _pick_options(frame.store)

    # --- data ---
    approaches = _approaches(frame.store, opts.gap_pct, opts.matrix or "qk")
    table, note, open_steps = _rows(frame, opts, approaches)

    # --- panel: the table ---
    event = table_panel(table, frame.run, opts, note, method=ablation_method(frame.store))
    if opts.kinds is None:
        st.caption(missing_text(frame.store.path))
    if not frame.store.has(ABLATION):
        st.caption(missing_ablation_text(frame.store.path))

    # --- a picked row opens the head ---
    _open_picked(event, table, opts, open_steps)

    # --- panel: every close approach of the model ---
    _approaches_panel(frame, opts, approaches)


def _pick_options(store: Store) -> Options:
    """The widgets above the table: statistic, k, step and the step of the change (a row); the matrix for a statistic
    of the weights; layers, head types, sort, descending and the approach threshold (a row)."""
    steps = [int(s) for s in store.steps]
    c_stat, c_k, c_step, c_since = st.columns([3, 2, 3, 3], vertical_alignment="bottom")
    stat = widgets.select("stat", "Statistic", stats_for(store), "stable_rank", fmt=lambda s: STATS[s].label, where=c_stat)
    k = widgets.int_slider("k", "k (singular-value index)", 0, store.d_head - 1, 0, where=c_k) if stat == LAMBDA else None
    step = widgets.select("step", "At step", steps, steps[-1], kind="select_slider", fmt=lambda s: f"{s:,}", where=c_step)
    since = widgets.select(
        "since", "Change since step", steps, steps[0], kind="select_slider", fmt=lambda s: f"{s:,}", where=c_since
    )
    # a statistic of the weights is of one matrix at a time; the forward ones and the rLLC are of the head itself
    matrix = None if stat in PER_HEAD_STATS else widgets.matrix(store.meta.matrices, store_path=str(store.path))
    c_layers, c_types, c_sort, c_desc, c_gap = st.columns([3, 3, 3, 3, 2], vertical_alignment="bottom")
    layers = widgets.multiselect("layers", "Layers (none: all)", list(range(store.n_layers)), [], where=c_layers)
    kinds = head_types(store)
    picked_types = (
        widgets.multiselect(
            "types",
            "Head types (none: all heads)",
            list(HEAD_TYPES),
            [],
            fmt=TYPE_LABELS.__getitem__,
            where=c_types,
            help="Only heads holding one of these types at the step shown (docs/head-types.md)",
        )
        if kinds is not None
        else []
    )
    sort = widgets.select("sort", "Sort by", SORTS, "rank", where=c_sort)
    desc = widgets.toggle("desc", "descending", False, where=c_desc)
    try:
        overlaps_ok = derived.head_overlaps(store, 0, 0) is not None
    except StoreError as exc:
        st.error(str(exc))
        overlaps_ok = False
    gap_pct = widgets.gap_percent(where=c_gap) if overlaps_ok else None
    return Options(
        stat=stat,
        k=k,
        step=step,
        since=since,
        matrix=matrix,
        layers=layers,
        picked_types=picked_types,
        sort=sort,
        desc=desc,
        gap_pct=gap_pct,
        kinds=kinds,
    )


def _rows(frame: RunFrame, opts: Options, approaches: pd.DataFrame | None) -> tuple[pd.DataFrame, str, list[int]]:
    """The table's rows (filtered, sorted, each with its head explorer link), its caption's note, and the steps a
    picked row opens the head explorer at."""
    store = frame.store
    steps = [int(s) for s in store.steps]
    matrix = opts.matrix
    at = steps.index(opts.step)
    table, note = _table(
        store,
        opts.stat,
        opts.k,
        matrix,
        at=at,
        since=steps.index(opts.since),
        counts=None if matrix is None or approaches is None else data.approach_counts(approaches, store.n_layers, store.n_heads),
    )
    effect = ablation_effect(store)
    if effect is not None:  # what the loss needs of each head, at the step shown
        table = data.with_ablation(table, effect, at=at)
    table = data.shown_rows(table, opts, at=at)
    open_steps = data.open_steps(store.steps, opts.step)
    return data.with_links(table, opts, run=frame.run, steps=open_steps), note, open_steps


def _open_picked(event, table: pd.DataFrame, opts: Options, open_steps: list[int]) -> None:
    """A row picked in the table opens its head in the head explorer, with this page's statistic and steps."""
    rows = ((event or {}).get("selection") or {}).get("rows") or []
    if rows and 0 <= rows[0] < len(table):
        picked = table.iloc[rows[0]]
        viewstate.switch_page(
            HEAD_PAGE,
            layer=int(picked["layer"]),
            head=int(picked["head"]),
            stat=opts.stat,
            **({"k": opts.k} if opts.k is not None else {}),
            panel=data.open_panel(opts),
            step=open_steps,
            **({"matrix": opts.matrix} if opts.matrix is not None else {}),
        )


def _approaches_panel(frame: RunFrame, opts: Options, approaches: pd.DataFrame | None) -> None:
    """Every close approach of lambda_0 .. lambda_3 in every head, each a link to its head, with a CSV button."""
    store, matrix, gap_pct = frame.store, opts.matrix, opts.gap_pct
    steps = [int(s) for s in store.steps]
    st.subheader(
        f"Close approaches of λ_0 … λ_3 of {(matrix or 'qk').upper().replace('QK', 'W_QK').replace('OV', 'W_OV')}, model-wide"
    )
    if gap_pct is None:
        st.info(
            "This store has no singular-vector overlaps, so approaches cannot be told apart. Run "
            "`python -m headwatch.precompute` on it again to add them.",
            icon=":material/info:",
        )
        return
    if approaches is None:
        return
    st.markdown(data.approaches_sentence(approaches, n_heads=store.n_layers * store.n_heads, gap_pct=gap_pct))
    shown = data.with_approach_links(approaches, opts, run=frame.run, steps=steps, gap_pct=gap_pct)
    st.dataframe(
        shown,
        hide_index=True,
        key="model_approaches",
        height=min(38 + 35 * max(len(shown), 1), 420),
        column_config={
            "layer": st.column_config.NumberColumn("layer", width="small"),
            "head": st.column_config.NumberColumn("head", width="small"),
            "step": st.column_config.NumberColumn("step (closest)", format="%d"),
            "swap score": st.column_config.NumberColumn("swap score", format="%.3f", help=SWAP_SCORE_HELP),
            "open": st.column_config.LinkColumn("open", display_text="open ↗", width="small"),
        },
    )
    charts.download(
        "Approaches (CSV)",
        lambda: export.to_csv(approaches.assign(run=frame.run, gap_percent=gap_pct)),
        file_name=f"{export.safe_name(frame.run, 'approaches', f'gap{gap_pct}')}.csv",
        mime="text/csv",
        key="model_approaches_csv",
    )
    st.caption(
        "Every close approach of two adjacent leading levels in every head: the checkpoint of the smallest gap, "
        'the two levels, that gap, and the verdict by the rule in README "Crossing or repulsion?". '
        f"**Swap score**: {SWAP_SCORE_HELP}"
    )


def _approaches(store: Store, gap_pct: int | None, matrix: str) -> pd.DataFrame | None:
    """Every close approach of ``matrix`` at ``gap_pct`` (`dashboard.derived.approaches`), or None."""
    if gap_pct is None:
        return None
    try:
        return derived.approaches(store, gap_pct, matrix=matrix)
    except StoreError as exc:
        st.error(str(exc))
        return None


def _table(
    store: Store, stat: str, k: int | None, matrix: str | None, *, at: int, since: int, counts: dict[str, np.ndarray] | None
) -> tuple[pd.DataFrame, str]:
    """The table of one kind of row and the sentence saying what its "÷" column divides by.

    A statistic of the weights is measured against random heads of ``matrix`` (its own init scale); a
    forward statistic against uniform causal attention; the refined LLC against nothing.
    """
    values = derived.stat_values(store, stat, k=k or 0, matrix=matrix or "qk")
    reference = reference_of(derived.references(store, matrix=matrix), stat, k) if matrix is not None else None
    uniform = data.uniform_baseline(store.meta.forward, stat)
    table = data.heads_table(values, at=at, since=since, reference=reference, counts=counts, matrix=matrix, baseline=uniform)
    others: list[str] = []
    if stat == LLC_STAT:
        flagged = derived.llc_flags(store)
        shown = llc_shown(store)  # the value column's distribution (train where held, else text)
        spread = store.require(LLC, "llc_std", at={LLC_DATA_COLUMN: shown})
        table = data.with_llc_columns(table, spread, flagged[0] if flagged is not None else None, at=at)
        others = [d for d in llc_data_order(store.read(LLC, columns=[])) if d != shown]
        table = data.with_llc_data_columns(table, {d: store.require(LLC, "llc", at={"data": d}) for d in others}, at=at)
    note = data.reference_note(
        stat,
        reference,
        matrix=matrix,
        d_model=int(store.d_model),
        d_head=int(store.d_head),
        has_step0=len(store.steps) > 0 and int(store.steps[0]) == 0,
        uniform=uniform,
    )
    if stat == LLC_STAT:
        note += f" Its values are the refined LLC {llc_data_words(llc_shown(store))}" + (
            "; each 'on …' column, the estimate under another distribution the store holds." if others else "."
        )
    return table, note
