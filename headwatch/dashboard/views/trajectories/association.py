"""The Trajectory map's question: do the trajectory clusters correspond to head types? The clusters of every
statistic asked (`views.trajectories.data.association`) against the heads' types, AMI and permutation p per
statistic and run, and whether the association replicates in this run's replicates (the same recipe, another
seed), named."""

from __future__ import annotations

import streamlit as st

from headwatch.analysis.findings.replicates import replicate_hint, replicates_of
from headwatch.analysis.store.lenses.types import HEAD_TYPES
from headwatch.analysis.trajectories.significance import MONTE_CARLO_LEVEL, SIGNIFICANCE
from headwatch.analysis.trajectories.type_association import CLUSTER_RANGE, PERMUTATIONS, end_types
from headwatch.dashboard import charts, derived, export, loader
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.views.trajectories.data import association as data


def association_panel(frame: RunFrame, *, stat: str, matrix: str) -> None:
    """The study's open question: do the trajectory clusters correspond to head types? AMI and permutation p per
    statistic and run, and whether it replicates in this run's replicates (`analysis.findings.replicates`)."""
    store = frame.store
    st.subheader("Do the trajectory clusters correspond to head types?")
    if end_types(store) is None:
        st.info(
            "This store has no head types (head_types.parquet), so the clusters cannot be compared with them. Add "
            f"them with `python -m headwatch.precompute.lenses.types {store.path}` (needs the forward lens, attention.parquet).",
            icon=":material/category:",
        )
        return
    stats = data.association_stats(store, stat)
    others = {r: loader.try_load_store(frame.runs[r]) for r in frame.runs if r != frame.run}
    runs = data.association_runs(frame.run, store, others)
    with st.spinner("Clustering trajectories and shuffling types ..."):
        table, by_stat = data.association_table(runs, stats, matrix=matrix, associate=derived.association)
    replicates = replicates_of(store, dict(runs[1:]))
    reading = data.association_reading(
        table,
        by_stat,
        run=frame.run,
        stat=stat,
        matrix=matrix,
        replicates=replicates,
        hint=replicate_hint(store, frame.run or store.path.name),
    )
    if reading is not None:
        st.markdown(reading)
    st.dataframe(
        table,
        hide_index=True,
        key="association_table",
        column_config={
            "AMI": st.column_config.NumberColumn(format="%.3f"),
            "silhouette": st.column_config.NumberColumn(format="%.2f"),
            "p (shuffled over heads)": st.column_config.NumberColumn(format="%.4f"),
            "s.e. (over heads)": st.column_config.NumberColumn(format="%.4f"),
            "p over heads, Holm": st.column_config.NumberColumn(format="%.4f"),
            "p (shuffled within layers)": st.column_config.NumberColumn(format="%.4f"),
            "s.e. (within layers)": st.column_config.NumberColumn(format="%.4f"),
            "p within layers, Holm": st.column_config.NumberColumn(format="%.4f"),
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
        "well, with its Monte Carlo standard error (s.e.); within layers, the types are reassigned only among the "
        "heads of one layer, asking whether the association holds beyond depth. Several statistics are tested in each "
        "run, so each run's p-values are corrected by Holm's method over the study's statistics it has (Holm over: "
        "both matrices and the refined LLC, as the Timeline and `headwatch report` correct them; a statistic mapped "
        f"besides them is corrected over those and itself); the answer reads the adjusted p's {MONTE_CARLO_LEVEL:.0%} "
        f"Monte Carlo interval: associated below {SIGNIFICANCE}, no association shown at or above it, undecided where "
        "the interval holds it (another seed could put p on either side). recipe: each run's training recipe against "
        "this run's (meta.json `training`, less the seed): a run of the same recipe with another seed is a replicate, "
        "and only replicates are asked whether an association replicates: it does where it is associated (over heads, "
        "after Holm) in this run and in every replicate, is undecided where a run is undecided and none shows no "
        "association; another size or corpus is another experiment. The refined LLC (when the run has it) is "
        "clustered at the checkpoints it was estimated at, as the refined-LLC paper clusters heads. The forward "
        "statistics are left out: the types are decided from them. Method: analysis/trajectories/type_association.py, "
        "analysis/trajectories/significance.py, analysis/findings/association.py, analysis/findings/replicates.py."
    )
    charts.table_csv(table, export.safe_name(frame.run, "types-vs-trajectory-clusters", matrix), key="association_csv")
