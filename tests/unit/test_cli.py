"""The ``headwatch`` command: help, dispatch to the existing entry points, serve's data settings, info.

``info`` is checked against the shipped stores read independently (meta.json with json, sizes with
os.stat); dispatch against stand-in ``main`` functions that record what they were given.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import headwatch.dashboard.serve
import headwatch.precompute.__main__
import headwatch.precompute.store.publish
import headwatch.training.__main__
from headwatch import __version__
from headwatch.cli import main

ROOT = Path(__file__).resolve().parents[2]
STORES = sorted(p for p in (ROOT / "data").iterdir() if (p / "meta.json").is_file())


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("serve", "precompute", "train", "publish", "info", "plan"):
        assert f"    {command}" in out
    assert "Exit status" in out


@pytest.mark.parametrize("command", ["serve", "info", "plan"])
def test_subcommand_help(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: headwatch {command}")


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"headwatch {__version__}"


@pytest.mark.parametrize("argv", [[], ["bogus"], ["info"], ["info", "a", "b"], ["plan"]])
def test_bad_arguments_are_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("headwatch") and "error:" in err[0]


@pytest.mark.parametrize(
    "command, module",
    [
        ("precompute", headwatch.precompute.__main__),
        ("train", headwatch.training.__main__),
        ("publish", headwatch.precompute.store.publish),
    ],
)
def test_delegates_the_remaining_arguments(command, module, monkeypatch):
    seen = []
    monkeypatch.setattr(module, "main", lambda argv: seen.append(argv) or 3)
    assert main([command, "--source", "x", "--help"]) == 3
    assert seen == [["--source", "x", "--help"]]


@pytest.fixture
def served(monkeypatch):
    seen = []
    monkeypatch.delenv("HEADWATCH_DATA", raising=False)
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.setattr(headwatch.dashboard.serve, "main", lambda argv: seen.append(argv))
    return seen


def test_serve_without_argument_serves_data_of_the_working_directory(served, monkeypatch):
    import os

    monkeypatch.chdir(ROOT)
    assert main(["serve", "--server.port", "8600"]) == 0
    assert served == [["--server.port", "8600"]]
    assert os.environ["HEADWATCH_DATA"] == str(ROOT / "data") and "HEADWATCH_STORE" not in os.environ


def test_serve_a_folder_of_stores_or_one_store(served, tmp_path):
    import os

    assert main(["serve", str(ROOT / "data"), "--dev"]) == 0
    assert os.environ["HEADWATCH_DATA"] == str(ROOT / "data")
    assert main(["serve", str(STORES[0])]) == 0
    assert os.environ["HEADWATCH_STORE"] == str(STORES[0])
    assert served == [["--dev"], []]
    assert main(["serve", str(tmp_path / "missing")]) == 2


def _fresh_python(code: str) -> str:
    """What ``code`` prints in a new interpreter started from the repository root."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def test_serve_imports_nothing_heavy():
    code = (
        "import sys, headwatch.dashboard.serve as s; s.main = lambda a: None; from headwatch.cli import main; "
        "main(['serve']); print(sorted(m for m in ('torch', 'transformers', 'precompute', 'training') "
        "if m in sys.modules))"
    )
    assert _fresh_python(code) == "[]"


def test_the_warm_up_imports_the_page_modules_and_loads_the_kernels_and_nothing_heavy():
    """`dashboard.serve.warm_up` (run by the server in a thread) leaves what a page's first run needs in place, and
    the imported modules' objects frozen (`gc.freeze`): the full collection Streamlit runs after every script run
    walks only what was made since (a few hundred objects here, not the ~200,000 of the modules)."""
    code = (
        "import gc, sys, headwatch.dashboard.serve as s; s.warm_up(wait_s=0); from headwatch.analysis.stats import fused; "
        "print([m for m in s.WARM_MODULES if m not in sys.modules], len(fused.row_sums.signatures), "
        "len(fused.z_pass.signatures), sorted(m for m in ('torch', 'transformers', 'umap') if m in sys.modules), "
        "gc.get_freeze_count() > 100_000, len(gc.get_objects()) < gc.get_freeze_count() / 50)"
    )
    assert _fresh_python(code) == "[] 1 1 [] True True"


