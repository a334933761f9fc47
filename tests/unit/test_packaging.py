"""pyproject.toml against the pinned requirement files, and the wheel it builds.

The requirement files stay (the Space image installs requirements.txt, CI the dev file); the
distribution's dependencies repeat them. These tests read both independently (the files
line by line, following ``-r``; pyproject with tomllib, following ``headwatch[...]``) and
fail on any package or pin that differs, extra by extra.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RAY_ONLY = {"ray"}  # requirements-precompute.txt's line kept out of the precompute and train extras (the ray extra)


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _pin(line: str) -> tuple[str, str]:
    name, sep, version = line.partition("==")
    assert sep, f"unpinned requirement {line!r}"
    return _name(name.strip()), version.strip()


def requirement_file(name: str) -> dict[str, str]:
    """Package -> pinned version of a requirement file, its ``-r`` includes followed."""
    pins: dict[str, str] = {}
    for raw in (ROOT / name).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        included = requirement_file(line[3:].strip()) if line.startswith("-r ") else dict([_pin(line)])
        for pkg, version in included.items():
            assert pins.setdefault(pkg, version) == version, f"{name}: {pkg} pinned twice, differently"
    return pins


def extra(name: str | None) -> dict[str, str]:
    """Package -> pinned version of pyproject's core dependencies (None) or one extra, ``headwatch[...]`` followed."""
    project = PYPROJECT["project"]
    lines = project["dependencies"] if name is None else project["optional-dependencies"][name]
    pins: dict[str, str] = {}
    for line in lines:
        self_ref = re.fullmatch(r"headwatch\[([\w,]+)\]", line)
        included: dict[str, str] = {}
        for other in self_ref.group(1).split(",") if self_ref else ():
            included |= extra(other)
        if not self_ref:
            included = dict([_pin(line)])
        for pkg, version in included.items():
            assert pins.setdefault(pkg, version) == version, f"extra {name}: {pkg} pinned twice, differently"
    return pins


def _without(pins: dict[str, str], names: set[str]) -> dict[str, str]:
    return {k: v for k, v in pins.items() if k not in names}


def test_core_dependencies_are_requirements_txt():
    assert extra(None) == requirement_file("requirements.txt")


def test_precompute_extra_is_requirements_precompute_without_ray():
    assert extra("precompute") == _without(requirement_file("requirements-precompute.txt"), RAY_ONLY)


def test_ray_extra_is_requirements_precompute():
    assert extra("ray") == requirement_file("requirements-precompute.txt")


def test_train_extra_is_requirements_training_without_ray():
    assert extra("train") == _without(requirement_file("requirements-training.txt"), RAY_ONLY)


def test_dev_extra_with_core_is_requirements_dev():
    core, dev = extra(None), extra("dev")
    assert all(dev[k] == v for k, v in core.items() if k in dev)
    assert core | dev == requirement_file("requirements-dev.txt")


def test_build_system_pins_are_the_dev_pins():
    dev = requirement_file("requirements-dev.txt")
    assert dict(_pin(r) for r in PYPROJECT["build-system"]["requires"]) == {k: dev[k] for k in ("setuptools", "wheel")}


def _repository_packages() -> set[str]:
    """Every folder of the library (headwatch/) that holds an ``__init__.py``, as a dotted name."""
    return {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "headwatch").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        cwd=build,
        timeout=300,
    )
    (path,) = out.glob("headwatch-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def test_wheel_holds_every_package(wheel):
    names = set(wheel.namelist())
    missing = [pkg for pkg in sorted(_repository_packages()) if pkg.replace(".", "/") + "/__init__.py" not in names]
    assert not missing
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "headwatch").rglob("*.py") if "__pycache__" not in p.parts}
    assert len(modules) > 150 and modules <= names


def test_the_wheel_installs_one_top_level_package(wheel):
    """Installed, the project is one import name: nothing beside ``headwatch`` (and its dist-info) in site-packages
    that could shadow a researcher's own ``analysis/`` folder or ``training.py``."""
    tops = {n.split("/")[0] for n in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"headwatch"}


def test_wheel_holds_the_app(wheel):
    names = set(wheel.namelist())
    pages = {f"headwatch/app/pages/{p.name}" for p in (ROOT / "pages").glob("*.py")}
    assert pages and pages <= names
    assert {"headwatch/app/app.py", "headwatch/app/.streamlit/config.toml"} <= names
    assert wheel.read("headwatch/app/app.py") == (ROOT / "app.py").read_bytes()
    assert not any(n.startswith(("tests/", "data/", "benchmarks/", "pages/", "app.py")) for n in names)


def test_wheel_declares_the_console_script(wheel):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert re.search(r"^\[console_scripts\]\s*\nheadwatch\s*=\s*headwatch\.cli:main\s*$", text, re.M)


def test_an_installed_copy_serves_the_shipped_app(wheel, tmp_path):
    """Unpacked as pip would install it, away from the clone: dashboard.serve finds headwatch/app/app.py."""
    site = tmp_path / "site"
    wheel.extractall(site)
    code = (
        "import headwatch.dashboard.serve as s; print(s.APP); "
        "print(sorted(p.name for p in (s.APP.parent / 'pages').glob('*.py')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    ).stdout.splitlines()
    assert out[0] == str(site / "headwatch" / "app" / "app.py")
    assert out[1] == str(sorted(p.name for p in (ROOT / "pages").glob("*.py")))


def test_a_notebook_opens_a_store_with_one_import(wheel, tmp_path):
    """``from headwatch import open_store`` in an installed copy, away from the clone: the store's own shape and
    steps come back; the import itself loads neither pandas nor torch (the command's help stays fast)."""
    site = tmp_path / "site"
    wheel.extractall(site)
    store = ROOT / "data" / "induction-d64"
    code = (
        "import sys; import headwatch; light = not any(m in sys.modules for m in ('pandas', 'torch')); "
        f"from headwatch import open_store; s = open_store({str(store)!r}); "
        "print(light, s.n_layers, s.n_heads, len(s.steps), type(s).__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(site)}
    ).stdout.split()
    meta = json.loads((store / "meta.json").read_text())
    listed = [c for c in meta["checkpoints"] if not c.get("duplicate_of")]
    assert out[0] == "True" and out[4] == "headwatch.analysis.store.reader"
    assert (int(out[1]), int(out[2])) == (meta["model"]["n_layers"], meta["model"]["n_heads"])
    assert int(out[3]) == len(listed)
