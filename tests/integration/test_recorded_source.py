"""``settings.source`` records what the user gave, never a path of the machine that made the store.

A collaborator who opens a store learns nothing from ``/home/me/...``, and a shipped store
must not carry one: a local folder is recorded relative to the working directory when it
lies under it, else by its name; a Hub id as given (`tests/integration/test_hub.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.local import recorded_folder
from tests.integration.conftest import make_suite

REPO = Path(__file__).resolve().parents[2]


def test_recorded_folder_is_relative_under_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "runs" / "a").mkdir(parents=True)
    assert recorded_folder(tmp_path / "runs" / "a", cwd=tmp_path) == "runs/a"
    assert recorded_folder(tmp_path / "runs" / "a", cwd=tmp_path / "elsewhere") == "a"


@pytest.mark.parametrize("inside", [True, False])
def test_a_stores_source_is_never_an_absolute_path(inside: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    suite = make_suite(tmp_path / "work" / "runs" / "tiny", [0, 1])
    cwd = tmp_path / "work" if inside else tmp_path / "other"
    cwd.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)
    out = tmp_path / "store"
    run_precompute(
        suite, out, RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, matrices=("qk",))
    )
    meta = json.loads((out / "meta.json").read_text())
    assert meta["settings"]["source"] == ("runs/tiny" if inside else "tiny")
    assert meta["settings"]["source_kind"] == "local"


def test_shipped_stores_carry_no_machine_path() -> None:
    metas = sorted((REPO / "data").glob("*/meta.json"))
    assert metas, "no shipped store under data/"
    for path in metas:
        text = path.read_text()
        source = json.loads(text)["settings"]["source"]
        assert not Path(source).is_absolute(), f"{path}: settings.source is {source!r}"
        assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, path
