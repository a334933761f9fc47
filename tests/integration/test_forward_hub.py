"""The forward lens on a Hub source (the fake Hub on 127.0.0.1): the tokenizer from the repo's main
revision, each revision's weights downloaded into the scratch folder one checkpoint at a time and
deleted, and the same forward tables as the local folders give."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.store import read_meta
from headwatch.analysis.store.lenses.attention import ATTENTION_TABLES
from tests.integration.conftest import make_suite, run_cli
from tests.integration.test_hub import REPO_ID, base_env, run

pytestmark = pytest.mark.slow
STEPS = [0, 1, 4]
CHARS = "abcdefghijklmnopqrstuvwxyz .,\n"
EVAL = ("--lenses", "attention", "--eval-sequences", "4", "--eval-length", "32")


def save_char_tokenizer(folder: Path) -> None:
    """A character-level tokenizer (ids below the test model's vocabulary of 64), saved like any other."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(CHARS)} | {"[UNK]": len(CHARS)}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]")), unk_token="[UNK]"
    )
    fast.save_pretrained(folder)


def test_hub_revisions_are_downloaded_one_at_a_time_and_match_the_local_folders(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", STEPS)
    for step in STEPS:
        save_char_tokenizer(suite / f"step{step}")
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog, again and again.\n" * 60)
    local = tmp_path / "local"
    done = run_cli("--source", str(suite), "--out", str(local), *EVAL, "--eval-text", str(text))
    assert done.returncode == 0, done.stderr
    local_info = read_meta(local).forward
    assert local_info is not None and local_info.tokenizer == str(suite / "step0")
    repo = Repo()
    for step in STEPS:
        repo.add(f"step{step}", folder_files(suite / f"step{step}"))
    repo.add("main", folder_files(suite / "step4"))
    out = tmp_path / "stores" / "hub"
    with FakeHub() as hub:
        hub.repos[REPO_ID] = repo
        env = base_env(tmp_path / "home", HF_ENDPOINT=hub.url)
        done = run(
            "--source",
            REPO_ID,
            "--out",
            str(out),
            *EVAL,
            "--eval-text",
            str(text),
            "--revisions",
            ",".join(f"step{s}" for s in STEPS),
            env=env,
            timeout=300,
        )
        downloads = [e for e in hub.log if e.method == "GET" and e.path.endswith("/model.safetensors")]
    assert done.returncode == 0, done.stderr
    weights = (suite / "step0" / "model.safetensors").stat().st_size
    assert len([d for d in downloads if d.range is None]) == len(STEPS)  # one whole download per revision
    assert "peak scratch disk" in done.stderr
    peak = done.stderr.split("peak scratch disk ")[1].split()[0:2]
    assert peak != ["0", "B"], done.stderr  # the revision's weights were on disk while it was evaluated
    assert not (tmp_path / "stores" / ".hub.fetch").exists()  # and the scratch folder is gone
    info, local_info = read_meta(out).forward, read_meta(local).forward
    assert info is not None and local_info is not None
    assert info.tokenizer == REPO_ID and info.tokens_sha256 == local_info.tokens_sha256
    for spec in ATTENTION_TABLES:
        assert pq.read_table(local / spec.file).equals(pq.read_table(out / spec.file)), spec.name
    assert weights > 0
