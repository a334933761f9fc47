"""The one cached entry point from the app to statistics stores.

Only this module (besides ``app.py`` and ``pages/``) imports streamlit. Stores
are found under ``data/`` (hidden and staging directories skipped) plus the one
named by the ``HEADWATCH_STORE`` environment variable.
"""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from analysis.errors import StoreError
from analysis.store import META_FILE, Store, open_store

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
STORE_ENV = "HEADWATCH_STORE"


def find_stores(data_dir: Path = DATA_DIR) -> list[Path]:
    """Store directories: every non-hidden folder under ``data_dir`` with a meta.json, plus $HEADWATCH_STORE."""
    found = []
    if data_dir.is_dir():
        found = sorted(p for p in data_dir.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / META_FILE).is_file())
    extra = os.environ.get(STORE_ENV)
    if extra and Path(extra) not in found:
        found.insert(0, Path(extra))
    return found


@st.cache_resource(show_spinner="Opening store ...")
def load_store(path: str) -> Store:
    """Open a store once per server process (keyed by its path)."""
    return open_store(path)


def try_load_store(path: Path) -> Store | StoreError:
    """The opened store, or the error that says what is wrong with it (for display)."""
    try:
        return load_store(str(path))
    except StoreError as exc:
        return exc
