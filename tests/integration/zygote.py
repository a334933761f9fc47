"""``python -m headwatch.precompute`` (or another command) without paying its imports each time: runs forked from a
server that imported them.

The end-to-end tests start the job a hundred and fifty times; each ``python -m headwatch.precompute`` spends about five
CPU-seconds importing pandas, pyarrow, torch and transformers before it reads a checkpoint. Here a
multiprocessing forkserver imports them once per test process (`PRELOAD`) and forks a child per run: the
child is a new process, as a subprocess is (its own threads, signal handlers, working directory and
environment, its exit code and its output on files), that starts with the modules in memory. It has not
run anything before the fork: the server only imports, so no torch thread pool or lock is copied half-used.

What cannot be forked is what the preloaded modules read from the environment when they are imported
(huggingface_hub's cache and offline switches, torch's and OpenMP's thread settings): a run whose
environment differs from the server's in one of `IMPORT_TIME_ENV` returns None here, and the caller runs a
plain subprocess.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import types
from collections.abc import Mapping
from pathlib import Path

# The modules a precompute run imports; the server imports them before the first fork.
PRELOAD = [
    "tests.integration.zygote",  # the child's target: unpickled from the server's modules, not found on a path
    "headwatch.precompute.__main__",
    "headwatch.precompute.job.run",
    "headwatch.precompute.lenses.attention",
    "headwatch.precompute.lenses.llc",
    "torch",
    "transformers",
    "transformers.models.gpt_neox.modeling_gpt_neox",
    "transformers.models.gpt2.modeling_gpt2",
    "safetensors.torch",
    "scipy.stats",
]
# Environment variables read at import time by the preloaded modules (by prefix).
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "OPENBLAS", "NUMBA", "KMP_")

# None: not started yet; False: a child failed to start once in this process, so plain subprocesses from then on
_context: multiprocessing.context.ForkServerContext | bool | None = None
_server_env: dict[str, str] = {}


def _import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


def _child(module: str, argv: list[str], env: dict[str, str], cwd: str, out: str, err: str, started: str) -> None:
    import importlib
    import importlib.util

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(handle, fd)
        os.close(handle)
    Path(started).touch()
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    if spec.submodule_search_locations is not None:  # a package: python -m runs its __main__
        module = f"{module}.__main__"
    main_module = importlib.import_module(module)
    sys.argv = [str(main_module.__file__), *argv]
    sys.exit(main_module.main(argv))  # multiprocessing turns SystemExit into the exit code and flushes both streams


def run_precompute(argv: list[str], *, env: Mapping[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess | None:
    """``python -m headwatch.precompute ARGV`` forked from the server, or None where the environment rules it out or the
    server could not start a child (then the caller runs a plain subprocess, as every later call here does)."""
    return run_module("headwatch.precompute", argv, env=env, cwd=cwd, timeout=timeout)


def run_module(
    module: str, argv: list[str], *, env: Mapping[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess | None:
    """``python -m MODULE ARGV`` (a module whose ``main(argv)`` returns the exit status: ``headwatch``, the job, its
    lenses' and tools' commands) forked from the server, or None as `run_precompute`."""
    global _context, _server_env
    if sys.platform != "linux" or os.environ.get("HEADWATCH_TEST_ZYGOTE") == "0" or _context is False:
        return None
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
        _server_env = _import_time_env(os.environ)
    assert isinstance(_context, multiprocessing.context.ForkServerContext)
    if _import_time_env(env) != _server_env:
        return None
    with tempfile.TemporaryDirectory(prefix="precompute-run-") as tmp:
        out, err, started = (os.path.join(tmp, name) for name in ("stdout", "stderr", "started"))
        Path(out).touch()
        Path(err).touch()
        process = _context.Process(target=_child, args=(module, argv, dict(env), str(cwd), out, err, started))
        # multiprocessing re-runs the parent's __main__ in the child when it has a file; after Streamlit's AppTest
        # that is app.py: a bare __main__ while the child is started
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            process.start()
        except OSError:
            _context = False
            return None
        finally:
            sys.modules["__main__"] = main
        process.join(timeout)
        cmd = [sys.executable, "-m", module, *argv]
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(cmd, timeout, Path(out).read_text(), Path(err).read_text())
        if not Path(started).exists():  # the child died before the job began: nothing of the run happened
            _context = False
            return None
        code = process.exitcode if process.exitcode is not None else 1
        return subprocess.CompletedProcess(cmd, code, Path(out).read_text(), Path(err).read_text())
