"""Publishing a store (dataset card, one upload commit) and the embeddings step at the end of a run.

No network: the upload goes to a recording stand-in for ``HfApi``; the embeddings
module is replaced by stand-ins (the real one compiles UMAP for tens of seconds and
is tested with its own module).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import ClassVar

import httpx2
import huggingface_hub
import pytest
import yaml

import headwatch.precompute.lenses.embeddings
from headwatch.analysis.store import open_store
from headwatch.analysis.store.format import COLUMN_DOCS, HEADS_COLUMNS
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.analysis.store.lenses.overlaps import OVERLAP_COLUMN_DOCS
from headwatch.precompute.__main__ import main
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.store.publish import dataset_card, push_store
from headwatch.precompute.store.publish import main as publish_main
from headwatch.precompute.store.writer import commit_store
from tests.integration.conftest import REPO, make_suite


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store with a duplicate (step 4 = step 1) and a failure (step 9: no weights)."""
    root = tmp_path_factory.mktemp("publish")
    suite = make_suite(root / "suite", [0, 1, 4], duplicate={4: 1})
    (suite / "step9").mkdir()
    out = root / "store"
    report = run_precompute(
        suite, out, RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, model_id="tiny-neox")
    )
    assert [f.step for f in report.failed] == [9]
    return out


class RecordingApi:
    """Records ``create_repo`` and ``create_commit`` as HfApi would receive them."""

    calls: ClassVar[list[tuple[str, tuple, dict]]] = []

    def __init__(self, *args, **kwargs) -> None:
        RecordingApi.calls = []

    def hf_hub_download(self, repo_id: str, filename: str, **kwargs):
        """A new repo: no such file (what `push_store` asks to check the repo's store first)."""
        raise huggingface_hub.errors.EntryNotFoundError(f"{filename} not found in {repo_id}")

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))
        return f"https://huggingface.co/datasets/{args[0]}"

    def create_commit(self, *args, **kwargs):
        self.calls.append(("create_commit", args, kwargs))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/datasets/{args[0]}/commit/abc"})()


def test_dataset_card_explains_every_column_and_how_the_store_was_made(store: Path) -> None:
    card = dataset_card(store, repo_id="me/tiny-stats")
    meta = json.loads((store / "meta.json").read_text())
    header = yaml.safe_load(card.split("---")[1])
    assert {"config_name": "heads", "data_files": "heads.parquet", "default": True} in header["configs"]
    for column in HEADS_COLUMNS:  # every column, with its meaning
        assert f"| `{column}` |" in card, column
        assert COLUMN_DOCS[column].replace("|", "\\|") in card, column
    assert "`tiny-neox`" in card and "gpt_neox" in card
    assert {"config_name": "overlaps", "data_files": "overlaps.parquet"} in header["configs"]
    for column, doc in OVERLAP_COLUMN_DOCS.items():
        assert f"| `{column}` |" in card.split("### `overlaps.parquet`")[1] and doc.replace("|", "\\|") in card, column
    assert {"config_name": "layers", "data_files": "layers.parquet"} in header["configs"]  # the default --matrices
    for column, doc in LAYERS.docs.items():
        assert f"| `{column}` |" in card.split("### `layers.parquet`")[1] and doc.replace("|", "\\|") in card, column
    for checkpoint in meta["checkpoints"]:
        assert f"| {checkpoint['step']} | {checkpoint['revision']} |" in card
        assert checkpoint["sha256"][:12] in card
    assert "| 4 | step4 |" in card and card.split("| 4 | step4 |")[1].split("\n")[0].rstrip().endswith("| 1 |")
    assert "| 9 | step9 | missing |" in card
    for package, version in meta["software"].items():
        assert f"| {package} | {version} |" in card
    assert json.dumps(meta["settings"], indent=1, sort_keys=True) in card
    assert 'hf_hub_download("me/tiny-stats", "heads.parquet", repo_type="dataset")' in card


def test_push_uploads_the_store_and_card_in_one_dataset_commit(store: Path) -> None:
    url = push_store(store, "me/tiny-stats", private=True, api=RecordingApi())
    assert url == "https://huggingface.co/datasets/me/tiny-stats/commit/abc"
    (name1, args1, kw1), (name2, args2, kw2) = RecordingApi.calls
    assert name1 == "create_repo" and args1 == ("me/tiny-stats",)
    assert kw1 == {"repo_type": "dataset", "exist_ok": True, "private": True}
    assert name2 == "create_commit" and args2 == ("me/tiny-stats",) and kw2["repo_type"] == "dataset"
    ops = {op.path_in_repo: op.path_or_fileobj for op in kw2["operations"]}
    assert set(ops) == {p.name for p in store.iterdir()} | {"README.md"}
    assert ops["heads.parquet"] == str(store / "heads.parquet")
    assert ops["README.md"] == dataset_card(store, repo_id="me/tiny-stats").encode()
    assert "tiny-neox" in kw2["commit_message"]


