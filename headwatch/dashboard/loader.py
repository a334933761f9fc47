"""The one cached entry point from the app to statistics stores.

Stores are found under ``data/`` (or the folder named by ``HEADWATCH_DATA``;
hidden and staging directories skipped) plus the one named by
``HEADWATCH_STORE``, which comes first. When ``STORE_REPO`` names a Hugging Face
dataset repo (optionally ``STORE_REVISION``), its stores are downloaded once per
server process (into the Hub cache) and listed before all of them; a failed
download is reported, never raised. `runs` is that whole list, the one the
sidebar's run picker and the Overview both show. The variables are read by
`dashboard.settings`; the functions here take its `AppSettings`. An opened store
is cached per server process, keyed by its path and the modification time of
its ``meta.json``: a commit (precompute adding checkpoints, embeddings being
written) replaces ``meta.json``, so the next rerun opens the new version.
Derived data that costs more than a slice (trajectory embeddings) is cached with
``st.cache_data`` here, at the edge; the functions it calls stay pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings import values
from headwatch.analysis.store import Store, is_store, open_store, store_version
from headwatch.analysis.store.format import EMBEDDINGS, LAYERS, NULL_COLUMNS
from headwatch.analysis.trajectories import Normalisation
from headwatch.dashboard.settings import AppSettings
from headwatch.dashboard.space import STORE_PATTERNS, download_error_message, snapshot_stores


def find_stores(settings: AppSettings) -> list[Path]:
    """Local store directories: every non-hidden folder of ``settings.data_dir`` with a meta.json,
    plus ``settings.extra_store`` ($HEADWATCH_STORE), first."""
    data_dir = settings.data_dir
    found = []
    if data_dir.is_dir():
        found = sorted(p for p in data_dir.iterdir() if p.is_dir() and not p.name.startswith(".") and is_store(p))
    extra = settings.extra_store
    if extra is not None:
        extra_path = extra.resolve()
        found = [p for p in found if p.resolve() != extra_path]
        found.insert(0, extra)
    return found


def store_names(paths: list[Path | tuple[str, Path]]) -> dict[str, Path]:
    """A unique short name (the folder name, or the one given, suffixed on clashes) for each store: the ``run`` URL value."""
    names: dict[str, Path] = {}
    for entry in paths:
        base, p = entry if isinstance(entry, tuple) else (entry.name, entry)
        name, i = base or "store", 2
        while name in names:
            name, i = f"{base}-{i}", i + 1
        names[name] = p
    return names


@dataclass(frozen=True)
class HubStores:
    """The outcome of fetching ``STORE_REPO``: its stores as ``(name, path)`` pairs, or why there are none."""

    repo_id: str
    revision: str | None
    stores: list[tuple[str, Path]]
    error: str | None = None


@st.cache_resource(show_spinner="Downloading the statistics store from the Hugging Face Hub ...")
def _download(repo_id: str, revision: str | None) -> HubStores:
    from huggingface_hub import snapshot_download  # imported only when a store repo is configured

    try:
        snapshot = snapshot_download(repo_id, repo_type="dataset", revision=revision, allow_patterns=STORE_PATTERNS)
    except Exception as exc:  # offline, no such repo or revision, no access: all shown, none raised
        return HubStores(repo_id, revision, [], download_error_message(repo_id, revision, exc))
    stores = snapshot_stores(Path(snapshot), repo_id)
    return HubStores(repo_id, revision, stores, None if stores else download_error_message(repo_id, revision, None))


def hub_stores(settings: AppSettings) -> HubStores | None:
    """The stores of the dataset repo named by $STORE_REPO (at $STORE_REVISION), fetched once per server process.

    Returns:
        None when $STORE_REPO is unset; otherwise the stores found, or the message saying why there are none.
    """
    if settings.store_repo is None:
        return None
    return _download(settings.store_repo, settings.store_revision)


@dataclass(frozen=True)
class Runs:
    """Every run the app offers, by ``run`` name (its URL value), and what went wrong on the Hub.

    Attributes:
        paths: run name -> store folder; the $STORE_REPO stores first, then $HEADWATCH_STORE, then ``data/``.
        hub_error: why $STORE_REPO gave no store (shown above every page); None when it did or is unset.
    """

    paths: dict[str, Path]
    hub_error: str | None = None


def runs(settings: AppSettings) -> Runs:
    """The runs the app can open: the sidebar's run picker offers exactly these and the Overview lists them."""
    hub = hub_stores(settings)
    return Runs(store_names([*(hub.stores if hub else []), *find_stores(settings)]), hub.error if hub else None)


