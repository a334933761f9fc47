"""Similarity: how alike heads are over training, from the weights, whatever the basis of the residual stream."""

import numpy as np
import pandas as pd
import streamlit as st

from analysis.store.format import SIMILARITY, SIMILARITY_STATS, ULTRAMETRICITY
from analysis.ultrametric import distance
from dashboard import charts, export, viewstate, widgets
from dashboard.data import fixed_range
from dashboard.figures import similarity as figs

ALL = -1  # the layer choice that shows every head against every head


def main() -> None:
    st.title("Head similarity")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    steps = [int(s) for s in store.steps_with(SIMILARITY)]
    if not store.has(SIMILARITY) or not steps:
        st.info(
            "This store has no head similarity (similarity.parquet). Add it with `python -m precompute --source "
            f"SOURCE --out {store.path} --lenses similarity`: every checkpoint already in the store gets its rows from "
            "the weights (docs/precompute.md, 'Head similarity').",
            icon=":material/join_inner:",
        )
        return
    info = store.meta.similarity or {}
    n_layers, n_heads = store.n_layers, store.n_heads

    # --- widgets ---
    c_stat, c_layer = st.columns([3, 1])
    stat = widgets.select("sim", "Similarity", list(SIMILARITY_STATS), "qk_frob", fmt=figs.STAT_NAMES.__getitem__, where=c_stat)
    layer = widgets.select(
        "layer", "Heads", [ALL, *range(n_layers)], ALL, fmt=lambda v: "every head" if v == ALL else f"layer {v}", where=c_layer
    )
    step = widgets.select("step", "Step", steps, steps[-1], kind="select_slider", fmt=lambda s: f"{s:,}")

    # --- data ---
    values = store.require(SIMILARITY, stat)  # (S, L, H, L, H), upper triangle in layer-major order
    n = n_layers * n_heads
    at = int(np.searchsorted(store.steps, step))
    square = figs.pair_square(values[at].reshape(n, n), diagonal=1.0)
    rng = fixed_range(values[np.isfinite(values)], pad=0.0)
    rng = (min(rng[0], 0.0), 1.0)
    if layer == ALL:
        order = np.arange(n)
        separators = [k * n_heads for k in range(1, n_layers)]
        what = f"every head against every head (layer-major, white lines between layers) at step {step:,}"
    else:
        block = square[layer * n_heads : (layer + 1) * n_heads, layer * n_heads : (layer + 1) * n_heads]
        order = layer * n_heads + figs.dendrogram_order(figs.pair_square(distance(stat.split("_", 1)[1], block), diagonal=0.0))
        separators = []
        what = (
            f"the heads of layer {layer} at step {step:,}, ordered by the leaves of an average-linkage dendrogram of "
            f"their distances ({_distance_text(stat)})"
        )
    heads = [(int(i // n_heads), int(i % n_heads)) for i in order]
    shown = square[np.ix_(order, order)]

    # --- panel: the similarity matrix ---
    st.subheader("How alike the heads are")
    event = charts.chart(
        figs.similarity_matrix(shown, heads, step=step, stat=stat, rng=rng, separators=separators),
        "similarity",
        title=f"{frame.run} · {figs.SHORT[stat]} · {'all heads' if layer == ALL else f'layer {layer}'} · step {step:,}",
        filename=export.safe_name(frame.run, "similarity", stat, "all" if layer == ALL else f"L{layer}", "step", step),
        csv=lambda: _pairs_csv(frame.run, store.frame(SIMILARITY, columns=[stat]), stat, step),
        select=True,
    )
    mean = ((info.get("baseline") or {}).get("mean") or {}).get(stat.split("_", 1)[1])
    chance = f" Independent random heads of this model's shapes give {mean:.3g} on average." if mean is not None else ""
    st.caption(
        f"{figs.STAT_NAMES[stat]} of {what}. These do not change under any orthogonal change of basis of the residual "
        "stream (M → R M Rᵀ), so they compare heads whatever basis training happened to use; they do change with "
        f"LayerNorm's scales, which are not folded in.{chance} Colours fixed over training. Click a cell to open its "
        "row's head in the head explorer."
    )
    charts.open_head_on_click(event, store)

    # --- panel: how ultrametric each layer is over training ---
    table = store.frame(ULTRAMETRICITY)
    if table is None or table.empty:
        return
    st.subheader("How hierarchical each layer's heads are")
    rows = table[table["distance"] == stat]
    layers = sorted(int(v) for v in rows["layer"].unique())
    share = _grid(rows, "share", store.steps, layers)
    base = _grid(rows, "baseline", store.steps, layers)
    charts.chart(
        figs.ultrametric_lines(frame.axis(), share, base, layers=layers, distance=_distance_text(stat)),
        "ultrametricity",
        title=f"{frame.run} · share of ultrametric triangles · {figs.SHORT[stat]}",
        filename=export.safe_name(frame.run, "ultrametricity", stat),
        csv=lambda: rows.assign(run=frame.run),
    )
    tol = info.get("tolerance")
    st.caption(
        "Per layer, the share of triangles of three of its heads whose two largest distances d2 ≤ d3 are equal within "
        f"the tolerance (d3 − d2 ≤ {tol if tol is not None else 'tol'} × (d3 − d1)): 1 when the heads' distances form a "
        f"hierarchy (a dendrogram), lower when they do not ({_distance_text(stat)}). Dotted, in the layer's colour: "
        "the same share for random Gaussian heads of the same shapes (meta.json `similarity`)."
    )


def _distance_text(stat: str) -> str:
    return "d = √(2 − 2x)" if stat.endswith("frob") else "d = √(1 − x)"


def _grid(rows: pd.DataFrame, column: str, steps: np.ndarray, layers: list[int]) -> np.ndarray:
    """``(S, L)`` one column over the store's steps and the given layers (NaN where absent)."""
    pivot = rows.pivot_table(index="step", columns="layer", values=column, aggfunc="first")
    return pivot.reindex(index=[int(s) for s in steps], columns=layers).to_numpy(dtype=np.float64)


def _pairs_csv(run: str, frame: pd.DataFrame | None, stat: str, step: int) -> pd.DataFrame:
    if frame is None:
        return pd.DataFrame()
    at = frame[frame["step"] == step]
    return at.assign(run=run, statistic=stat).rename(columns={stat: "value"})


main()
