"""What several views derive from a store, each cached once (`dashboard.cache.store_cached`).

The computations are pure and live with their kind (``analysis/``); this module only declares their caches, so the
views that share one (the Heads table and the head explorer read the same overlaps; the Timeline and the Overview
the same events) share its results. What one view alone derives is cached in that view's folder.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from headwatch.analysis.findings import values
from headwatch.analysis.findings.approaches import model_approaches
from headwatch.analysis.findings.association import store_association
from headwatch.analysis.findings.events import run_events as collect_events
from headwatch.analysis.findings.sizes import store_joint_clusters
from headwatch.analysis.llc.diagnostics import store_flags
from headwatch.analysis.rmt.references import Reference, gaussian_references
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import NULL_COLUMNS
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.tables import init_scale

# every refined-LLC estimate's flag, recomputed from its chains' traces: three views draw it on every rerun
llc_flags = store_cached(store_flags)
# one head's singular-vector overlaps (`Store.overlaps`), read once per head
head_overlaps = store_cached(Store.overlaps, max_entries=64)
# the run's events (`analysis.findings.events.run_events`): the Timeline's and the Overview's
run_events = store_cached(collect_events, spinner="Collecting the run's events ...")
# one statistic's trajectory clusters against the head types (`analysis.findings.association.store_association`)
association = store_cached(store_association, max_entries=64)
# several runs' heads clustered together (`analysis.findings.sizes.store_joint_clusters`)
joint_clusters = store_cached(store_joint_clusters)


def _approaches(store: Store, gap_pct: int, *, matrix: str = "qk"):
    return model_approaches(
        store, gap_pct / 100, lambda layer, head: head_overlaps(store, layer, head, matrix=matrix), matrix=matrix
    )


# every head's close approaches of lambda_0..lambda_3 at a gap of ``gap_pct`` percent
approaches = store_cached(_approaches, spinner="Finding every head's close approaches ...")

_gaussian_references = st.cache_resource(
    show_spinner="Drawing random heads of this shape for the reference (once per shape) ...", max_entries=16
)(gaussian_references)


def references(store: Store, *, matrix: str = "qk") -> tuple[dict[str, Reference], tuple[Reference, ...]]:
    """The Gaussian-factor reference of every statistic of ``matrix`` (`analysis.rmt.references.gaussian_references`,
    its init scale from the run's own step-0 heads, `dashboard.tables.init_scale`), cached per shape and scale: runs
    of one shape share it."""
    sigma0 = init_scale(store, matrix=matrix)
    return _gaussian_references(int(store.d_model), int(store.d_head), None if sigma0 is None else round(sigma0, 12))


def stat_values(store: Store, stat: str, *, k: int = 0, matrix: str = "qk") -> np.ndarray:
    """`analysis.findings.values.stat_values`, with a spinner while the store derives a column it lacks.

    A store whose ``heads.parquet`` lacks the null-model columns derives them from ``sv`` on first use, once per
    server process (`analysis.store`).
    """
    if stat in NULL_COLUMNS and not store.has_column(stat):
        with st.spinner("Deriving the null-model columns from the singular values (once per server process) ..."):
            return values.stat_values(store, stat, k=k, matrix=matrix)
    return values.stat_values(store, stat, k=k, matrix=matrix)
