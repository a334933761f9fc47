"""The Trajectory map of several runs together: every head of this run and of the runs chosen to embed with it
(URL ``joint``) on one map, on a common time axis (``jalign``), coloured by depth, run, type or joint cluster; then
what the joint clusters follow, tested with the study's four statistics and corrected with them (universal kinds of
trajectory said only on a positive test), and the heads that break it."""

from __future__ import annotations

from typing import Any

import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings import sizes
from headwatch.analysis.findings.events import EVIDENCE_PANEL
from headwatch.analysis.findings.sizes import JOINT_ALIGNMENTS, JointAlign, JointClusters
from headwatch.analysis.store import Store
from headwatch.analysis.trajectories.maps import NORMALISATIONS, EmbeddingSettings, Normalisation
from headwatch.analysis.trajectories.significance import MONTE_CARLO_LEVEL, SIGNIFICANCE
from headwatch.analysis.trajectories.type_association import CLUSTER_RANGE, PERMUTATIONS
from headwatch.dashboard import charts, derived, export, loader, viewstate
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.figures.points import picked_run_head
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import STATS
from headwatch.dashboard.views.trajectories.data import joint as data
from headwatch.dashboard.views.trajectories.data.maps import neighbours
from headwatch.dashboard.views.trajectories.figures import joint_trajectory_map

JOINT_COLOUR_BY = {  # the joint map's colourings (URL ``colour``): ``layer`` fills by relative depth
    "layer": "relative depth (layer / n_layers)",
    "run": "run",
    "type": "head type at the end of training",
    "cluster": "joint trajectory cluster (all runs' heads together)",
}
# a map computed here (UMAP) of several runs' heads together
_joint_embedding = store_cached(data.joint_embedding, max_entries=8)


def joint_map_panel(
    frame: RunFrame,
    runs: list[str],
    *,
    stat: str,
    matrix: str,
    norm: Normalisation,
    settings: EmbeddingSettings,
    align: str,
    colour_by: str,
) -> None:
    """The map of this run's heads and those of ``runs`` (URL ``joint``), embedded together (computed here, cached)
    on the time axis ``align``, coloured by depth, run, type or joint cluster (``colour_by``); then what the joint
    clusters follow."""
    store = frame.store
    stores, names = _joint_runs(frame, runs, stat=stat, matrix=matrix, align=align)
    if len(stores) < 2:
        st.info("None of the chosen runs can join this map; remove them to see this run's own map.")
        return
    how: dict[str, Any] = dict(matrix=matrix, normalisation=norm, settings=settings, align=align)
    if not _joint_embedding.computed(stores, stat, **how):
        st.info(
            f"A map of {len(stores)} runs together is computed here (UMAP; the first one in a server process takes "
            "~30 s while numba compiles it) and cached."
        )
        if not st.button("Compute the joint map", type="primary"):
            return
    with st.spinner("Embedding the runs' trajectories together with UMAP ..."):
        rows = _joint_embedding(stores, stat, **how)
    family = data.joint_family(stores, stat, matrix=matrix)  # tested together, corrected together
    with st.spinner("Clustering the runs' trajectories together ..."):
        runs_by_name = dict(zip(names, stores, strict=True))
        axis: JointAlign = "tokens" if align == "tokens" else "fraction"
        tested = {s: derived.joint_clusters(runs_by_name, s, matrix=m, align=axis) for s, m in family.items()}
    joint = tested[stat]
    neighbors = neighbours(rows)
    fig = joint_trajectory_map(
        rows["x"].to_numpy(),
        rows["y"].to_numpy(),
        rows["run_index"].to_numpy(),
        rows["layer"].to_numpy(),
        rows["head"].to_numpy(),
        neighbors,
        runs=names,
        n_layers=[s.n_layers for s in stores],
        **data.joint_grouping(colour_by, joint.heads, names),
    )
    event = charts.chart(
        fig,
        "trajectory_map",
        title=f"{' + '.join(names)} · joint trajectory map of {STATS[stat].short()} ({norm})",
        filename=export.safe_name(*names, "joint-trajectory-map", stat, norm),
        csv=lambda: data.joint_csv(rows, joint.heads, names, matrix=matrix, stat=stat),
        select=True,
    )
    if bool(rows["same_steps"].iloc[0]):
        when = f"at their {len(store.steps)} shared checkpoints"
    else:
        fewest = min(stores, key=lambda s: len(s.steps))
        when = (
            f"at the {JOINT_ALIGNMENTS[align]} of the checkpoints of {names[stores.index(fewest)]}, "
            f"the run with the fewest ({len(fewest.steps)}); every other run gives, at each of them, its own last "
            "checkpoint at or before it (picked, not interpolated)"
        )
    forward = STATS[stat].forward
    fill = (
        "the fill by relative depth (layer / n_layers, so layers of models of different depth compare)"
        if colour_by == "layer"
        else f"the fill by {JOINT_COLOUR_BY[colour_by]} (legend)"
    )
    st.caption(
        "One point per head of each run, the run shown by the marker's shape (legend)"
        + (" and its outline colour" if colour_by == "layer" else "")
        + f", {fill}. "
        f"Trajectories of {STATS[stat].short()} {'(forward lens)' if forward else 'of W_QK' if matrix == 'qk' else 'of W_OV'} "
        f"{when}, normalised {NORMALISATIONS[norm]} over all the runs' heads together, embedded by UMAP (neighbours "
        f"{settings.n_neighbors}, minimum distance {settings.min_dist}, seed {settings.seed}); grey edges join each head "
        f"to its {settings.knn_k} nearest trajectories, from any run. Hover names run, layer and head; click a point to "
        "open that head of its run in the head explorer."
    )
    _joint_association(tested, names, stat=stat)
    picked = picked_run_head(event)
    if picked is not None and 0 <= picked[0] < len(names):
        i, lay, hd = picked
        viewstate.switch_page(
            "pages/head_explorer.py", run=names[i], layer=lay, head=hd, stat=stat, matrix=matrix, panel=EVIDENCE_PANEL
        )


