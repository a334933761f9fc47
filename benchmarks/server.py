"""A Streamlit server as the browser benchmarks and the browser tests start it: waiting for its health check,
stopping it, and the CPU time its process has used."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Literal


def wait_healthy(proc: subprocess.Popen, base: str, *, seconds: float) -> Literal["healthy", "exited", "timeout"]:
    """Wait until the server ``proc`` at ``base`` (``http://127.0.0.1:PORT``) answers Streamlit's health check, at
    most ``seconds``: ``healthy``, else ``exited`` (the process ended first) or ``timeout``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{base}/_stcore/health", timeout=2)
            return "healthy"
        except OSError:
            if proc.poll() is not None:
                return "exited"
            time.sleep(0.5)
    return "timeout"


def stop(proc: subprocess.Popen) -> None:
    """Stop the server ``proc``: SIGTERM, then SIGKILL after 10 s, and reap it."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid``, all its threads (``utime``, ``stime`` of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