def _version(path: Path) -> int:
    return store_version(path)


@st.cache_resource(show_spinner="Opening store ...", max_entries=4)  # 4: the Compare page opens several runs at once
def _open(path: str, version: int) -> Store:
    del version  # part of the cache key only
    return open_store(path)


def load_store(path: str | Path) -> Store:
    """The opened store at ``path``, opened once per version of it per server process.

    Raises:
        StoreError: the store is missing or malformed (see `analysis.store.open_store`).
    """
    path = Path(path)
    return _open(str(path), _version(path))


def try_load_store(path: Path) -> Store | StoreError:
    """The opened store, or the error that says what is wrong with it (for display)."""
    try:
        return load_store(path)
    except StoreError as exc:
        return exc


@st.cache_data(show_spinner=False, max_entries=8)
def _read_embeddings(path: str, version: int) -> pd.DataFrame | None:
    return _open(path, version).frame(EMBEDDINGS)


def read_embeddings(store: Store) -> pd.DataFrame | None:
    """The store's precomputed ``embeddings.parquet`` as pandas, or None when it has none."""
    return _read_embeddings(str(store.path), _version(store.path))


# AppSettings embedded in this server process (the cache below holds their results): a
# page can show them at once instead of asking before it waits for numba.
_EMBEDDED: set[tuple] = set()


@st.cache_data(show_spinner=False, max_entries=16)
def _embed(
    path: str,
    version: int,
    include_mixed: bool,
    matrix: str,
    statistic: str,
    normalisation: Normalisation,
    n_neighbors: int,
    min_dist: float,
    knn_k: int,
    seed: int,
) -> pd.DataFrame:
    from headwatch.analysis.trajectories import EmbeddingSettings, embed

    store = _open(path, version).view(include_mixed=include_mixed)
    settings = EmbeddingSettings(n_neighbors=n_neighbors, min_dist=min_dist, knn_k=knn_k, seed=seed)
    xy, neighbors = embed(values.stat_values(store, statistic, matrix=matrix), normalisation=normalisation, settings=settings)
    _EMBEDDED.add((path, version, include_mixed, matrix, statistic, normalisation, n_neighbors, min_dist, knn_k, seed))
    n_layers, n_heads = store.n_layers, store.n_heads
    return pd.DataFrame(
        {
            "matrix": matrix,
            "statistic": statistic,
            "normalisation": normalisation,
            "layer": np.repeat(np.arange(n_layers, dtype=np.int32), n_heads),
            "head": np.tile(np.arange(n_heads, dtype=np.int32), n_layers),
            "x": xy[:, 0],
            "y": xy[:, 1],
            "neighbors": list(neighbors),
        }
    )


@st.cache_data(show_spinner=False, max_entries=64)
def _associate(path: str, version: int, include_mixed: bool, matrix: str, statistic: str):
    from headwatch.analysis.type_association import associate, end_types

    store = _open(path, version).view(include_mixed=include_mixed)
    types = end_types(store)
    if types is None:
        return None
    result, clusters = associate(values.stat_values(store, statistic, matrix=matrix), types[0])
    return result, clusters, types[0], types[1]


def association(store: Store, statistic: str, *, matrix: str = "qk"):
    """`analysis.type_association.associate` of one statistic of ``store`` against its head types at the end of
    training (cached per store version): ``(Association, cluster labels, type labels, step of the types)``, or None
    when the store has no ``head_types.parquet``."""
    return _associate(str(store.path), _version(store.path), store.include_mixed, matrix, statistic)


