"""The house style's mechanical rules, checked: ruff's lint rules and format, mypy on every package (tests and
benchmarks included), and a reason beside every ``type: ignore``.

Both tools are configured in ``pyproject.toml`` (the rule set and why, the packages mypy reads)
and pinned in ``requirements-dev.txt``; each runs here through the test environment's own
interpreter, over the whole repository, and a finding fails the test with the tool's output.
mypy keeps its cache in ``.mypy_cache/`` (gitignored): a first run reads torch's stubs and
takes one to one and a half minutes on the 2-core machine (transformers and Ray are read as untyped:
pyproject.toml), later ones a few seconds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# a type: ignore without its error code, or without a reason after it on the same line
BARE_IGNORE = re.compile(r"#\s*type:\s*ignore(?!\[[\w, -]+\]  # \S)")


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


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    """``# type: ignore[code]  # why``: one error code silenced, and the reason on the same line."""
    ignore = "x = f()  # type" + ": ignore"  # split, so that this file's own lines do not match
    assert BARE_IGNORE.search(ignore) and BARE_IGNORE.search(ignore + "[misc]")
    assert not BARE_IGNORE.search(ignore + "[arg-type, misc]  # f's stub is wrong")
    found = []
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in tracked.stdout.split():  # the repository's own files: no .venv, no build/ left by a wheel build
        for number, line in enumerate((REPO / name).read_text().splitlines(), 1):
            if BARE_IGNORE.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []
