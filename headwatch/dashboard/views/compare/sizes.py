"""The Compare runs page's "Across sizes" section (`views.compare.page` lays it out): per run its parameter
count, tokens and each head type's first emergence, each layer's consolidation time, the timescales against the
parameter count (fitted where the sizes allow, said in words where they do not), and what the joint trajectory
clusters of all the runs follow: four tests per statistic with their Monte Carlo error and Holm's correction, what
they support in words (universal kinds of trajectory only on a positive test) and the heads that break it.

The same content as ``headwatch compare``: computed in `analysis.findings.sizes` (cached here, at the page's edge);
the figure is `views.compare.figures.scaling_points`.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from headwatch.analysis.across_sizes.scaling import CONSOLIDATION_SHARE, MIN_SIZES
from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings import sizes
from headwatch.analysis.trajectories.significance import MONTE_CARLO_LEVEL, SIGNIFICANCE
from headwatch.analysis.trajectories.type_association import PERMUTATIONS
from headwatch.dashboard import charts, derived, export, widgets
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.views.compare import data, figures

UNITS = {"step": "training step", "tokens": "tokens seen", "fraction": "fraction of the run (step / last step)"}

# the runs table, each layer's consolidation and the power-law fits (`analysis.findings.sizes.size_tables`)
_size_tables = store_cached(sizes.size_tables, max_entries=8)


def sizes_section(stores: dict, *, matrix: str) -> None:
    """The section, or why the chosen runs cannot be compared across sizes."""
    st.subheader("Across sizes: emergence, consolidation, joint trajectory clusters")
    matrix = matrix if matrix in ("qk", "ov") else "qk"  # per-layer and forward statistics: the heads' W_QK
    try:
        sizes.check_comparable(stores, matrix=matrix)
    except StoreError as exc:
        st.info(f"Not compared across sizes: {exc}.", icon=":material/info:")
        return
    table, consolidation, fits = _size_tables(stores, matrix=matrix)
    mat = "W_QK" if matrix == "qk" else "W_OV"
    _runs_table(table, stores)
    unit = widgets.select("cunit", "Consolidation and scaling in", list(UNITS), "step", fmt=UNITS.__getitem__, kind="radio")
    _consolidation_table(consolidation, unit=unit, mat=mat, stores=stores)
    _scaling(table, consolidation, fits, unit=unit, stores=stores)
    _joint(stores, matrix=matrix, mat=mat)


def _runs_table(table: pd.DataFrame, stores: dict) -> None:
    st.dataframe(table, hide_index=True, key="sizes_runs")
    st.caption(
        "Per run: non-embedding weight-matrix parameters (attention and MLP; embeddings, biases and LayerNorms left "
        "out), layers, heads, d_model, checkpoints, last step and tokens seen by then; per head type, the earliest "
        "emergence step (the first checkpoint from which a head holds the type to the end) among the heads that hold "
        "it at the end, and how many do; empty where none does."
    )
    charts.table_csv(table, export.safe_name("compare", *stores, "sizes"), key="sizes_runs_csv")


def _consolidation_table(consolidation: pd.DataFrame, *, unit: str, mat: str, stores: dict) -> None:
    wide = sizes.consolidation_wide(consolidation, unit=unit)
    st.dataframe(wide, hide_index=True, key="sizes_consolidation")
    st.caption(
        f"Consolidation per layer, as {UNITS[unit]}: the checkpoint from which the layer's mean statistic of {mat} over "
        f"its heads stays within {1 - CONSOLIDATION_SHARE:.0%} of its total change (last checkpoint minus first) of "
        f"its final value, having made {CONSOLIDATION_SHARE:.0%} of it for good; empty where the mean does not change. "
        "Early layers settling before late ones is the study's early-layer consolidation."
    )
    charts.table_csv(consolidation, export.safe_name("compare", *stores, "consolidation"), key="sizes_consolidation_csv")


def _scaling(table: pd.DataFrame, consolidation: pd.DataFrame, fits: list, *, unit: str, stores: dict) -> None:
    points = sizes.scaling_series(table, consolidation, unit=unit)
    y_title = {"step": "training step (log)", "tokens": "tokens seen (log)", "fraction": "fraction of the run (log)"}[unit]
    charts.chart(
        figures.scaling_points(points, y_title=y_title),
        "sizes_scaling",
        title=f"Timescales against the parameter count ({UNITS[unit]})",
        filename=export.safe_name("compare", *stores, "scaling", unit),
        csv=lambda: data.scaling_csv(points, unit=unit),
    )
    st.markdown("\n".join(f"- {fit.text(what)}" for what, fit in fits))
    st.caption(
        f"Each point one run (log-log). A power law T ~ N^b is fitted to the steps by least squares of log10 T on "
        f"log10 N over the runs, seeds as replicates, the exponent's uncertainty from the scatter among the seeds of "
        f"one size (analysis/across_sizes/scaling.py); with fewer than {MIN_SIZES} sizes no fit is made and the list says so."
    )


def _joint(stores: dict, *, matrix: str, mat: str) -> None:
    with st.spinner("Clustering every run's trajectories together ..."):
        joint = {stat: derived.joint_clusters(stores, stat, matrix=matrix) for stat in sizes.SIZE_STATS}
    table = sizes.association_table({stat: j.association for stat, j in joint.items()})
    st.markdown(f"**Joint trajectory clusters of {mat}, asked of {', '.join(sizes.run_order(stores))}.**")
    st.dataframe(table, hide_index=True, key="sizes_joint", column_config=charts.association_columns())
    st.markdown("\n".join(f"- {line}" for line in sizes.joint_readings(joint).values()))
    st.caption(
        f"Every head of every run on the fraction-of-training axis (the checkpoints of the run with the fewest; the "
        "others' last checkpoint at or before each), normalised per head, k-means from deterministic starts (no seed: "
        "the same clusters for the runs in any order) with k by the largest silhouette. Four tests per statistic: the "
        "AMI (adjusted mutual information) with the heads' types at the end of training, the types shuffled within "
        "each run, then within each layer of each run; the AMI with the runs, the runs shuffled within each type; "
        "and whether clusters fitted without a run predict its types better than shuffled types do (gain in nats per "
        f"head). {PERMUTATIONS:,} shuffles per p, its Monte Carlo standard error beside it; Holm's correction over "
        f"the {len(joint)} statistics of each test; the verdict reads the adjusted p's {MONTE_CARLO_LEVEL:.0%} Monte "
        f"Carlo interval (associated below {SIGNIFICANCE}, undecided where the interval holds {SIGNIFICANCE}). "
        "Universal kinds of trajectory are said only where both type tests and the left-out runs' are associated and "
        "the runs' is not. The Trajectory map draws the joint map."
    )
    names = list(stores)
    st.page_link(
        "pages/trajectory_map.py",
        label="Draw the joint trajectory map of these runs, coloured by joint cluster",
        icon=":material/scatter_plot:",
        query_params={"run": names[0], "joint": names[1:], "colour": "cluster", "matrix": matrix},
    )
