"""The house style's mechanical rules, checked: ruff's lint rules and format, and mypy on the annotated packages.

Both tools are configured in ``pyproject.toml`` (the rule set and why, the packages mypy reads)
and pinned in ``requirements-dev.txt``; each runs here through the test environment's own
interpreter, over the whole repository, and a finding fails the test with the tool's output.
mypy keeps its cache in ``.mypy_cache/`` (gitignored): a first run reads torch's stubs and
takes about a minute, later ones a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    done = _run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]


def test_the_code_is_formatted() -> None:
    done = _run("ruff", "format", "--no-cache", "--check", ".")
    assert done.returncode == 0, "run `ruff format .`:\n" + done.stdout[-8000:] + done.stderr[-2000:]


def test_mypy_finds_nothing() -> None:
    done = _run("mypy")  # the files, options and cache folder are pyproject.toml's [tool.mypy]
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
