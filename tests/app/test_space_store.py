"""The store from a Hub dataset repo ($STORE_REPO): found in a Hub-style cache with HF_HUB_OFFLINE=1, offered in
the run picker and rendered; a repo the Hub cannot give shows a clear error instead of a traceback."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub.constants
import pytest

from benchmarks.synthetic_store import write_synthetic_store
from headwatch.dashboard import loader
from headwatch.dashboard.space import download_error_message, snapshot_stores
from tests.app.conftest import open_page

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache(cache: Path, repo_id: str, files: dict[str, Path]) -> Path:
    """Lay out a dataset repo in the Hub cache as huggingface_hub does: blobs, a snapshot of links to them, refs/main.

    Returns:
        The snapshot folder.
    """
    repo = cache / ("datasets--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    for name, src in files.items():
        data = src.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture()
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty data/ and an offline Hub whose cache lives in tmp_path (constants patched too: they are read at import)."""
    cache = tmp_path / "hub"
    cache.mkdir()
    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("HEADWATCH_DATA", str(empty))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REVISION", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    loader._download.clear()
    yield cache
    loader._download.clear()


def small_store(path: Path) -> dict[str, Path]:
    write_synthetic_store(path, n_layers=2, n_heads=2, d_head=8, d_model=16, n_checkpoints=4, model_id="hub/tiny")
    return {p.relative_to(path).as_posix(): p for p in sorted(path.rglob("*")) if p.is_file()}


def test_store_repo_from_the_hub_cache_is_offered_and_renders(offline_hub, tmp_path, monkeypatch):
    files = small_store(tmp_path / "made")
    assert "meta.json" in files
    hub_cache(offline_hub, "someone/tiny-store", files)
    monkeypatch.setenv("STORE_REPO", "someone/tiny-store")
    at = open_page("pages/head_explorer.py")
    picker = at.sidebar.selectbox(key="run")
    assert list(picker.options) == ["tiny-store"] and picker.value == "tiny-store"
    assert not at.error
    assert "hub/tiny" in " ".join(m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 2


def test_overview_lists_the_hub_store_the_sidebar_offers(offline_hub, tmp_path, monkeypatch):
    hub_cache(offline_hub, "someone/tiny-store", small_store(tmp_path / "made"))
    data = tmp_path / "data"
    write_synthetic_store(data / "local-run", n_layers=2, n_heads=2, d_head=8, d_model=16, n_checkpoints=4)
    monkeypatch.setenv("HEADWATCH_DATA", str(data))
    monkeypatch.setenv("STORE_REPO", "someone/tiny-store")
    at = open_page(None)
    offered = list(at.sidebar.selectbox(key="run").options)
    assert offered == ["tiny-store", "local-run"]
    cards = [m.value for m in at.main.markdown if m.value.startswith("**") and " · `" in m.value]
    assert [c.split("**")[1] for c in cards] == offered  # one card per run, in the sidebar's order
    assert str(offline_hub) in cards[0]  # the Hub store, from the Hub cache
    assert not any("No stores" in i.value for i in at.info)


def test_store_repo_with_stores_in_sub_folders_offers_each(offline_hub, tmp_path, monkeypatch):
    files = {f"{run}/{name}": p for run in ("run-b", "run-a") for name, p in small_store(tmp_path / run).items()}
    hub_cache(offline_hub, "someone/many-stores", files)
    monkeypatch.setenv("STORE_REPO", "someone/many-stores")
    at = open_page(None)
    assert list(at.sidebar.selectbox(key="run").options) == ["run-a", "run-b"]
    assert not at.error


def test_missing_store_repo_shows_a_clear_error_and_keeps_the_data_stores(offline_hub, tmp_path, monkeypatch):
    data = tmp_path / "data"
    write_synthetic_store(data / "local-run", n_layers=2, n_heads=2, d_head=8, d_model=16, n_checkpoints=4)
    monkeypatch.setenv("HEADWATCH_DATA", str(data))
    monkeypatch.setenv("STORE_REPO", "nobody/not-cached")
    monkeypatch.setenv("STORE_REVISION", "v1")
    for page in (None, "pages/layer_view.py"):
        at = open_page(page)  # asserts no exception
        errors = " ".join(e.value for e in at.error)
        assert "`nobody/not-cached`" in errors and "`v1`" in errors and "STORE_REPO" in errors
        assert list(at.sidebar.selectbox(key="run").options) == ["local-run"]


def test_missing_store_repo_and_no_data_stores_still_renders(offline_hub, monkeypatch):
    monkeypatch.setenv("STORE_REPO", "nobody/not-cached")
    at = open_page("pages/head_explorer.py")
    assert "`nobody/not-cached`" in " ".join(e.value for e in at.error)
    assert any("No statistics stores" in i.value for i in at.sidebar.info)


# --- the pure part ------------------------------------------------------------------------------------------------


def test_snapshot_stores_root_store_is_named_after_the_repo(tmp_path):
    (tmp_path / "meta.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "meta.json").write_text("{}")
    assert snapshot_stores(tmp_path, "owner/pythia-160m-store") == [("pythia-160m-store", tmp_path)]


def test_snapshot_stores_sub_folders_skip_hidden_and_storeless(tmp_path):
    for name in ("b", "a", ".staging", "empty"):
        (tmp_path / name).mkdir()
    for name in ("b", "a", ".staging"):
        (tmp_path / name / "meta.json").write_text("{}")
    assert snapshot_stores(tmp_path, "o/r") == [("a", tmp_path / "a"), ("b", tmp_path / "b")]
    assert snapshot_stores(tmp_path / "nope", "o/r") == []


def test_download_error_message_says_what_which_and_what_to_do():
    text = download_error_message("o/r", None, FileNotFoundError("no such repo\nmore lines"))
    assert "`o/r` (default branch)" in text and "FileNotFoundError (no such repo)" in text
    assert "more lines" not in text and "STORE_REVISION" in text and "data/" in text
    empty = download_error_message("o/r", "abc123", None)
    assert "`o/r` at revision `abc123`" in empty and "meta.json" in empty