@st.cache_data(show_spinner=False, max_entries=8)
def _joint_embed(
    stores: tuple[tuple[str, int], ...],
    include_mixed: bool,
    matrix: str,
    statistic: str,
    normalisation: Normalisation,
    n_neighbors: int,
    min_dist: float,
    knn_k: int,
    seed: int,
    align: str,
) -> pd.DataFrame:
    from headwatch.analysis.findings.runs import joint_trajectories
    from headwatch.analysis.trajectories import EmbeddingSettings, knn, normalise, umap_embed

    opened = [_open(path, version).view(include_mixed=include_mixed) for path, version in stores]
    axis: Any = "tokens" if align == "tokens" else "fraction"
    traj, index, same = joint_trajectories(
        [values.stat_values(s, statistic, matrix=matrix) for s in opened],
        [s.steps for s in opened],
        align=axis,
        tokens=[t for t in (s.meta.tokens_at(s.steps) for s in opened) if t is not None] if axis == "tokens" else None,
    )
    x = normalise(traj, normalisation)
    settings = EmbeddingSettings(n_neighbors=n_neighbors, min_dist=min_dist, knn_k=knn_k, seed=seed)
    xy, neighbors = umap_embed(x, settings), knn(x, knn_k)
    _EMBEDDED.add(("joint", stores, include_mixed, matrix, statistic, normalisation, n_neighbors, min_dist, knn_k, seed, align))
    return pd.DataFrame(
        {
            "run_index": index[:, 0],
            "layer": index[:, 1],
            "head": index[:, 2],
            "x": xy[:, 0],
            "y": xy[:, 1],
            "neighbors": list(neighbors),
            "same_steps": same,
        }
    )


def _joint_key(stores: list[Store]) -> tuple[tuple[str, int], ...]:
    return tuple((str(s.path), _version(s.path)) for s in stores)


def joint_embedding_cached(
    stores: list[Store],
    statistic: str,
    matrix: str,
    normalisation: Normalisation,
    n_neighbors: int,
    min_dist: float,
    knn_k: int,
    seed: int,
    align: str = "fraction",
) -> bool:
    """Whether `compute_joint_embedding` with these settings already ran in this server process."""
    return (
        "joint",
        _joint_key(stores),
        stores[0].include_mixed,
        matrix,
        statistic,
        normalisation,
        n_neighbors,
        min_dist,
        knn_k,
        seed,
        align,
    ) in _EMBEDDED


def compute_joint_embedding(
    stores: list[Store],
    statistic: str,
    matrix: str,
    normalisation: Normalisation,
    n_neighbors: int,
    min_dist: float,
    knn_k: int,
    seed: int,
    align: str = "fraction",
) -> pd.DataFrame:
    """One trajectory map of every head of several runs (`analysis.findings.runs.joint_trajectories` on the common
    time axis ``align``, ``fraction`` or ``tokens``; UMAP, cached per stores and settings): columns ``run_index``
    (position in ``stores``), ``layer``, ``head``, ``x``, ``y``, ``neighbors`` (row indices of the nearest
    trajectories in the joint set) and ``same_steps``.
    """
    return _joint_embed(
        _joint_key(stores), stores[0].include_mixed, matrix, statistic, normalisation, n_neighbors, min_dist, knn_k, seed, align
    )


@st.cache_data(show_spinner=False, max_entries=16)
def _joint_clusters(
    stores: tuple[tuple[str, int], ...], names: tuple[str, ...], include_mixed: bool, matrix: str, statistic: str, align: str
):
    from headwatch.analysis.findings.sizes import joint_clusters as cluster

    opened = {n: _open(path, version).view(include_mixed=include_mixed) for n, (path, version) in zip(names, stores, strict=True)}
    axis: Any = "tokens" if align == "tokens" else "fraction"
    return cluster(opened, {n: values.stat_values(s, statistic, matrix=matrix) for n, s in opened.items()}, align=axis)


def joint_clusters(stores: dict[str, Store], statistic: str, *, matrix: str = "qk", align: str = "fraction"):
    """`analysis.findings.sizes.joint_clusters` of one statistic of the named runs (cached per store versions): the
    joint clusters of every head and their association with the head types and with the runs."""
    first = next(iter(stores.values()))
    return _joint_clusters(_joint_key(list(stores.values())), tuple(stores), first.include_mixed, matrix, statistic, align)