def test_the_server_says_it_is_ready_only_after_the_warm_up(tmp_path):
    """``python -m headwatch.dashboard.serve`` answers its health check (what Streamlit's page asks before it connects) with 503
    "warming up" until `warm_up` has imported the pages' modules: once it answers 200, the warm-up's line is in the
    log, so no first session shares the interpreter with it. With ``HEADWATCH_WARM_UP=0`` it is ready at once."""
    import os
    import socket
    import time
    import urllib.error
    import urllib.request

    for warm in ("1", "0"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = tmp_path / f"serve-{warm}.log"
        env = dict(os.environ, HEADWATCH_WARM_UP=warm, HEADWATCH_DATA=str(tmp_path))
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "headwatch.dashboard.serve", "--server.port", str(port), "--server.headless", "true",
                 "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
            answers = []
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    try:
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5)
                        break
                    except urllib.error.HTTPError as e:
                        answers.append((e.code, e.read().decode()))
                    except OSError:
                        pass
                    time.sleep(0.02)
                else:
                    pytest.fail(f"not healthy in 120 s: {log.read_text()}")
                warmed = headwatch.dashboard.serve.WARMED in log.read_text()
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        if warm == "1":
            assert warmed, log.read_text()  # ready only once the modules are imported
            assert any(code == 503 and "warming up" in text for code, text in answers), answers  # and said why before
        else:
            assert not warmed and not any("warming" in text for _, text in answers), answers


def test_info_imports_no_torch():
    code = (
        f"import sys; from headwatch.cli import main; main(['info', {str(STORES[0])!r}]); "
        "print(sorted(m for m in ('torch', 'transformers', 'streamlit') if m in sys.modules))"
    )
    assert _fresh_python(code).splitlines()[-1] == "[]"


@pytest.mark.parametrize("store", STORES, ids=lambda p: p.name)
def test_info_on_the_shipped_stores(store, capsys):
    assert main(["info", str(store)]) == 0
    out = capsys.readouterr().out
    meta = json.loads((store / "meta.json").read_text())
    model = meta["model"]
    steps = sorted(c["step"] for c in meta["checkpoints"])
    assert f"model: {model['id']}" in out
    assert f"{model['n_layers']} layers x {model['n_heads']} heads" in out
    assert f"checkpoints: {len(steps)}, steps {steps[0]} to {steps[-1]}" in out
    for file in store.glob("*.parquet"):
        size = file.stat().st_size
        assert any(
            line.split()[0] == file.name and line.split()[1] != "absent" for line in out.splitlines() if line.startswith("  ")
        ), file.name
        assert size > 0
    total = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    assert f"size on disk: {total / 1e6:.1f} MB" in out
    assert f"source={meta['settings']['source']}" in out
    if (store / "llc.parquet").is_file():
        import pyarrow.parquet as pq

        steps = set(pq.read_table(store / "llc.parquet", columns=["step"])["step"].to_pylist())
        assert re.search(rf"^  llc +{len(steps)} checkpoints; meta.json 'llc' records how", out, re.M)


def test_info_says_what_a_rerun_adds(tmp_path, capsys):
    import shutil

    store = tmp_path / "s"
    shutil.copytree(STORES[0], store)
    (store / "layers.parquet").unlink()
    (store / "embeddings.parquet").unlink()
    assert main(["info", str(store)]) == 0
    out = capsys.readouterr().out.split("would add:")[1]
    assert "layers.parquet" in out and "embeddings.parquet" in out and "overlaps" not in out


def test_plan_without_the_precompute_extra_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ModuleNotFoundError
    for name in [m for m in sys.modules if m.startswith("headwatch.precompute.sources")]:  # they import torch
        monkeypatch.delitem(sys.modules, name)
    assert main(["plan", str(ROOT / "data")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "headwatch[precompute]" in err[0]


def test_precompute_help_says_what_the_job_computes(capsys):
    """The job's help opens with what it writes: both per-head matrices and every lens of the registry, not W_QK
    alone (a new user read 'Compute per-head W_QK statistics')."""
    from headwatch.analysis.store.lenses import LENSES
    from headwatch.precompute.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Compute per-head W_QK statistics" not in text
    assert "W_QK and W_OV of every head" in text
    for lens in LENSES:
        if lens.asked_by == "--lenses":
            assert f" {lens.name}" in text.split("optional arguments")[0].split("options:")[0], lens.name
