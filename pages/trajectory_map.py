"""Trajectory map: every head placed by a UMAP embedding of its training trajectory of one statistic."""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.events import EVIDENCE_PANEL
from headwatch.analysis.findings.sizes import JOINT_ALIGNMENTS
from headwatch.analysis.store.format import ATTENTION, HEAD_TYPES, LLC
from headwatch.analysis.trajectories import NORMALISATIONS, EmbeddingSettings, Normalisation
from headwatch.analysis.type_association import (
    ASSOCIATION_STATS,
    CLUSTER_RANGE,
    PERMUTATIONS,
    SIGNIFICANCE,
    end_types,
    has_statistic,
    replicates,
)
from headwatch.dashboard import charts, derived, export, loader, viewstate, widgets
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.figures.points import picked_head, picked_run_head
from headwatch.dashboard.figures.trajectory import joint_trajectory_map, sparkline, trajectory_map
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import LLC_STAT, STATS, trajectory_stats_for
from headwatch.dashboard.pagedata import trajectories as data
from headwatch.dashboard.pagedata.trajectories import LLC_K

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
JOINT_COLOUR_BY = {  # the joint map's colourings (URL ``colour``): ``layer`` fills by relative depth
    "layer": "relative depth (layer / n_layers)",
    "run": "run",
    "type": "head type at the end of training",
    "cluster": "joint trajectory cluster (all runs' heads together)",
}
# the store's precomputed maps; a map computed here (UMAP), one run's or several runs' together
_stored_maps = store_cached(data.stored_maps, max_entries=8)
_embedding = store_cached(data.embedding)
_joint_embedding = store_cached(data.joint_embedding, max_entries=8)


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
        _joint_map(frame, store, opts)
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
    _association_section(frame, store, stat=opts.stat, matrix=opts.matrix)

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
            st.caption(
                f"The stored maps were made from {len(store.meta.embedding_steps or [])} checkpoints; this run now has "
                f"{len(store.steps)}, so maps are computed here."
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
    sparks = [sparkline(traj[:, int(lay), int(hd)]) for lay, hd in zip(rows["layer"], rows["head"], strict=True)]
    fig = trajectory_map(
        rows["x"].to_numpy(),
        rows["y"].to_numpy(),
        rows["layer"].to_numpy(),
        rows["head"].to_numpy(),
        data.neighbours(rows),
        n_layers=store.n_layers,
        highlight=opts.layer * store.n_heads + opts.head,
        method=method,
        sparks=[f"{STATS[stat].short()}: {sp}" for sp in sparks],
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
    neighbors = data.neighbours(rows)
    if len(neighbors):
        names = ", ".join(f"L{i // store.n_heads} H{i % store.n_heads}" for i in neighbors[layer * store.n_heads + head])
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


def _association_section(frame, store, *, stat: str, matrix: str) -> None:
    """The study's open question: do the trajectory clusters correspond to head types? AMI and permutation p per
    statistic and run, and whether it replicates across the runs."""
    st.subheader("Do the trajectory clusters correspond to head types?")
    if end_types(store) is None:
        st.info(
            "This store has no head types (head_types.parquet), so the clusters cannot be compared with them. Add "
            f"them with `python -m headwatch.precompute.lenses.types {store.path}` (needs the forward lens, attention.parquet).",
            icon=":material/category:",
        )
        return
    stats = list(ASSOCIATION_STATS) + ([stat] if stat not in ASSOCIATION_STATS and not STATS[stat].forward else [])
    stats += [LLC_STAT] if store.has(LLC) and LLC_STAT not in stats else []
    runs = [(frame.run, store)]
    for r in frame.runs:
        if r == frame.run:
            continue
        other = loader.try_load_store(frame.runs[r])
        if not isinstance(other, StoreError) and end_types(other) is not None and len(other.steps) >= 2:
            runs.append((r, other))
    rows: list[dict] = []
    by_stat: dict[str, list] = {}
    with st.spinner("Clustering trajectories and shuffling types ..."):
        for s_name in stats:
            for run_name, run_store in runs:
                if s_name not in trajectory_stats_for(run_store) or not has_statistic(run_store, s_name, matrix):
                    continue
                found = derived.association(run_store, s_name, matrix=matrix)
                if found is None:  # every run here has head types (end_types above)
                    continue
                result, _, labels, step = found
                by_stat.setdefault(s_name, []).append(result)
                rows.append(data.association_row(STATS[s_name].short(), run_name, result, labels, step))
    table = pd.DataFrame(rows)
    mine = table[(table["run"] == frame.run) & (table["statistic"] == STATS[stat].short())]
    if len(mine) and np.isfinite(mine["AMI"].iloc[0]):
        row = mine.iloc[0]
        rep = replicates(by_stat.get(stat, []))
        st.markdown(
            f"**{STATS[stat].short()} of {'W_QK' if matrix == 'qk' else 'W_OV'}, run {frame.run}:** the "
            f"{row['clusters (k)']} trajectory clusters and the head types at step {row['types at step']:,} share "
            f"AMI = {row['AMI']:.3f}, permutation p = {row['p (shuffled over heads)']:.3g} "
            f"({PERMUTATIONS:,} shuffles of the types over the heads; p = {row['p (shuffled within layers)']:.3g} "
            "shuffling only within layers). "
            + (
                ""
                if len(by_stat.get(stat, [])) < 2
                else f"Across the {len(by_stat[stat])} runs below: "
                + {
                    True: "associated (p < 0.05) in every run.",
                    False: "not associated in every run.",
                    None: "not testable in every run.",
                }[rep]
            )
        )
    elif len(mine):
        st.markdown(f"**{STATS[stat].short()}, run {frame.run}:** {mine['answer'].iloc[0]}.")
    st.dataframe(
        table,
        hide_index=True,
        key="association_table",
        column_config={
            "AMI": st.column_config.NumberColumn(format="%.3f"),
            "silhouette": st.column_config.NumberColumn(format="%.2f"),
            "p (shuffled over heads)": st.column_config.NumberColumn(format="%.4f"),
            "p (shuffled within layers)": st.column_config.NumberColumn(format="%.4f"),
            "types at step": st.column_config.NumberColumn(format="%d"),
        },
    )
    st.caption(
        "Each row: the heads' trajectories of one weight statistic (every checkpoint, each normalised by its own "
        f"mean and standard deviation) grouped by k-means, k in {CLUSTER_RANGE.start}..{CLUSTER_RANGE.stop - 1} chosen "
        "by the largest silhouette without looking at the types; the heads' types at the run's last checkpoint with "
        f"head types ({', '.join(HEAD_TYPES)}, or none; a head with several is its own label). AMI: scikit-learn's "
        "adjusted mutual information (0: what independent labels give on average, 1: the same partition). p: the "
        f"share of {PERMUTATIONS:,} random reassignments of the types to the heads that match the clusters at least as "
        f"well (p < {SIGNIFICANCE} reads as associated); within layers, the types are reassigned only among the heads "
        "of one layer, asking whether the association holds beyond depth. The refined LLC (when the run has it) is "
        "clustered at the checkpoints it was estimated at, as the refined-LLC paper clusters heads. The forward "
        "statistics are left out: the types are decided from them. Several statistics are tested: at p < 0.05 one test "
        "in twenty is significant by chance, so read an association that holds in every run (another seed) before "
        "one that holds in one. Method: analysis/type_association.py."
    )
    st.download_button(
        "Download this table (CSV)",
        table.to_csv(index=False),
        file_name=export.safe_name(frame.run, "types-vs-trajectory-clusters", matrix) + ".csv",
        mime="text/csv",
        key="association_csv",
    )


def _joint_map(frame, store, opts: _Choices) -> None:
    """The map of this run's heads and those of the ``joint`` runs, embedded together (computed here, cached),
    coloured by depth, run, type or joint cluster; then what the joint clusters follow."""
    stat, matrix, norm, settings = opts.stat, opts.matrix, opts.norm, opts.settings
    stores, names = _joint_runs(frame, store, opts)
    if len(stores) < 2:
        st.info("None of the chosen runs can join this map; remove them to see this run's own map.")
        return
    how: dict[str, Any] = dict(matrix=matrix, normalisation=norm, settings=settings, align=opts.align)
    if not _joint_embedding.computed(stores, stat, **how):
        st.info(
            f"A map of {len(stores)} runs together is computed here (UMAP; the first one in a server process takes "
            "~30 s while numba compiles it) and cached."
        )
        if not st.button("Compute the joint map", type="primary"):
            return
    with st.spinner("Embedding the runs' trajectories together with UMAP ..."):
        rows = _joint_embedding(stores, stat, **how)
    with st.spinner("Clustering the runs' trajectories together ..."):
        joint = derived.joint_clusters(
            dict(zip(names, stores, strict=True)), stat, matrix=matrix, align="tokens" if opts.align == "tokens" else "fraction"
        )
    neighbors = data.neighbours(rows)
    fig = joint_trajectory_map(
        rows["x"].to_numpy(),
        rows["y"].to_numpy(),
        rows["run_index"].to_numpy(),
        rows["layer"].to_numpy(),
        rows["head"].to_numpy(),
        neighbors,
        runs=names,
        n_layers=[s.n_layers for s in stores],
        **data.joint_grouping(opts.colour_by, joint.heads, names),
    )
    event = charts.chart(
        fig,
        "trajectory_map",
        title=f"{' + '.join(names)} · joint trajectory map of {STATS[stat].short()} ({norm})",
        filename=export.safe_name(*names, "joint-trajectory-map", stat, norm),
        csv=lambda: rows.drop(columns=["neighbors", "same_steps"]).assign(
            run=[names[i] for i in rows["run_index"]],
            matrix=matrix,
            statistic=stat,
            type=joint.heads["type"].to_numpy(),
            joint_cluster=joint.heads["cluster"].to_numpy(),
        ),
        select=True,
    )
    if bool(rows["same_steps"].iloc[0]):
        when = f"at their {len(store.steps)} shared checkpoints"
    else:
        fewest = min(stores, key=lambda s: len(s.steps))
        when = (
            f"at the {JOINT_ALIGNMENTS[opts.align]} of the checkpoints of {names[stores.index(fewest)]}, "
            f"the run with the fewest ({len(fewest.steps)}); every other run gives, at each of them, its own last "
            "checkpoint at or before it (picked, not interpolated)"
        )
    forward = STATS[stat].forward
    fill = (
        "the fill by relative depth (layer / n_layers, so layers of models of different depth compare)"
        if opts.colour_by == "layer"
        else f"the fill by {JOINT_COLOUR_BY[opts.colour_by]} (legend)"
    )
    st.caption(
        f"One point per head of each run, the run shown by the marker (legend) and its outline colour, {fill}. "
        f"Trajectories of {STATS[stat].short()} {'(forward lens)' if forward else 'of W_QK' if matrix == 'qk' else 'of W_OV'} "
        f"{when}, normalised {NORMALISATIONS[norm]} over all the runs' heads together, embedded by UMAP (neighbours "
        f"{settings.n_neighbors}, minimum distance {settings.min_dist}, seed {settings.seed}); grey edges join each head "
        f"to its {settings.knn_k} nearest trajectories, from any run. Hover names run, layer and head; click a point to "
        "open that head of its run in the head explorer."
    )
    _joint_association(joint, names, stat=stat)
    picked = picked_run_head(event)
    if picked is not None and 0 <= picked[0] < len(names):
        i, lay, hd = picked
        viewstate.switch_page(
            "pages/head_explorer.py", run=names[i], layer=lay, head=hd, stat=stat, matrix=matrix, panel=EVIDENCE_PANEL
        )


def _joint_runs(frame, store, opts: _Choices) -> tuple[list, list[str]]:
    """This run and the ``joint`` runs that can join its map (each one that cannot is named in a warning)."""
    stat, matrix = opts.stat, opts.matrix
    stores, names = [store], [frame.run]
    forward = STATS[stat].forward
    for r in opts.joint:
        other = loader.try_load_store(frame.runs[r])
        if isinstance(other, StoreError):
            st.warning(f"Run **{r}** cannot be opened and is left off the map: {other}", icon=":material/error:")
        elif len(other.steps) < 2:
            st.warning(
                f"Run **{r}** has fewer than two checkpoints (no trajectory) and is left off the map.", icon=":material/error:"
            )
        elif forward and not other.has(ATTENTION):
            st.warning(
                f"Run **{r}** has no forward-lens tables, so no {STATS[stat].short()}; it is left off the map. Add "
                f"them with `python -m headwatch.precompute --source SOURCE --out {other.path} --lenses attention`.",
                icon=":material/visibility_off:",
            )
        elif stat not in trajectory_stats_for(other):  # read from a table this store lacks
            st.warning(f"Run **{r}** has no {STATS[stat].label} and is left off the map.", icon=":material/visibility_off:")
        elif not forward and matrix not in other.meta.matrices:
            st.warning(
                f"Run **{r}** has no {matrix.upper()} rows and is left off the map; a rerun of `python -m "
                f"precompute --source SOURCE --out {other.path}` adds them, or choose another matrix.",
                icon=":material/visibility_off:",
            )
        elif opts.align == "tokens" and (other.meta.tokens_at(other.steps) is None or store.meta.tokens_at(store.steps) is None):
            st.warning(
                f"Run **{r}** (or this run) records no tokens per step and is left off the tokens axis; align by fraction "
                "of training to include it.",
                icon=":material/visibility_off:",
            )
        else:
            stores.append(other)
            names.append(r)
    return stores, names


def _joint_association(joint, names: list[str], *, stat: str) -> None:
    """Do the joint clusters follow the head types (universal kinds of trajectory) or the runs (size-specific)?"""
    st.subheader("Universal or run-specific? The joint clusters against head types and runs")
    a = joint.association
    if a.testable:
        st.markdown(
            f"**{STATS[stat].short()}, {len(names)} runs, {a.heads} heads, {a.clusters} joint clusters:** with the head "
            f"types AMI = {a.ami_type:.3f} (p = {a.p_type:.3g}, types shuffled within each run); with the runs AMI = "
            f"{a.ami_run:.3f} (p = {a.p_run:.3g}, runs shuffled within each type). Read: {a.verdict()}."
        )
    else:
        st.info(f"The joint clusters of {STATS[stat].short()} cannot be compared: {a.reason}.", icon=":material/info:")
    st.dataframe(data.joint_counts(joint.heads, names), hide_index=True, key="joint_counts")
    st.caption(
        "Heads per joint cluster, by run and by type (the type at each run's last checkpoint with head types). The "
        "clusters: every head's trajectory on the common time axis, normalised per head (minus its mean, divided by "
        f"its standard deviation: the shape of the curve), k-means with k in {CLUSTER_RANGE.start}.."
        f"{CLUSTER_RANGE.stop - 1} by the largest silhouette, chosen without the types or the runs. AMI: scikit-learn's "
        "adjusted mutual information (0: what independent labels give on average, 1: the same partition). The types' "
        "p-value reassigns the types only among the heads of one run, so the run is held fixed; the runs' p-value "
        "reassigns the run labels only among the heads of one type, so the type is held fixed; "
        f"{a.permutations or PERMUTATIONS:,} shuffles each, p < {SIGNIFICANCE} read as associated. High type AMI with "
        "low run AMI reads as universal kinds of trajectory, the reverse as run-specific (size-specific) ones. Method: "
        "analysis/joint_clusters.py; `headwatch compare` writes the same for the study's four statistics."
    )


main()