def _joint_runs(frame: RunFrame, runs: list[str], *, stat: str, matrix: str, align: str) -> tuple[list[Store], list[str]]:
    """This run and the ``runs`` that can join its map (`data.joint_refusal`; each one that cannot is named in a
    warning)."""
    store = frame.store
    stores, names = [store], [frame.run]
    for r in runs:
        other = loader.try_load_store(frame.runs[r])
        refusal = data.joint_refusal(store, other, stat=stat, matrix=matrix, align=align)
        if refusal is not None:
            _left_off(r, other, refusal, stat=stat, matrix=matrix)
            continue
        assert isinstance(other, Store)  # a store that cannot be opened is refused
        stores.append(other)
        names.append(r)
    return stores, names


def _left_off(run: str, other: Store | StoreError, refusal: data.Refusal, *, stat: str, matrix: str) -> None:
    """The warning that ``run`` is left off the joint map, and why (``refusal``)."""
    if isinstance(other, StoreError):
        st.warning(f"Run **{run}** cannot be opened and is left off the map: {other}", icon=":material/error:")
    elif refusal == "no trajectory":
        st.warning(
            f"Run **{run}** has fewer than two checkpoints (no trajectory) and is left off the map.", icon=":material/error:"
        )
    elif refusal == "no forward lens":
        st.warning(
            f"Run **{run}** has no forward-lens tables, so no {STATS[stat].short()}; it is left off the map. Add "
            f"them with `python -m headwatch.precompute --source SOURCE --out {other.path} --lenses attention`.",
            icon=":material/visibility_off:",
        )
    elif refusal == "no statistic":
        st.warning(f"Run **{run}** has no {STATS[stat].label} and is left off the map.", icon=":material/visibility_off:")
    elif refusal == "no matrix":
        st.warning(
            f"Run **{run}** has no {matrix.upper()} rows and is left off the map; a rerun of `python -m "
            f"headwatch.precompute --source SOURCE --out {other.path}` adds them, or choose another matrix.",
            icon=":material/visibility_off:",
        )
    else:  # no tokens
        st.warning(
            f"Run **{run}** (or this run) records no tokens per step and is left off the tokens axis; align by fraction "
            "of training to include it.",
            icon=":material/visibility_off:",
        )


def _joint_association(tested: dict[str, JointClusters], names: list[str], *, stat: str) -> None:
    """What the joint clusters of ``stat`` follow: the head types (universal kinds of trajectory only on every test
    of `analysis.across_sizes.joint_clusters`) or the runs, tested with the statistics of ``tested`` and corrected with them."""
    st.subheader("Universal or run-specific? The joint clusters against head types and runs")
    joint = tested[stat]
    a = joint.association
    if not a.testable:
        st.info(f"The joint clusters of {STATS[stat].short()} cannot be compared: {a.reason}.", icon=":material/info:")
    else:
        st.markdown(sizes.joint_readings(tested)[stat])
        table = sizes.association_table({s: j.association for s, j in tested.items()})
        st.dataframe(
            table[table["statistic"] == sizes.SIZE_STAT_TITLES.get(stat, stat)].drop(columns=["statistic"]),
            hide_index=True,
            key="joint_tests",
            column_config=charts.association_columns(),
        )
    st.dataframe(data.joint_counts(joint.heads, names), hide_index=True, key="joint_counts")
    others = [sizes.SIZE_STAT_TITLES.get(s, s) for s in tested if s != stat]
    st.caption(
        "Heads per joint cluster (numbered by size), by run and by type (the type at each run's last checkpoint with "
        "head types). The clusters: every head's trajectory on the common time axis, normalised per head (minus its "
        f"mean, divided by its standard deviation: the shape of the curve), k-means with k in {CLUSTER_RANGE.start}.."
        f"{CLUSTER_RANGE.stop - 1} by the largest silhouette, from deterministic starts (no seed: the same clusters "
        "for the runs in any order), chosen without the types or the runs. The tests: the AMI (scikit-learn's "
        "adjusted mutual information; 0 what independent labels give on average, 1 the same partition) with the "
        "types, the types reassigned only among the heads of one run, then of one layer of one run (beyond depth?); "
        "the AMI with the runs, the run labels reassigned only among the heads of one type; and whether clusters "
        "fitted without a run predict its types better than shuffled types do (the gain in nats per head). "
        f"{a.permutations or PERMUTATIONS:,} shuffles each, the p with its Monte Carlo standard error; Holm's "
        f"correction over the {len(tested)} statistics tested together ({', '.join(others)} besides this one, as "
        f"Compare runs asks them); the verdict reads the adjusted p's {MONTE_CARLO_LEVEL:.0%} Monte Carlo interval "
        f"(associated below {SIGNIFICANCE}, undecided where it holds {SIGNIFICANCE}). Method: "
        "analysis/across_sizes/joint_clusters.py; `headwatch compare` writes the same for the study's four statistics."
    )
