"""Heads: every head as one row of a sortable, filterable table of a statistic, and every close approach.

A row opens its head in the head explorer (with this page's statistic and step).
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.events import EVIDENCE_PANEL
from headwatch.analysis.findings.held_types import TYPE_LABELS, HeadTypes, head_types, missing_text
from headwatch.analysis.llc_diagnostics import FLAG_NOTES, NEGATIVE_NOTE
from headwatch.analysis.store.format import HEAD_TYPES, LLC
from headwatch.dashboard import derived, export, viewstate, widgets
from headwatch.dashboard.data import default_steps, uniform_attention
from headwatch.dashboard.labels import LAMBDA, LLC_STAT, MATRIX_LABELS, PER_HEAD_STATS, STATS, stats_for
from headwatch.dashboard.tables import SWAP_SCORE_HELP, approach_counts, heads_table, reference_note, reference_of, screen_table

SORTS = ["rank", "value", "change", "over reference", "emerged", "approaches", "crossings", "repulsions", "flag", "layer"]
HEAD_PAGE = "pages/head_explorer.py"


def _head_link(
    run: str | None, layer: int, head: int, stat: str, k: int | None, steps: list[int], matrix: str | None = None
) -> str:
    """A relative link to the head explorer showing this head, on its tab of the statistic against the layer (opens in
    the same app)."""
    query = [("run", run or ""), ("layer", layer), ("head", head), ("stat", stat)] + ([("k", k)] if k is not None else [])
    query += [("matrix", matrix)] if matrix is not None else []
    query += [("step", s) for s in steps]
    query += [("panel", EVIDENCE_PANEL)]
    return "head?" + "&".join(f"{key}={value}" for key, value in query)


@dataclass(frozen=True)
class _Options:
    """The table's widgets: what it shows (``stat``, ``k``, ``step``, ``since``, ``matrix``), which heads
    (``layers``, ``types``), in which order (``sort``, ``desc``) and the close-approach threshold (``gap``, None
    without overlaps). ``kinds``: the store's head types (None without them)."""

    stat: str
    k: int | None
    step: int
    since: int
    matrix: str | None
    layers: list[int]
    picked_types: list[str]
    sort: str
    desc: bool
    gap_pct: int | None
    kinds: HeadTypes | None


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
    event = _table_panel(table, frame.run, opts, note)
    if opts.kinds is None:
        st.caption(missing_text(frame.store.path))

    # --- a picked row opens the head ---
    _open_picked(event, table, opts, open_steps)

    # --- panel: every close approach of the model ---
    _approaches_panel(frame, opts, approaches)


def _pick_options(store) -> _Options:
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
    return _Options(
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


def _rows(frame, opts: _Options, approaches: pd.DataFrame | None) -> tuple[pd.DataFrame, str, list[int]]:
    """The table's rows (filtered, sorted, each with its head explorer link), its caption's note, and the steps a
    picked row opens the head explorer at."""
    store = frame.store
    steps = [int(s) for s in store.steps]
    matrix = opts.matrix
    table, note = _table(
        store,
        opts.stat,
        opts.k,
        matrix,
        at=steps.index(opts.step),
        since=steps.index(opts.since),
        counts=None if matrix is None or approaches is None else approach_counts(approaches, store.n_layers, store.n_heads),
    )
    if opts.kinds is not None:
        _add_types(table, opts.kinds, at=steps.index(opts.step), picked=opts.picked_types)
        if opts.picked_types:
            table = table[table["type"].map(lambda held: bool(set(held.split(", ")) & set(opts.picked_types)))]
    if opts.layers:
        table = table[table["layer"].isin(opts.layers)]
    if opts.sort in table.columns:
        table = table.sort_values(
            [opts.sort, "layer", "head"], ascending=[not opts.desc, True, True], kind="stable", na_position="last"
        )
    table = table.reset_index(drop=True)
    open_steps = sorted(set(default_steps(store.steps)) | {opts.step})[-8:]
    table["open"] = [
        _head_link(frame.run, int(r.layer), int(r.head), opts.stat, opts.k, open_steps, matrix)
        for r in table[["layer", "head"]].itertuples(index=False)
    ]
    return table, note, open_steps


def _open_picked(event, table: pd.DataFrame, opts: _Options, open_steps: list[int]) -> None:
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
            panel=EVIDENCE_PANEL,
            step=open_steps,
            **({"matrix": opts.matrix} if opts.matrix is not None else {}),
        )