@st.cache_data(show_spinner=False, max_entries=8)
def _sizes(stores: tuple[tuple[str, int], ...], names: tuple[str, ...], include_mixed: bool, matrix: str):
    from headwatch.analysis.findings import sizes

    opened = {n: _open(path, version).view(include_mixed=include_mixed) for n, (path, version) in zip(names, stores, strict=True)}
    table = sizes.size_table(opened)
    consolidation = sizes.consolidation_table(opened, matrix=matrix)
    return table, consolidation, sizes.scaling_fits(table, consolidation)


def sizes_tables(stores: dict[str, Store], *, matrix: str = "qk"):
    """`analysis.findings.sizes`' per-run table, consolidation table and scaling fits of the named runs (cached per
    store versions): ``(size_table, consolidation_table, [(what, PowerLaw), ...])``."""
    first = next(iter(stores.values()))
    return _sizes(_joint_key(list(stores.values())), tuple(stores), first.include_mixed, matrix)


def embedding_cached(
    store: Store,
    statistic: str,
    *,
    normalisation: Normalisation,
    n_neighbors: int,
    min_dist: float,
    knn_k: int,
    seed: int,
    matrix: str = "qk",
) -> bool:
    """Whether `compute_embedding` with these settings already ran in this server process (returns at once)."""
    key = (
        str(store.path),
        _version(store.path),
        store.include_mixed,
        matrix,
        statistic,
        normalisation,
        n_neighbors,
        min_dist,
        knn_k,
        seed,
    )
    return key in _EMBEDDED


def compute_embedding(
    store: Store,
    statistic: str,
    *,
    normalisation: Normalisation,
    n_neighbors: int,
    min_dist: float,
    knn_k: int,
    seed: int,
    matrix: str = "qk",
) -> pd.DataFrame:
    """A trajectory map with settings the store has no precomputed rows for (UMAP; cached per settings).

    Same columns as ``embeddings.parquet``. The first call in a server process compiles numba (~30 s).
    """
    return _embed(
        str(store.path),
        _version(store.path),
        store.include_mixed,
        matrix,
        statistic,
        normalisation,
        n_neighbors,
        min_dist,
        knn_k,
        seed,
    )


def stat_values(store: Store, stat: str, *, k: int = 0, matrix: str = "qk") -> np.ndarray:
    """`analysis.findings.values.stat_values`, with a spinner while the store derives a column it lacks.

    Stores written before the null-model columns existed derive them from ``sv`` on first
    use (tens of seconds at Pythia size, once per server process; see `analysis.store`).
    """
    if stat in NULL_COLUMNS and not store.has_column(stat):
        with st.spinner("Deriving the null-model columns from the singular values (once per server process) ..."):
            return values.stat_values(store, stat, k=k, matrix=matrix)
    return values.stat_values(store, stat, k=k, matrix=matrix)


@st.cache_data(show_spinner=False, max_entries=64)
def _overlaps(
    path: str, version: int, include_mixed: bool, layer: int, head: int, matrix: str
) -> tuple[np.ndarray, np.ndarray] | None:
    return _open(path, version).view(include_mixed=include_mixed).overlaps(layer, head, matrix=matrix)


def head_overlaps(store: Store, layer: int, head: int, *, matrix: str = "qk") -> tuple[np.ndarray, np.ndarray] | None:
    """One head's singular-vector overlaps (`analysis.store.Store.overlaps`), cached per head.

    Raises:
        StoreError: ``overlaps.parquet`` is unreadable.
    """
    return _overlaps(str(store.path), _version(store.path), store.include_mixed, int(layer), int(head), matrix)


@st.cache_data(max_entries=64, show_spinner=False)
def rmt_sample(d_model: int, n_heads: int, sigma_q: float, sigma_k: float, low_rank: bool, seed: int):
    """One random W_QK for the random-matrix lab (`analysis.rmt.rmt_lab.lab_sample`), cached per setting."""
    from headwatch.analysis.rmt.rmt_lab import lab_sample

    return lab_sample(d_model, n_heads, sigma_q, sigma_k, low_rank=low_rank, seed=seed)


@st.cache_data(show_spinner=False, max_entries=16)
def _llc_flags(path: str, version: int, include_mixed: bool) -> tuple[np.ndarray, np.ndarray] | None:
    from headwatch.analysis.llc_diagnostics import store_flags

    return store_flags(_open(path, version).view(include_mixed=include_mixed))


