"""The stores the app offers, and opening them: the one entry point from the app to statistics stores.

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
What the views derive from a store is cached by `dashboard.cache.store_cached`, on the same version.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import Store, is_store, open_store, store_version
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
    return _open(str(path), store_version(path))


def try_load_store(path: Path) -> Store | StoreError:
    """The opened store, or the error that says what is wrong with it (for display)."""
    try:
        return load_store(path)
    except StoreError as exc:
        return exc