def _approaches_panel(frame, opts: _Options, approaches: pd.DataFrame | None) -> None:
    """Every close approach of lambda_0 .. lambda_3 in every head, each a link to its head, with a CSV button."""
    store, matrix, gap_pct, stat, k = frame.store, opts.matrix, opts.gap_pct, opts.stat, opts.k
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
    kinds = approaches["verdict"].value_counts()
    n_heads_with = approaches[["layer", "head"]].drop_duplicates().shape[0]
    st.markdown(
        f"**{len(approaches)} approaches in {n_heads_with} of {store.n_layers * store.n_heads} heads** at "
        f"{gap_pct}%: {int(kinds.get('crossing', 0))} crossings, {int(kinds.get('repulsion', 0))} repulsions, "
        f"{int(kinds.get('unresolved', 0))} unresolved."
    )
    shown = approaches.copy()
    shown["open"] = [
        _head_link(frame.run, int(r.layer), int(r.head), stat, k, sorted({steps[0], int(r.step), steps[-1]}), matrix)
        + f"&gap={gap_pct}"
        for r in shown[["layer", "head", "step"]].itertuples(index=False)
    ]
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
    st.download_button(
        "Approaches (CSV)",
        lambda: export.to_csv(approaches.assign(run=frame.run, gap_percent=gap_pct)),
        file_name=f"{export.safe_name(frame.run, 'approaches', f'gap{gap_pct}')}.csv",
        mime="text/csv",
        key="model_approaches_csv",
        on_click="ignore",
        icon=":material/download:",
        type="tertiary",
    )
    st.caption(
        "Every close approach of two adjacent leading levels in every head: the checkpoint of the smallest gap, "
        'the two levels, that gap, and the verdict by the rule in README "Crossing or repulsion?". '
        f"**Swap score**: {SWAP_SCORE_HELP}"
    )


def _add_types(table, kinds: HeadTypes, *, at: int, picked: list[str]) -> None:
    """The ``type`` (types held at step index ``at``) and ``emerged`` (the earliest emergence step among the
    picked types, or among all when none is picked; empty: none held at the end) columns, in place."""
    table["type"] = kinds.held_at(at)
    earliest = kinds.earliest(picked or HEAD_TYPES)  # (heads,), -1: none held at the end
    table["emerged"] = pd.array(np.where(earliest >= 0, earliest, 0), dtype="Int64")
    table.loc[earliest < 0, "emerged"] = pd.NA


def _approaches(store, gap_pct: int | None, matrix: str):
    """Every close approach of ``matrix`` at ``gap_pct`` (`dashboard.derived.approaches`), or None."""
    if gap_pct is None:
        return None
    try:
        return derived.approaches(store, gap_pct, matrix=matrix)
    except StoreError as exc:
        st.error(str(exc))
        return None


def _table(store, stat: str, k: int | None, matrix: str | None, *, at: int, since: int, counts):
    """The table of one kind of row and the sentence saying what its "÷" column divides by.

    A statistic of the weights is measured against random heads of ``matrix`` (its own init scale); a
    forward statistic against uniform causal attention; the refined LLC against nothing.
    """
    values = derived.stat_values(store, stat, k=k or 0, matrix=matrix or "qk")
    reference = reference_of(derived.references(store, matrix=matrix), stat, k) if matrix is not None else None
    info = store.meta.forward
    uniform = (
        uniform_attention(info.seq_len, info.induction_repeat).get(stat) if stat in PER_HEAD_STATS and info is not None else None
    )
    table = heads_table(values, at=at, since=since, reference=reference, counts=counts, matrix=matrix, baseline=uniform)
    if stat == LLC_STAT:
        spread = store.dense(LLC, "llc_std")
        flagged = derived.llc_flags(store)
        table["± chains"] = spread[at].ravel()
        table["flag"] = flagged[0][at].ravel() if flagged is not None else "no diagnostics"
        table.loc[table["value"].isna(), "flag"] = "no estimate"
        table.loc[table["value"] < 0, "flag"] = table["flag"] + "; negative"
    note = reference_note(
        stat,
        reference,
        matrix=matrix,
        d_model=int(store.d_model),
        d_head=int(store.d_head),
        has_step0=len(store.steps) > 0 and int(store.steps[0]) == 0,
        uniform=uniform,
    )
    return table, note


def _table_panel(table, run, opts: _Options, note: str):
    """The table, its CSV button (the columns named as on screen, the filters in its name) and its caption; returns
    the row selection."""
    stat, k, matrix, step, since, layers = opts.stat, opts.k, opts.matrix, opts.step, opts.since, opts.layers
    label = STATS[stat].short(k)
    of = f" of {MATRIX_LABELS[matrix].split(' ')[0]}" if matrix is not None else ""
    st.subheader(f"{label}{of} of every head at step {step:,}")
    by_uniform = matrix is None and "over reference" in table.columns
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
    st.download_button(
        "Table (CSV)",
        lambda: export.to_csv(screen_table(table, config, run=run, stat=stat, k=k, matrix=matrix, step=step, since=since)),
        file_name=f"{export.safe_name(run, 'heads', label, 'step', step, *filters)}.csv",
        mime="text/csv",
        key="heads_table_csv",
        on_click="ignore",
        icon=":material/download:",
        type="tertiary",
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
    if "approaches" in table.columns:
        parts.append("and its close approaches of λ_0 … λ_3 at the chosen gap")
    if "flag" in table.columns:
        parts.append(
            "the spread of the estimate over the sampler's chains and its flag (the Refined LLC page's "
            "diagnostics; a step without estimates has none). A negative estimate: " + NEGATIVE_NOTE
        )
    st.caption(", ".join(parts) + ". Click a column header to sort, tick a row (or its *open* link) to open the head. " + note)
    return event


main()