def test_a_repo_holding_the_store_of_another_model_is_refused_before_anything_is_pushed(
    store: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """The repo's meta.json names another model (here the shipped induction-d64, a GPT-2 of the same sizes): one
    line naming both, exit 2, nothing created or committed; a repo holding this model's store takes it."""
    held = {"meta": REPO / "data" / "induction-d64" / "meta.json"}

    class Holding(RecordingApi):
        def hf_hub_download(self, repo_id: str, filename: str, **kwargs):
            assert (filename, kwargs["repo_type"]) == ("meta.json", "dataset")
            return shutil.copy(held["meta"], Path(kwargs["local_dir"]) / filename)

    monkeypatch.setattr(huggingface_hub, "HfApi", Holding)
    assert publish_main([str(store), "me/stats"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "me/stats holds the store of another model" in lines[0], lines
    assert "induction-d64 (gpt2" in lines[0] and "tiny-neox (gpt_neox" in lines[0], lines[0]
    assert Holding.calls == []
    held["meta"] = store / "meta.json"
    assert publish_main([str(store), "me/stats"]) == 0
    assert [c[0] for c in Holding.calls] == ["create_repo", "create_commit"]


def test_cli_push_to_hub_after_the_run(store: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    suite = store.parent / "suite"
    out = tmp_path / "store"
    status = main(
        [
            "--no-progress",
            "--no-embeddings",
            "--source",
            str(suite),
            "--out",
            str(out),
            "--revisions",
            "step0,step1",
            "--push-to-hub",
            "me/stats",
        ]
    )
    assert status == 0, capsys.readouterr().err
    assert [c[0] for c in RecordingApi.calls] == ["create_repo", "create_commit"]
    assert "pushed" in capsys.readouterr().err

    class Refusing(RecordingApi):
        def create_commit(self, *args, **kwargs):
            request = httpx2.Request("POST", "https://huggingface.co/api/datasets/me/stats/commit/main")
            response = httpx2.Response(403, request=request)
            raise huggingface_hub.errors.HfHubHTTPError("403 Forbidden: you cannot write to me/stats", response=response)

    monkeypatch.setattr(huggingface_hub, "HfApi", Refusing)
    status = main(
        [
            "--no-progress",
            "--no-embeddings",
            "--source",
            str(suite),
            "--out",
            str(out),
            "--revisions",
            "step0,step1",
            "--push-to-hub",
            "me/stats",
        ]
    )
    err = capsys.readouterr().err
    assert status == 3 and "403 Forbidden" in err and "python -m headwatch.precompute.store.publish" in err
    assert open_store(out).steps.tolist() == [0, 1]


def fake_embeddings(calls: list[Path]):
    """Stands in for add_embeddings: records the call and marks the store's embeddings current."""

    def add_embeddings(path) -> Path:
        calls.append(Path(path))
        opened = open_store(path)
        meta = opened.meta.with_record("embeddings", {"steps": opened.meta.state_steps})
        commit_store(path, meta)
        return Path(path)

    return add_embeddings


def test_embeddings_follow_new_rows_and_resume(store: Path, tmp_path: Path, monkeypatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(headwatch.precompute.lenses.embeddings, "add_embeddings", fake_embeddings(calls))
    suite = store.parent / "suite"
    out = tmp_path / "store"
    report = run_precompute(suite, out, RunOptions(device="cpu", progress=False, revisions="step0"))
    assert calls == [out] and report.embeddings == "written"
    run_precompute(suite, out, RunOptions(device="cpu", progress=False, revisions="step0"))  # nothing new: not called
    assert calls == [out]
    run_precompute(suite, out, RunOptions(device="cpu", progress=False, revisions="step0,step1"))  # new rows: called
    assert calls == [out, out]
    # a run killed after its last checkpoint but before the embeddings: the next run makes them
    meta = json.loads((out / "meta.json").read_text())
    meta["embeddings"]["steps"] = [0]
    (out / "meta.json").write_text(json.dumps(meta))
    run_precompute(suite, out, RunOptions(device="cpu", progress=False, revisions="step0,step1"))
    assert calls == [out, out, out]
    report = run_precompute(
        suite,
        out,
        RunOptions(device="cpu", progress=False, revisions="step0,step1,step4", lens_options={"embeddings": {"on": False}}),
    )
    assert calls == [out, out, out] and report.embeddings == "skipped"


def test_failing_embeddings_never_lose_the_store(store: Path, tmp_path: Path, monkeypatch, caplog) -> None:
    def broken(path) -> None:
        raise RuntimeError("umap exploded")

    monkeypatch.setattr(headwatch.precompute.lenses.embeddings, "add_embeddings", broken)
    out = tmp_path / "store"
    with caplog.at_level(logging.WARNING, logger="precompute"):
        report = run_precompute(store.parent / "suite", out, RunOptions(device="cpu", progress=False, revisions="step0,step1"))
    assert report.embeddings == "failed (RuntimeError: umap exploded)"
    assert "trajectory-map embeddings failed" in caplog.text and "python -m headwatch.precompute.lenses.embeddings" in caplog.text
    assert open_store(out).steps.tolist() == [0, 1]