def llc_flags(store: Store) -> tuple[np.ndarray, np.ndarray] | None:
    """`analysis.llc_diagnostics.store_flags` of the store (every refined-LLC estimate's flag, recomputed from its
    chains' traces), cached per store version: three pages draw it on every rerun.

    Raises:
        StoreError: ``llc_chains.parquet`` is unreadable.
    """
    return _llc_flags(str(store.path), _version(store.path), store.include_mixed)


@st.cache_data(show_spinner="Reading the layer matrices ...", max_entries=8)
def _layers(path: str, version: int, include_mixed: bool) -> pd.DataFrame | None:
    return (
        _open(path, version)
        .view(include_mixed=include_mixed)
        .frame(LAYERS, columns=["rows", "cols", "std", "sv", "frob_norm", "mp_spikes", "alpha"])
    )


def layer_matrices(store: Store) -> pd.DataFrame | None:
    """The store's whole-layer matrices (`analysis.store.Store.frame` of ``layers.parquet``, the columns the Weight matrices
    page draws), cached per store version; None when the store has none.

    Raises:
        StoreError: ``layers.parquet`` is unreadable.
    """
    return _layers(str(store.path), _version(store.path), store.include_mixed)


@st.cache_data(show_spinner=False, max_entries=16)
def _layer_column(path: str, version: int, include_mixed: bool, column: str) -> pd.DataFrame | None:
    return _open(path, version).view(include_mixed=include_mixed).frame(LAYERS, columns=[column])


def layer_column(store: Store, column: str) -> pd.DataFrame | None:
    """One column of the store's whole-layer matrices (step, layer, role and ``column``), cached per store
    version; None when the store has no ``layers.parquet``.

    Raises:
        StoreError: ``layers.parquet`` is unreadable or lacks ``column``.
    """
    return _layer_column(str(store.path), _version(store.path), store.include_mixed, column)


@st.cache_resource(show_spinner="Drawing random heads of this shape for the reference (once per shape) ...", max_entries=16)
def _references(d_model: int, d_head: int, sigma0: float | None):
    from headwatch.analysis.rmt.references import gaussian_references

    return gaussian_references(d_model, d_head, sigma0)


def references(store: Store, *, matrix: str = "qk"):
    """`dashboard.tables.references`: the Gaussian-factor reference of every statistic of ``matrix`` (its
    init scale from its own step-0 heads), cached per shape and scale."""
    from headwatch.dashboard.tables import init_scale

    sigma0 = init_scale(store, matrix=matrix)
    return _references(int(store.d_model), int(store.d_head), None if sigma0 is None else round(sigma0, 12))


@st.cache_data(show_spinner="Finding every head's close approaches ...", max_entries=16)
def _model_approaches(path: str, version: int, include_mixed: bool, gap_pct: int, matrix: str) -> pd.DataFrame | None:
    from headwatch.analysis.findings.approaches import model_approaches as find

    store = _open(path, version).view(include_mixed=include_mixed)
    return find(
        store,
        gap_pct / 100,
        matrix=matrix,
        overlaps_of=lambda layer, head: _overlaps(path, version, include_mixed, layer, head, matrix),
    )


def model_approaches(store: Store, gap_pct: int, *, matrix: str = "qk") -> pd.DataFrame | None:
    """`analysis.findings.approaches.model_approaches` of ``matrix`` at a threshold of ``gap_pct`` percent, cached per
    store, threshold and matrix.

    Raises:
        StoreError: ``overlaps.parquet`` is unreadable.
    """
    return _model_approaches(str(store.path), _version(store.path), store.include_mixed, int(gap_pct), matrix)


@st.cache_data(show_spinner="Collecting the run's events ...", max_entries=16)
def _run_events(path: str, version: int, include_mixed: bool) -> list:
    from headwatch.analysis.findings.events import run_events as collect

    return collect(_open(path, version).view(include_mixed=include_mixed))


def run_events(store: Store) -> list:
    """`analysis.findings.events.run_events` of the store, cached per store version.

    Raises:
        StoreError: a table is unreadable.
    """
    return _run_events(str(store.path), _version(store.path), store.include_mixed)
