"""The architecture's import rules, checked: import-linter's contracts (``.importlinter``) and the app's scripts.

``.importlinter`` says what each package may import, indirect imports included (a dashboard
module that reaches torch through an analysis module breaks the slim-app contract as if it
imported torch itself). ``app.py`` and ``pages/`` are scripts, not packages, so import-linter
does not see them: their imports are read with `ast` here (module level and inside functions).
"""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What the dashboard's scripts may not import (the Space image has none of it; docs/design-notes.md section 2).
APP_FORBIDDEN = ("headwatch.precompute", "headwatch.training", "torch", "transformers", "ray", "devinterp")


def _contracts() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    return config


def _count(config: configparser.ConfigParser) -> int:
    """How many contracts ``.importlinter`` declares."""
    return sum(section.startswith("importlinter:contract:") for section in config.sections())


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with ``.importlinter`` over the packages under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--config", str(root / ".importlinter"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy_packages(config: configparser.ConfigParser, root: Path) -> None:
    """The packages ``.importlinter`` reads, and the file itself, copied under ``root``."""
    for package in config["importlinter"]["root_packages"].split():
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", root / ".importlinter")


def test_import_linter_contracts_are_kept(tmp_path: Path) -> None:
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert _count(_contracts()) >= 6 and f"{_count(_contracts())} kept, 0 broken" in done.stdout


def test_the_contracts_see_a_benchmark_importing_tests_and_the_command_importing_the_dashboard(tmp_path: Path) -> None:
    """On a copy of the packages, one import added to a benchmark (from tests/) and one to a command module (of the
    dashboard) break the two contracts that forbid them, and only those."""
    config = _contracts()
    _copy_packages(config, tmp_path)
    with (tmp_path / "benchmarks" / "bench_layers.py").open("a") as bench:
        bench.write("\nfrom tests.integration.conftest import REPO  # noqa: E402\n")
    with (tmp_path / "headwatch" / "units.py").open("a") as command:
        command.write("\nimport headwatch.dashboard.loader  # noqa: E402\n")
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{_count(config) - 2} kept, 2 broken" in done.stdout, done.stdout[-4000:]
    assert "benchmarks.bench_layers -> tests" in done.stdout and "headwatch.units -> headwatch.dashboard.loader" in done.stdout


def test_the_contracts_see_a_subject_of_analysis_importing_one_above_it(tmp_path: Path) -> None:
    """On a copy of the packages, the weights' maths importing what the pages say (`analysis.findings`) and one run's
    stages importing its trajectories (a subject of the same layer) break the analysis-by-subject contract, and only
    it."""
    config = _contracts()
    _copy_packages(config, tmp_path)
    analysis = tmp_path / "headwatch" / "analysis"
    with (analysis / "weights" / "heads.py").open("a") as heads:
        heads.write("\nimport headwatch.analysis.findings.values  # noqa: E402\n")
    with (analysis / "stages" / "curve.py").open("a") as curve:
        curve.write("\nimport headwatch.analysis.trajectories.maps  # noqa: E402\n")
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{_count(config) - 1} kept, 1 broken" in done.stdout, done.stdout[-4000:]
    assert "headwatch.analysis.weights.heads -> headwatch.analysis.findings.values" in done.stdout, done.stdout[-4000:]
    assert "headwatch.analysis.stages.curve -> headwatch.analysis.trajectories.maps" in done.stdout, done.stdout[-4000:]


def _root(name: str) -> str:
    """The package an import names: its first part, or its first two under ``headwatch`` (``headwatch.precompute``)."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "headwatch" else parts[0]


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(_root(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(_root(node.module))
    return roots


def test_the_apps_scripts_import_neither_the_job_nor_torch() -> None:
    scripts = [REPO / "app.py", *sorted((REPO / "pages").glob("*.py"))]
    assert len(scripts) > 10
    offending = {str(p.relative_to(REPO)): sorted(_imported_roots(p) & set(APP_FORBIDDEN)) for p in scripts}
    assert {k: v for k, v in offending.items() if v} == {}


def test_the_script_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "page.py"
    bad.write_text("def main():\n    from headwatch.precompute.job.run import run_precompute\n    import torch.nn\n")
    assert _imported_roots(bad) & set(APP_FORBIDDEN) == {"headwatch.precompute", "torch"}
