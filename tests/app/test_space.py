"""The Space image: the Dockerfile lints clean, the app needs only requirements.txt, and its
CMD serves the app (health endpoint and a page) from a fresh virtual environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def dockerfile_cmd() -> list[str]:
    text = (REPO / "Dockerfile").read_text()
    match = re.search(r"^CMD (\[.*\])\s*$", text, re.M)
    assert match, "Dockerfile needs a CMD in JSON notation"
    return json.loads(match.group(1))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    res = subprocess.run([hadolint, "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_dockerfile_runs_as_uid_1000_on_the_space_port_with_a_health_check() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^USER 1000$", text, re.M)
    assert "--server.port=7860" in dockerfile_cmd()
    assert "HEALTHCHECK" in text and "/_stcore/health" in text
    front = (REPO / "README.md").read_text().split("---")[1]
    assert "sdk: docker" in front and "app_port: 7860" in front and "title:" in front and "short_description:" in front


def test_app_and_every_page_import_neither_torch_nor_transformers() -> None:
    script = textwrap.dedent(
        """
        import glob, sys
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file("app.py", default_timeout=120).run()
        assert not at.exception, at.exception
        for page in sorted(glob.glob("pages/*.py")):
            at.switch_page(page).run()
            assert not at.exception, (page, at.exception)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
        print("HEAVY", heavy[:5])
        sys.exit(1 if heavy else 0)
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


@pytest.mark.slow
def test_requirements_txt_alone_serves_the_app_with_the_dockerfile_cmd(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",  # no .pyc for every module of plotly and pandas: the app compiles what it imports
            "-r",
            str(REPO / "requirements.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    check = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"], capture_output=True)
    assert check.returncode != 0, "requirements.txt must not pull torch"

    port = free_port()
    cmd = [arg.replace("7860", str(port)).replace("0.0.0.0", "127.0.0.1") for arg in dockerfile_cmd()]
    cmd[0] = str(venv / "bin" / cmd[0])
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": ""}
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    assert r.status == 200 and r.read().strip() == b"ok"
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()[-3000:]
                assert time.monotonic() < deadline, "the app did not become healthy in 120 s"
                time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/head?layer=1&head=2", timeout=10) as r:
            assert r.status == 200 and b"<html" in r.read().lower()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
