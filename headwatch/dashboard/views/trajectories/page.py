"""Trajectory map: every head placed by a UMAP embedding of its training trajectory of one statistic.

One run's map (the store's precomputed one when it fits the choices, else computed here and cached) with the ringed
head's nearest trajectories; with runs chosen to embed alongside, their joint map instead (`views.trajectories.joint`);
then whether the trajectory clusters correspond to head types (`views.trajectories.association`). What the panels
compute is `views.trajectories.data`'s. This module: the layout, the widgets as one record and one run's map panels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from headwatch.analysis.findings.events import EVIDENCE_PANEL
from headwatch.analysis.findings.sizes import JOINT_ALIGNMENTS
from headwatch.analysis.store.lenses.llc import LLC
from headwatch.analysis.trajectories.maps import NORMALISATIONS, EmbeddingSettings, Normalisation
from headwatch.analysis.trajectories.type_association import CLUSTER_RANGE, end_types
from headwatch.dashboard import charts, export, viewstate, widgets
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.figures.points import picked_head
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import STATS, trajectory_stats_for
from headwatch.dashboard.views.trajectories.association import association_panel
from headwatch.dashboard.views.trajectories.data import maps as data
from headwatch.dashboard.views.trajectories.data.maps import LLC_K
from headwatch.dashboard.views.trajectories.figures import trajectory_map
from headwatch.dashboard.views.trajectories.joint import JOINT_COLOUR_BY, joint_map_panel

# why a link's joint= that names the page's own run loses that run alone (the runs joined with it are kept)
OWN_RUN = "is this page's own run (the sidebar's), whose heads the map shows already: left out of the runs joined with it"
NORM_LABELS = {"zscore": "per head (shape only)", "global": "whole statistic (level and shape)"}
NEIGHBOURS = [5, 10, 15, 30, 50]
MIN_DISTS = [0.0, 0.05, 0.1, 0.25, 0.5]
EDGES = [3, 5, 10]
COLOUR_BY = {
    "layer": "layer",
    "type": "head type at the end of training",
    "cluster": "trajectory cluster of this statistic",
    "llc_cluster": "refined-LLC cluster",
}
# the store's precomputed maps; a map computed here (UMAP) of one run (several runs': `views.trajectories.joint`)
_stored_maps = store_cached(data.stored_maps, max_entries=8)
_embedding = store_cached(data.embedding)


@dataclass(frozen=True)
class _Choices:
    """The page's widgets: the statistic mapped (``matrix``, ``stat``, ``norm``), the colouring (``colour``), the
    head ringed (``layer``, ``head``), the embedding's settings (``nn``, ``md``, ``knn``) and the runs embedded with
    this one (``joint``) on a common time axis (``jalign``)."""

    matrix: str
    stat: str
    norm: Normalisation
    colour_by: str
    layer: int
    head: int
    settings: EmbeddingSettings
    joint: list[str]
    align: str = "fraction"


def _with(options: list, value) -> list:
    return sorted(set(options) | {value})


def main() -> None:
    st.title("Trajectory map")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    if len(store.steps) < 2:
        st.info("A trajectory needs at least two checkpoints; this run has fewer.")
        return
    stored = _stored_maps(store)
    types = end_types(store)

    # --- widgets ---
    opts = _choose(frame, types)

    # --- several runs on one map (URL ``joint``, repeatable): the other runs' heads embedded with this run's ---
    if opts.joint:
        joint_map_panel(
            frame,
            opts.joint,
            stat=opts.stat,
            matrix=opts.matrix,
            norm=opts.norm,
            settings=opts.settings,
            align=opts.align,
            colour_by=opts.colour_by,
        )
        return

    # --- data: the precomputed map when it matches, else computed here (cached) ---
    found = _map_rows(store, stored, opts)
    if found is None:
        return
    rows, method, source = found

    # --- panel: the map ---
    event = _map_panel(frame, rows, opts, types, method=method, source=source)

    # --- the highlighted head: its nearest trajectories, and a link to it ---
    _highlighted(frame, rows, opts)

    # --- do the trajectory clusters correspond to head types? ---
    association_panel(frame, stat=opts.stat, matrix=opts.matrix)

    # --- picking a head opens it in the head explorer ---
    picked = picked_head(event, n_layers=store.n_layers, n_heads=store.n_heads)
    if picked is not None:
        viewstate.switch_page(
            "pages/head_explorer.py",
            layer=int(picked[0]),
            head=int(picked[1]),
            stat=opts.stat,
            matrix=opts.matrix,
            panel=EVIDENCE_PANEL,  # the head explorer's tab of the statistic against the layer
        )


def _choose(frame: RunFrame, types) -> _Choices:
    """The widgets: matrix; statistic and normalisation; colouring; the head ringed and the embedding's settings;
    the runs embedded together with this one."""
    store = frame.store
    defaults = data.stored_settings(store)
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path))
    c_stat, c_norm = st.columns([3, 4])
    stat = widgets.select(
        "stat", "Statistic", trajectory_stats_for(store), "kl_gauss", fmt=lambda s: STATS[s].label, where=c_stat
    )
    norm: Normalisation = widgets.select(
        "norm",
        "Trajectory normalisation",
        list(NORMALISATIONS),
        "zscore",
        kind="radio",
        fmt=NORM_LABELS.__getitem__,
        where=c_norm,
        help="; ".join(f"{k}: {v}" for k, v in NORMALISATIONS.items()),
    )
    others = [r for r in frame.runs if r != frame.run]
    joint = (
        widgets.multiselect(
            "joint",
            "Embed together with other runs",
            others,
            [],
            help="Every head of these runs on the same map as this run's, each run with its own marker, clustered "
            "together: are the kinds of trajectory universal across the runs (sizes, seeds), or specific to a run?",
            left_out={frame.run: OWN_RUN},
        )
        if others
        else []
    )
    align = "fraction"
    if joint:
        c_colour, c_align = st.columns([3, 4])
        colour_by = widgets.select(
            "colour", "Colour heads by", list(JOINT_COLOUR_BY), "layer", fmt=JOINT_COLOUR_BY.__getitem__, where=c_colour
        )
        align = widgets.select(
            "jalign",
            "Common time axis",
            list(JOINT_ALIGNMENTS),
            "fraction",
            kind="radio",
            fmt=JOINT_ALIGNMENTS.__getitem__,
            where=c_align,
            help="The runs' trajectories are compared at the checkpoints of the run with the fewest, on this axis; "
            "every other run gives its last checkpoint at or before each (picked, not interpolated).",
        )
    else:
        colour_options = ["layer", "cluster"] + (["type"] if types is not None else [])
        colour_options += ["llc_cluster"] if store.has(LLC) else []
        colour_by = widgets.select("colour", "Colour heads by", colour_options, "layer", fmt=COLOUR_BY.__getitem__)
    c_layer, c_head, c_settings = st.columns([1, 1, 4])
    layer = widgets.select("layer", "Highlight layer", list(range(store.n_layers)), 0, where=c_layer)
    head = widgets.select("head", "Highlight head", list(range(store.n_heads)), 0, where=c_head)
    with c_settings.expander("Embedding settings"):
        nn = widgets.select(
            "nn", "UMAP neighbours", _with(NEIGHBOURS, defaults.n_neighbors), defaults.n_neighbors, kind="select_slider"
        )
        md = widgets.select(
            "md", "UMAP minimum distance", _with(MIN_DISTS, defaults.min_dist), defaults.min_dist, kind="select_slider"
        )
        kk = widgets.select(
            "knn", "Edges per head (k nearest trajectories)", _with(EDGES, defaults.knn_k), defaults.knn_k, kind="select_slider"
        )
    return _Choices(
        matrix=matrix,
        stat=stat,
        norm=norm,
        colour_by=colour_by,
        layer=layer,
        head=head,
        settings=EmbeddingSettings(n_neighbors=nn, min_dist=md, knn_k=kk, seed=defaults.seed),
        joint=joint,
        align=align,
    )


def _map_rows(store, stored, opts: _Choices) -> tuple[pd.DataFrame, str, str] | None:
    """The map's rows (sorted by layer and head), its method and where it came from: the store's precomputed map
    when it fits, else computed here (cached; a map not yet computed waits for a button). None while it waits."""
    rows, method, fresh = data.stored_map(
        store, stored, stat=opts.stat, matrix=opts.matrix, norm=opts.norm, settings=opts.settings
    )
    source = "precomputed with the store"
    if rows is None:
        if stored is not None and not fresh:
            made = store.meta.embedding_steps
            st.caption(
                "The stored maps carry no record of the checkpoints they were made from (meta.json `embeddings`), so "
                "maps are computed here; `python -m headwatch.precompute.lenses.embeddings STORE` makes them again "
                "with their record."
                if made is None
                else f"The stored maps were made from {len(made)} checkpoints; this run now has {len(store.steps)}, so "
                "maps are computed here."
            )
        kwargs: dict[str, Any] = dict(matrix=opts.matrix, normalisation=opts.norm, settings=opts.settings)
        if not _embedding.computed(store, opts.stat, **kwargs):
            st.info(
                f"This store has no precomputed map for {STATS[opts.stat].short()} with these settings. Compute it "
                "here (the first one in a server process takes ~30 s while numba compiles UMAP), or add it to the "
                "store with `python -m headwatch.precompute.lenses.embeddings STORE --statistics ...`."
            )
            if not st.button("Compute this map", type="primary"):
                return None
        with st.spinner("Embedding trajectories with UMAP ..."):
            rows = _embedding(store, opts.stat, **kwargs)
        source = "computed in this server (cached)"
    return rows.sort_values(["layer", "head"]), method, source


def _map_panel(frame: RunFrame, rows: pd.DataFrame, opts: _Choices, types, *, method: str, source: str) -> Any:
    """The map: one point per head, its nearest trajectories joined, coloured as chosen; returns the click event."""
    store, stat, matrix, norm = frame.store, opts.stat, opts.matrix, opts.norm
    traj = store.array(stat, matrix=matrix)  # (S, n_layers, n_heads): the hover's miniature trajectory of each head
    fig = trajectory_map(
        rows["x"].to_numpy(),
        rows["y"].to_numpy(),
        rows["layer"].to_numpy(),
        rows["head"].to_numpy(),
        data.neighbours(rows),
        n_layers=store.n_layers,
        highlight=opts.layer * store.n_heads + opts.head,
        method=method,
        sparks=data.sparklines(traj, rows["layer"].to_numpy(), rows["head"].to_numpy(), label=STATS[stat].short()),
        **data.grouping(store, opts.colour_by, traj, types),
    )
    event = charts.chart(
        fig,
        "trajectory_map",
        title=f"{frame.run} · trajectory map of {STATS[stat].short()} ({norm})",
        filename=export.safe_name(frame.run, "trajectory-map", stat, norm),
        csv=lambda: rows.drop(columns=["neighbors"]).assign(run=frame.run, matrix=matrix),
        select=True,
    )
    s = opts.settings
    st.caption(
        f"One point per head, coloured by {_colour_caption(opts.colour_by, types)}. "
        f"Position: {method} of the head's {STATS[stat].short()} of "
        f"{'W_QK' if matrix == 'qk' else 'W_OV'} at all "
        f"{len(store.steps)} checkpoints (one coordinate each), normalised {NORMALISATIONS[norm]}. Grey edges join "
        f"each head to its {s.knn_k} nearest trajectories before embedding, so long edges show where the map tears "
        f"neighbours apart. Ringed: layer {opts.layer}, head {opts.head}. Hover shows a head's trajectory in miniature "
        f"(its own minimum to maximum, first and last value beside it); click a point to open that head in the head "
        f"explorer. Map {source}; UMAP neighbours {s.n_neighbors}, minimum distance {s.min_dist}, seed {s.seed}."
    )
    return event


def _highlighted(frame: RunFrame, rows: pd.DataFrame, opts: _Choices) -> None:
    """The ringed head's nearest trajectories, and a link that opens it in the head explorer."""
    store, layer, head = frame.store, opts.layer, opts.head
    names = data.nearest(rows, layer=layer, head=head, n_heads=store.n_heads)
    if names is not None:
        st.markdown(f"Nearest trajectories to layer {layer}, head {head}: {names}.")
    st.page_link(
        "pages/head_explorer.py",
        label=f"Open layer {layer}, head {head} in the head explorer",
        icon=":material/center_focus_strong:",
        query_params={"run": frame.run or "", "layer": str(layer), "head": str(head), "matrix": opts.matrix},
    )


def _colour_caption(colour_by: str, types) -> str:
    if colour_by == "type" and types is not None:
        return (
            f"the types each head holds at step {types[1]:,}, the last checkpoint with head types (previous-token, "
            "induction, sink: score above its threshold, docs/head-types.md; 'none': no type)"
        )
    if colour_by == "cluster":
        return (
            f"k-means cluster of this statistic's per-head-normalised trajectories (k in {CLUSTER_RANGE.start}.."
            f"{CLUSTER_RANGE.stop - 1} by the largest silhouette), the clusters compared with the types below"
        )
    if colour_by == "llc_cluster":
        return f"cluster of the refined-LLC curves (k-means, k = {LLC_K}, per-head normalised: the Refined LLC page's default)"
    return "layer"
