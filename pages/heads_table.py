"""Heads: every head as one row of a sortable, filterable table of a statistic, and every close approach.

A row opens its head in the head explorer (with this page's statistic and step).
"""

import pandas as pd
import streamlit as st

from analysis.stats.crossings import GAP_THRESHOLD
from analysis.errors import StoreError
from dashboard import export, loader, widgets
from dashboard.data import default_steps
from dashboard.stats import LAMBDA, PER_HEAD_STATS, STATS, stats_for
from dashboard.tables import SWAP_SCORE_HELP, approach_counts, heads_table, reference_of

GAP_PERCENT = [2, 5, 10, 20]
SORTS = ["rank", "value", "change", "over reference", "approaches", "crossings", "repulsions", "layer"]
HEAD_PAGE = "pages/head_explorer.py"


def _head_link(run: str | None, layer: int, head: int, stat: str, k: int | None, steps: list[int]) -> str:
    """A relative link to the head explorer showing this head (opens in the same app)."""
    query = [("run", run or ""), ("layer", layer), ("head", head), ("stat", stat)] + ([("k", k)] if k is not None else [])
    query += [("step", s) for s in steps]
    return "head?" + "&".join(f"{key}={value}" for key, value in query)


def main() -> None:
    st.title("Heads")
    # --- empty case ---
    frame = widgets.run_frame()
    if frame is None:
        return
    store = frame.store
    steps = [int(s) for s in store.steps]

    # --- widgets ---
    c_stat, c_k, c_step, c_since = st.columns([3, 2, 3, 3], vertical_alignment="bottom")
    stat = widgets.select("stat", "Statistic", stats_for(store), "stable_rank", fmt=lambda s: STATS[s].label, where=c_stat)
    k = widgets.int_slider("k", "k (singular-value index)", 0, store.d_head - 1, 0, where=c_k) if stat == LAMBDA else None
    step = widgets.select("step", "At step", steps, steps[-1], kind="select_slider", fmt=lambda s: f"{s:,}", where=c_step)
    since = widgets.select("since", "Change since step", steps, steps[0], kind="select_slider", fmt=lambda s: f"{s:,}",
                           where=c_since)
    c_layers, c_sort, c_desc, c_gap = st.columns([3, 3, 2, 2], vertical_alignment="bottom")
    layers = widgets.multiselect("layers", "Layers (none: all)", list(range(store.n_layers)), [], where=c_layers)
    sort = widgets.select("sort", "Sort by", SORTS, "rank", where=c_sort)
    desc = widgets.toggle("desc", "descending", False, where=c_desc)
    try:
        overlaps_ok = loader.head_overlaps(store, 0, 0) is not None
    except StoreError as exc:
        st.error(str(exc))
        overlaps_ok = False
    gap_pct = widgets.select("gap", "Close when the gap of s is below", GAP_PERCENT, round(100 * GAP_THRESHOLD),
                             fmt=lambda g: f"{g}%", where=c_gap,
                             help="Relative gap (s_i − s_i+1)/(s_i + s_i+1) of adjacent singular values; an approach "
                                  "must also dip 20% below it (README, \"Crossing or repulsion?\")") if overlaps_ok else None

    # --- data ---
    values = loader.stat_values(store, stat, k=k or 0)
    reference = reference_of(loader.references(store), stat, k)
    approaches = None
    if gap_pct is not None:
        try:
            approaches = loader.model_approaches(store, gap_pct)
        except StoreError as exc:
            st.error(str(exc))
    counts = approach_counts(approaches, store.n_layers, store.n_heads) if approaches is not None else None
    table = heads_table(values, at=steps.index(step), since=steps.index(since), reference=reference, counts=counts)
    others = [] if stat in PER_HEAD_STATS else [m for m in store.meta.matrices if m != "qk"]  # forward ones, rLLC: per head only
    for matrix in others:  # other products, where the store has their rows
        try:
            other = loader.stat_values(store, stat, k=k or 0, matrix=matrix)
        except KeyError:
            continue
        other_counts = None
        if gap_pct is not None:
            try:
                found = loader.model_approaches(store, gap_pct, matrix=matrix)
            except StoreError as exc:
                st.error(str(exc))
                found = None
            other_counts = approach_counts(found, store.n_layers, store.n_heads) if found is not None else None
        table = pd.concat([table, heads_table(other, at=steps.index(step), since=steps.index(since), reference=None,
                                              counts=other_counts, matrix=matrix)], ignore_index=True)
    if layers:
        table = table[table["layer"].isin(layers)]
    if sort in table.columns:
        table = table.sort_values([sort, "layer", "head"], ascending=[not desc, True, True], kind="stable")
    table = table.reset_index(drop=True)
    open_steps = sorted(set(default_steps(store.steps)) | {step})[-8:]
    table["open"] = [_head_link(frame.run, int(r.layer), int(r.head), stat, k, open_steps)
                     for r in table[["layer", "head"]].itertuples(index=False)]
    label = STATS[stat].short(k)

    # --- panel: the table ---
    st.subheader(f"{label} of every head at step {step:,}")
    config = {
        "layer": st.column_config.NumberColumn("layer", width="small"),
        "head": st.column_config.NumberColumn("head", width="small"),
        "matrix": st.column_config.TextColumn("matrix", width="small"),
        "value": st.column_config.NumberColumn(label, format="%.5g", help=STATS[stat].doc),
        "change": st.column_config.NumberColumn(f"change since {since:,}", format="%+.4g"),
        "rank": st.column_config.NumberColumn("rank", width="small", help="1 = the largest value at this step"),
        "over reference": st.column_config.NumberColumn(
            "÷ random head", format="%.3g",
            help="The value divided by its mean over random heads (Gaussian W_Q, W_K of this run's shape and init σ)"),
        "in 5-95% band": st.column_config.CheckboxColumn(
            "in random band", help="Within the 5-95% band of the same statistic over random heads"),
        "approaches": st.column_config.NumberColumn("approaches", width="small"),
        "crossings": st.column_config.NumberColumn("crossings", width="small"),
        "repulsions": st.column_config.NumberColumn("repulsions", width="small"),
        "open": st.column_config.LinkColumn("open", display_text="open ↗", width="small",
                                            help="Open the head in the head explorer"),
    }
    event = st.dataframe(table, hide_index=True, key="heads_table", on_select="rerun", selection_mode="single-row",
                         column_config=config, height=min(40 + 35 * len(table), 640))
    st.download_button("Table (CSV)", lambda: export.to_csv(table.drop(columns=["open"]).assign(
                           run=frame.run, statistic=stat, k=k, step=step, since=since)),
                       file_name=f"{export.safe_name(frame.run, 'heads', label, 'step', step)}.csv", mime="text/csv",
                       key="heads_table_csv", on_click="ignore", icon=":material/download:", type="tertiary")
    ref_text = (f"Random heads (Gaussian W_Q, W_K of this run's d_model {store.d_model}, d_head {store.d_head} and init "
                f"scale; 32 seeded draws): mean {reference.mean:.4g}, 5-95% band [{reference.lo:.4g}, {reference.hi:.4g}]."
                if reference is not None else "No random-head reference for this statistic (the run has no step 0 to "
                "read its init scale from).")
    st.caption(f"One row per head{' of the chosen layers' if layers else ''} (and per matrix kind the store has; rank "
               f"within each kind): {label} at step {step:,}, its change "
               f"since step {since:,}, its rank among all heads (1 = largest), the value divided by the random-head mean "
               f"and whether it lies in the random heads' 5-95% band, and its close approaches of λ_0 … λ_3 at the "
               f"chosen gap. Click a column header to sort, tick a row (or its *open* link) to open the head. {ref_text}")

    # --- a picked row opens the head ---
    rows = ((event or {}).get("selection") or {}).get("rows") or []
    if rows and 0 <= rows[0] < len(table):
        picked = table.iloc[rows[0]]
        widgets.switch_page(HEAD_PAGE, layer=int(picked["layer"]), head=int(picked["head"]), stat=stat,
                            **({"k": k} if k is not None else {}), step=open_steps,
                            **({"matrix": str(picked["matrix"])} if "matrix" in table.columns else {}))

    # --- panel: every close approach of the model ---
    st.subheader("Close approaches of λ_0 … λ_3, model-wide")
    if gap_pct is None:
        st.info("This store has no singular-vector overlaps, so approaches cannot be told apart. Run "
                "`python -m precompute` on it again to add them.", icon=":material/info:")
        return
    if approaches is None:
        return
    kinds = approaches["verdict"].value_counts()
    n_heads_with = approaches[["layer", "head"]].drop_duplicates().shape[0]
    st.markdown(f"**{len(approaches)} approaches in {n_heads_with} of {store.n_layers * store.n_heads} heads** at "
                f"{gap_pct}%: {int(kinds.get('crossing', 0))} crossings, {int(kinds.get('repulsion', 0))} repulsions, "
                f"{int(kinds.get('unresolved', 0))} unresolved.")
    shown = approaches.copy()
    shown["open"] = [_head_link(frame.run, int(r.layer), int(r.head), stat, k, sorted({steps[0], int(r.step), steps[-1]}))
                     + f"&gap={gap_pct}" for r in shown[["layer", "head", "step"]].itertuples(index=False)]
    st.dataframe(shown, hide_index=True, key="model_approaches", height=min(38 + 35 * max(len(shown), 1), 420),
                 column_config={
                     "layer": st.column_config.NumberColumn("layer", width="small"),
                     "head": st.column_config.NumberColumn("head", width="small"),
                     "step": st.column_config.NumberColumn("step (closest)", format="%d"),
                     "swap score": st.column_config.NumberColumn("swap score", format="%.3f", help=SWAP_SCORE_HELP),
                     "open": st.column_config.LinkColumn("open", display_text="open ↗", width="small"),
                 })
    st.download_button("Approaches (CSV)", lambda: export.to_csv(approaches.assign(run=frame.run, gap_percent=gap_pct)),
                       file_name=f"{export.safe_name(frame.run, 'approaches', f'gap{gap_pct}')}.csv", mime="text/csv",
                       key="model_approaches_csv", on_click="ignore", icon=":material/download:", type="tertiary")
    st.caption("Every close approach of two adjacent leading levels in every head: the checkpoint of the smallest gap, "
               "the two levels, that gap, and the verdict by the rule in README \"Crossing or repulsion?\". "
               f"**Swap score**: {SWAP_SCORE_HELP}")


main()
