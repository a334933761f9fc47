"""Fixtures for the dashboard tests: a synthetic store made here, and helpers to run pages.

The store (4 layers x 4 heads, d_head 16, 12 checkpoints plus one duplicate, a loss
curve, stand-in embeddings) is written once per session under pytest's tmp dir. Every
page test points the app at it through $HEADWATCH_STORE and at an empty $HEADWATCH_DATA,
so nothing under data/ changes what the tests see.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from benchmarks.synthetic_store import add_stand_in_embeddings, write_synthetic_store

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
DIMS: dict[str, Any] = dict(n_layers=4, n_heads=4, d_head=16, d_model=64, n_checkpoints=12)
TIMEOUT = 60


@pytest.fixture(scope="session")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stores") / "tiny-run"
    write_synthetic_store(path, **DIMS, model_id="synthetic/tiny")
    add_stand_in_embeddings(path)
    return path


def serve_only(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the app at ``store`` only (an empty data folder beside it)."""
    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("HEADWATCH_STORE", str(store))
    monkeypatch.setenv("HEADWATCH_DATA", str(empty))
    return store


@pytest.fixture()
def app_env(store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the app at the test store only."""
    return serve_only(store_path, tmp_path, monkeypatch)


def open_page(page: str | None, query: dict[str, Any] | None = None) -> AppTest:
    """Run the app like a fresh browser opening ``page`` with ``query`` in its URL."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params = dict(query or {})
    at.run()
    if page:
        at.switch_page(page)
        at.query_params = dict(query or {})
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart(at: AppTest, key: str) -> dict[str, Any]:
    """The plotly figure (as a dict) of the chart with widget key ``key``."""
    for el in at.get("plotly_chart"):
        if el.proto.id.endswith(f"-{key}"):
            return json.loads(el.proto.spec)
    raise KeyError(f"no chart with key {key!r}; have {[e.proto.id.rsplit('-', 1)[-1] for e in at.get('plotly_chart')]}")


def arr(value: Any) -> np.ndarray:
    """A figure array, decoded from plotly's base64 typed-array form where needed."""
    if isinstance(value, dict) and "bdata" in value:
        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]).newbyteorder("<"))
        if "shape" in value:
            out = out.reshape([int(d) for d in str(value["shape"]).split(",")])
        return out
    return np.asarray(value, dtype=np.float64)


def notices(at: AppTest) -> list[str]:
    return [w.value for w in at.warning]


SHIPPED = ROOT / "data" / "shakespeare-pythia-6x8"


@pytest.fixture(scope="session")
def shipped_server(tmp_path_factory):
    """The app served as the Dockerfile serves it, on the shipped run (the browser tests' real data)."""
    from tests.app.test_browser import _serve

    if not (SHIPPED / "meta.json").is_file():
        pytest.fail(f"the shipped run {SHIPPED} is missing")
    yield from _serve(SHIPPED, tmp_path_factory)


INDUCTION = ROOT / "data" / "induction-d128"  # the shipped runs with refined LLCs are the induction runs


@pytest.fixture(scope="session")
def induction_server(tmp_path_factory):
    """The app on the shipped run induction-d128, for the views of the refined LLC (the plain-text run has none)."""
    from tests.app.test_browser import _serve

    if not (INDUCTION / "meta.json").is_file():
        pytest.fail(f"the shipped run {INDUCTION} is missing")
    yield from _serve(INDUCTION, tmp_path_factory)


@pytest.fixture(scope="session")
def chromium():
    """One headless Chromium per test process (`tests.app.test_browser`'s launch settings); each test opens its own pages."""
    from playwright.sync_api import sync_playwright

    from benchmarks.common import CHROMIUM_ARGS
    from tests.app.test_browser import CHROMIUM, _require_chromium

    _require_chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def view_link(at: AppTest) -> str:
    """The sidebar's "Link to this view" of an AppTest run (the markdown ``[`link`](link)``)."""
    for m in at.sidebar.markdown:
        found = re.fullmatch(r"\[`(.*)`\]\((.*)\)", m.value, flags=re.S)
        if found:
            return found.group(1)
    raise AssertionError(f"no link to the view in the sidebar: {[m.value for m in at.sidebar.markdown]}")
