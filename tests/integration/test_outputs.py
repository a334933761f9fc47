"""Every command given an output it must not write: an existing file, the store of another model, another kind
of folder (a folder that is not a store, a folder of stores, a statistics store where a folder of files is
asked for). Each answers with one line and exit status 2, and writes nothing: every file and folder of the
test's folder (the output, its neighbours, the follower's status and the lock files beside a store) is as it
was, byte for byte.

Each command runs as its own process (`tests.integration.zygote.run_module`, forked from a server that imported
the job once), as ``python -m MODULE`` would: its log lines count.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration import zygote
from tests.integration.conftest import REPO, make_suite, run_cli

OTHER_MODEL = REPO / "data" / "induction-d64"  # gpt2: the same sizes as the suite's GPT-NeoX, another model
TINY = ["--device", "cpu", "--corpus-archive", "sdist.tar.gz", "--n-layers", "2", "--n-heads", "4", "--d-model", "64"]
TINY += ["--d-mlp", "128", "--context", "32", "--steps", "2", "--batch-size", "2", "--eval-batches", "1"]

# What each kind of bad output is, in the test's folder, and what the refusal must say of it.
KINDS = {
    "file": ("file.txt", "is a file"),
    "meta.json": ("store/meta.json", "give its folder, 'store'"),
    "other": ("other", "another model"),
    "folder": ("docs", "is not a"),
    "stores": ("stores", "folder of stores"),
    "store": ("store", "is a statistics store"),
    "another model's store": ("other", "is a statistics store"),
    "another run": ("store", "another run"),
}
PRECOMPUTE = ["precompute", "--no-progress", "--source", "suite", "--out"]
FOLLOW = ["precompute", "--no-progress", "--follow", "--poll", "0.2", "--source", "run", "--out"]
# (command, what python -m runs, its arguments before the output, the kinds of bad output it is given)
CASES = [
    ("precompute", "headwatch", PRECOMPUTE, ("file", "other", "folder", "stores")),
    ("precompute --follow", "headwatch", FOLLOW, ("file", "other", "folder", "stores")),
    ("compare", "headwatch", ["compare", "store", str(OTHER_MODEL), "--permutations", "9", "--out"], ("file", "store")),
    ("report", "headwatch", ["report", "store", "--out"], ("file", "another model's store")),
    ("publish", "headwatch", ["publish", "{out}", "me/stats"], ("file", "folder", "stores")),
    ("train --out", "headwatch", ["train", *TINY, "--out"], ("file", "store")),
    ("train --watch", "headwatch", ["train", *TINY, "--out", "new-run", "--watch"], ("file", "other", "another run", "folder")),
    ("info", "headwatch", ["info"], ("meta.json", "stores")),
    ("plan --out", "headwatch", ["plan", "suite", "--out"], ("file", "other", "folder", "stores")),
    ("llc-calibrate", "headwatch", ["llc-calibrate", "suite", "--step", "0", "--eval-length", "32", "--out"], ("file", "store")),
    ("lenses.types", "headwatch.precompute.lenses.types", [], ("file", "stores")),
    ("lenses.stages", "headwatch.precompute.lenses.stages", [], ("file", "stores")),
    ("lenses.embeddings", "headwatch.precompute.lenses.embeddings", [], ("file", "stores")),
    ("store.upgrade", "headwatch.precompute.store.upgrade", [], ("file", "stores")),
]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """The suite (two GPT-NeoX checkpoints), its store and a corpus archive, made once."""
    from tests.integration.test_training import write_sdist

    root = tmp_path_factory.mktemp("outputs")
    make_suite(root / "suite", [0, 1])
    done = run_cli("--source", str(root / "suite"), "--out", str(root / "store"))
    assert done.returncode == 0, done.stderr
    write_sdist(root / "sdist.tar.gz")
    return root


def workspace(made: Path, folder: Path) -> None:
    """The test's folder: a run folder, its store, another model's store, a file, a folder of notes, a folder of
    stores and a corpus archive."""
    for name in ("suite", "store"):
        shutil.copytree(made / name, folder / name)
    shutil.copytree(made / "suite", folder / "run")  # a run folder still training (no run.json), to follow
    shutil.copy(made / "sdist.tar.gz", folder / "sdist.tar.gz")
    shutil.copytree(OTHER_MODEL, folder / "other")
    (folder / "file.txt").write_text("a file that is not a store\n")
    (folder / "docs").mkdir()
    (folder / "docs" / "notes.md").write_text("# notes\n")
    (folder / "stores").mkdir()
    shutil.copytree(made / "store", folder / "stores" / "a-run")


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (hidden ones included), with its contents' digest (``dir`` for a folder)."""
    return {
        str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
    }


def run_command(module: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGV`` in ``cwd``, forked from the job's server where it can be."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0", "HF_HUB_OFFLINE": "1"}
    done = zygote.run_module(module, argv, env=env, cwd=cwd, timeout=120)
    if done is not None:
        return done
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "command, module, args, kind",
    [pytest.param(c, m, a, k, id=f"{c}: {k}") for c, m, a, kinds in CASES for k in kinds],
)
def test_a_bad_output_is_one_line_exit_2_and_nothing_written(
    command: str, module: str, args: list[str], kind: str, made: Path, tmp_path: Path
) -> None:
    out, says = KINDS[kind]
    workspace(made, tmp_path)
    argv = [a.replace("{out}", out) for a in args] if "{out}" in args else [*args, out]
    before = snapshot(tmp_path)
    done = run_command(module, argv, tmp_path)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, f"{command} {out}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    assert len(lines) == 1, f"{command} {out}: not one line:\n" + "\n".join(lines)
    assert "error" in lines[0] and repr(out) in lines[0], lines[0]
    assert says in lines[0], lines[0]
    if kind == "other":  # both models named
        assert "induction-d64 (gpt2" in lines[0] and "gpt_neox" in lines[0], lines[0]
    after = snapshot(tmp_path)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert changed == [], f"{command} {out} wrote {changed}"
