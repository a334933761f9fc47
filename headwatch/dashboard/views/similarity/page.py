"""Head similarity: how alike heads are over training, from the weights, whatever the basis of the residual stream.

The similarity matrix of the heads at one checkpoint (every head, or one layer's, ordered by an average-linkage
dendrogram of their distances; `views.similarity.data.shown`) and, per layer, the share of its heads' triangles that
are ultrametric against random heads (`views.similarity.data.ultrametricity`). This module: the layout, the widgets
as one record and the two panels.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from headwatch.analysis.store.lenses.similarity import SIMILARITY, SIMILARITY_STATS, ULTRAMETRICITY
from headwatch.dashboard import charts, export, viewstate, widgets
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.views.similarity import data
from headwatch.dashboard.views.similarity import figures as figs
from headwatch.dashboard.views.similarity.data import ALL


@dataclass(frozen=True)
class _Choices:
    """The page's widgets: the statistic (``sim``), every head or one layer (``layer``) and the step (``step``)."""

    stat: str
    layer: int
    step: int


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
            "This store has no head similarity (similarity.parquet). Add it with `python -m headwatch.precompute --source "
            f"SOURCE --out {store.path} --lenses similarity`: every checkpoint already in the store gets its rows from "
            "the weights (docs/precompute.md, 'Head similarity').",
            icon=":material/join_inner:",
        )
        return

    # --- widgets ---
    opts = _choose(store.n_layers, steps)

    # --- panel: the similarity matrix ---
    _matrix_panel(frame, opts)

    # --- panel: how ultrametric each layer is over training ---
    _ultrametric_panel(frame, opts.stat)


def _choose(n_layers: int, steps: list[int]) -> _Choices:
    """The widgets: statistic and layer in a row, the step below."""
    c_stat, c_layer = st.columns([3, 1])
    stat = widgets.select("sim", "Similarity", list(SIMILARITY_STATS), "qk_frob", fmt=figs.STAT_NAMES.__getitem__, where=c_stat)
    layer = widgets.select(
        "layer", "Heads", [ALL, *range(n_layers)], ALL, fmt=lambda v: "every head" if v == ALL else f"layer {v}", where=c_layer
    )
    step = widgets.select("step", "Step", steps, steps[-1], kind="select_slider", fmt=lambda s: f"{s:,}")
    return _Choices(stat=stat, layer=layer, step=step)


def _matrix_panel(frame: RunFrame, opts: _Choices) -> None:
    """The similarity of the heads shown at the step, against random heads of the model's shapes; a click on a cell
    opens its row's head."""
    store, stat, layer, step = frame.store, opts.stat, opts.layer, opts.step
    view = data.shown(store.require(SIMILARITY, stat), store.steps, step=step, layer=layer, stat=stat)
    st.subheader("How alike the heads are")
    event = charts.chart(
        figs.similarity_matrix(view.values, view.heads, step=step, stat=stat, rng=view.rng, separators=view.separators),
        "similarity",
        title=f"{frame.run} · {figs.SHORT[stat]} · {'all heads' if layer == ALL else f'layer {layer}'} · step {step:,}",
        filename=export.safe_name(frame.run, "similarity", stat, "all" if layer == ALL else f"L{layer}", "step", step),
        csv=lambda: data.pairs_csv(frame.run, store.frame(SIMILARITY, columns=[stat]), stat, step),
        select=True,
    )
    mean = data.baseline_mean(store.meta.similarity or {}, stat)
    chance = f" Independent random heads of this model's shapes give {mean:.3g} on average." if mean is not None else ""
    st.caption(
        f"{figs.STAT_NAMES[stat]} of {view.what}. These do not change under any orthogonal change of basis of the residual "
        "stream (M → R M Rᵀ), so they compare heads whatever basis training happened to use; they do change with "
        f"LayerNorm's scales, which are not folded in.{chance} Colours fixed over training. Click a cell to open its "
        "row's head in the head explorer."
    )
    charts.open_head_on_click(event, store)


def _ultrametric_panel(frame: RunFrame, stat: str) -> None:
    """Per layer over training, the share of its heads' triangles that are ultrametric, against random heads."""
    store = frame.store
    table = store.frame(ULTRAMETRICITY)
    if table is None or table.empty:
        return
    st.subheader("How hierarchical each layer's heads are")
    ultra = data.ultrametricity(table, stat, store.steps)
    charts.chart(
        figs.ultrametric_lines(frame.axis(), ultra.share, ultra.baseline, layers=ultra.layers, distance=data.distance_text(stat)),
        "ultrametricity",
        title=f"{frame.run} · share of ultrametric triangles · {figs.SHORT[stat]}",
        filename=export.safe_name(frame.run, "ultrametricity", stat),
        csv=lambda: ultra.rows.assign(run=frame.run),
    )
    tol = (store.meta.similarity or {}).get("tolerance")
    st.caption(
        "Per layer, the share of triangles of three of its heads whose two largest distances d2 ≤ d3 are equal within "
        f"the tolerance (d3 − d2 ≤ {tol if tol is not None else 'tol'} × (d3 − d1)): 1 when the heads' distances form a "
        f"hierarchy (a dendrogram), lower when they do not ({data.distance_text(stat)}). Dotted, in the layer's colour: "
        "the same share for random Gaussian heads of the same shapes (meta.json `similarity`)."
    )
    st.markdown(data.ultrametric_reading(ultra.share, ultra.baseline, ultra.layers, store.steps))
