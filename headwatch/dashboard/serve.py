"""Serve the dashboard: ``python -m headwatch.dashboard.serve [--dev] [options of streamlit run]``.

The same as ``streamlit run app.py [options]``, except for two things:

- Streamlit's file watcher is off (``--server.fileWatcherType none``) unless the
  caller chooses a watcher, with that option or its environment variable
  ``STREAMLIT_SERVER_FILE_WATCHER_TYPE``; ``--dev`` chooses ``poll`` (see below);
- Streamlit is told, before the server starts, that the app declares its pages with
  ``st.navigation`` and does not use the legacy ``pages/`` directory.

Every way of serving goes through here (``scripts/dashboard.sh``, the Dockerfile's
CMD, the browser tests), so both hold for all of them.

Why the watcher is off. Streamlit's default watcher ("auto": watchdog's inotify
observer) puts a recursive watch on the folder of every watched source file, the
repository root included, so it adds an inotify watch on every directory of the tree,
a ``.venv/`` too (``server.folderWatchBlacklist`` filters which modules are watched,
not which directories are walked). Its mask includes IN_OPEN and IN_CLOSE_NOWRITE,
so walking the tree queues two events per directory: past 8,192 directories the
kernel's queue (``fs.inotify.max_queued_events``, 16,384) overflows, watchdog drops
its watches and walks the tree again to re-add them, which overflows the queue again.
One core stays busy for as long as a browser tab is open (``.venv/dev`` from
``scripts/test.sh`` holds ~69,000 files; 9,000 empty directories are enough). A
served dashboard has nothing to reload, so it watches nothing.

Development. ``--dev`` (``bash scripts/dashboard.sh --dev``) serves with
``--server.fileWatcherType poll``: the app's own source files are polled for changes
every 0.2 s, so an edited page offers "Rerun" (or reruns, with
``--server.runOnSave true``), without walking the tree. An explicit
``--server.fileWatcherType auto`` gets Streamlit's own default back, inotify and all.

Why the pages must be declared. Streamlit keeps one process-wide flag,
``PagesManager.uses_pages_directory`` (``streamlit/runtime/pages_manager.py``). It is
None until the first browser session starts, which sets it to "a ``pages/`` folder
exists next to the main script"; only ``st.navigation`` sets it back to False. While
it is True, the script runner does not run app.py directly but ``_mpa_v1``
(``streamlit/runtime/scriptrunner/script_runner.py``): it registers one page per file
in ``pages/``, named after the file, and resolves the requested URL against those.
So the first script run after a server start resolves ``/head`` against
``head_explorer``, ``layer_view``, ...: no match, a "Page not found" message goes to
the browser (``send_page_not_found`` in ``streamlit/commands/navigation.py``), and
then app.py runs, whose ``st.navigation`` finds the right page and resets the flag
for every later session. The browser keeps the dialog over the right page.

No configuration option controls the flag, and app.py itself only runs inside that
first ``_mpa_v1`` run, after the dialog has been sent. Setting the flag here, before
the server starts, is what ``st.navigation`` does on its first call, done before the
first session instead of during it. The page files stay in ``pages/``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # headwatch/
# app.py: at the root of a clone, beside headwatch/; in an installed copy, headwatch/app/ (pyproject.toml ships the
# app, pages/ and .streamlit/ there as package data)
APP = next((p for p in (_PACKAGE.parent / "app.py", _PACKAGE / "app" / "app.py") if p.is_file()), _PACKAGE.parent / "app.py")
DEV_FLAG = "--dev"
WATCHER_OPTION = "--server.fileWatcherType"
WATCHER_ENV = "STREAMLIT_SERVER_FILE_WATCHER_TYPE"
WARM_UP_ENV = "HEADWATCH_WARM_UP"


def declare_navigation_pages() -> bool:
    """Tell Streamlit that this process's app uses ``st.navigation`` (no legacy ``pages/`` scan).

    Returns False, after a warning on stderr, when this Streamlit has no such flag (a
    later version may have dropped the legacy mode; the app still runs).
    """
    from streamlit.runtime.pages_manager import PagesManager

    if not hasattr(PagesManager, "uses_pages_directory"):
        print(
            "dashboard.serve: this Streamlit has no PagesManager.uses_pages_directory; serving as `streamlit run app.py` would",
            file=sys.stderr,
        )
        return False
    PagesManager.uses_pages_directory = False
    return True


def streamlit_options(args: list[str], *, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The options for ``streamlit run app.py``: ``args`` with a file watcher chosen.

    Args:
        args: this module's command line after the module name. ``--dev`` is taken out
            and stands for ``--server.fileWatcherType poll``; arguments after ``--`` are
            the script's and left alone.
        environ: the environment, where ``STREAMLIT_SERVER_FILE_WATCHER_TYPE`` is a choice too.

    Returns:
        ``args`` without ``--dev``, followed by ``--server.fileWatcherType poll`` (with
        ``--dev``) or ``none``, unless the caller chose a watcher: then ``args`` as given.
    """
    cut = args.index("--") if "--" in args else len(args)
    options, script_args = args[:cut], args[cut:]
    dev = DEV_FLAG in options
    options = [a for a in options if a != DEV_FLAG]
    chosen = WATCHER_ENV in environ or any(a == WATCHER_OPTION or a.startswith(WATCHER_OPTION + "=") for a in options)
    if not chosen:
        options += [WATCHER_OPTION, "poll" if dev else "none"]
    return options + script_args


def config_options(config: Path, args: list[str]) -> list[str]:
    """The scalar settings of the app's ``.streamlit/config.toml`` as options, those in ``args`` left out.

    Streamlit reads ``.streamlit/config.toml`` from the working directory only; served from an
    installed copy (or from another folder), the app's own settings (viewer toolbar, no usage
    statistics) come as options instead. List settings (the watch blacklist) matter only with
    a file watcher and are left out.
    """
    import tomllib

    if not config.is_file():
        return []
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    options: list[str] = []

    def walk(prefix: str, values: dict) -> None:  # nested tables ([theme.dark]) are dotted names (--theme.dark.x)
        for key, value in values.items():
            if isinstance(value, dict):
                walk(f"{prefix}{key}.", value)
            elif f"--{prefix}{key}" not in given and isinstance(value, (str, bool, int, float)):
                options.extend([f"--{prefix}{key}", str(value).lower() if isinstance(value, bool) else str(value)])

    walk("", tomllib.loads(config.read_text()))
    return options


# What a page's first run would otherwise import and load itself: pandas and pyarrow's parquet reader (through
# the loader), SciPy's linear algebra, the figure builders, the numba kernels of the random-head references, and
# scikit-learn (the Timeline's and the Trajectory map's head-type association and joint clusters; what each costs a
# fresh server's first run: docs/dashboard.md, Performance).
WARM_MODULES = (
    "headwatch.dashboard.loader",
    "headwatch.dashboard.viewstate",
    "headwatch.dashboard.widgets",
    "headwatch.dashboard.charts",
    "headwatch.dashboard.tables",
    "headwatch.dashboard.derived",
    "headwatch.analysis.findings.events",
    "headwatch.analysis.trajectories.type_association",
    "headwatch.analysis.findings.sizes",
    "headwatch.dashboard.views.head.figures.lines",
    "headwatch.dashboard.views.head.figures.density",
    "headwatch.dashboard.views.head.figures.spectrum",
    "headwatch.dashboard.views.layers.figures",
    "headwatch.dashboard.figures.timeline",
    "headwatch.analysis.rmt.references",
    "scipy.linalg",
)


def warm_up(wait_s: float = 60.0) -> None:
    """Import the modules every page needs and load the compiled numba kernels from their on-disk cache.

    A fresh server otherwise spends its first session's run on this (`docs/dashboard.md`, Performance); done once
    per process, every session after that finds it done.
    Nothing here reads a store or writes anything. It first waits up to ``wait_s`` seconds for Streamlit's
    runtime: the pages' ``st.cache_data`` functions, decorated at import, look for it then (and warn without it).
    """
    import importlib
    import time

    from streamlit import runtime

    deadline = time.monotonic() + wait_s
    while not runtime.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for name in WARM_MODULES:
        importlib.import_module(name)
    from headwatch.analysis.rmt.references import gaussian_references

    gaussian_references(16, 4, None)  # the kernels' float32 signatures, loaded (or compiled once) by numba
    freeze_imported()


def freeze_imported() -> None:
    """Move every object alive now (the imported modules: Streamlit, plotly, pandas, numba, the pages' own) out of
    the garbage collector's reach (`gc.freeze`).

    Streamlit collects garbage after every script run (``runner.postScriptGC``, ``gc.collect(2)``), and a full
    collection walks every tracked object, under the GIL, at the moment the browser starts drawing the page's
    charts. Modules are never unloaded, so nothing frozen here would ever have been freed; objects made later (the
    stores, the cached figures, a session's widgets) are still collected, and a collection after a run walks only
    them. What it saves: `docs/dashboard.md`, Performance.
    """
    import gc

    gc.collect()  # what is garbage already goes now, not into the frozen generation
    gc.freeze()


def ready_after(done: threading.Event) -> None:
    """Make the server's health check (``/_stcore/health``) answer 503 "warming up" until ``done`` is set.

    Streamlit's page pings that endpoint before it opens its WebSocket (and retries while it fails), and so do
    load balancers and a Space's startup probe, so no session starts while `warm_up` still imports: a first visitor's
    run would otherwise share the interpreter with the warm-up (its imports and its run interleaved under the GIL,
    both slower) and wait for modules its page does not need. The visitor waits for the warm-up instead, then gets a
    run with everything imported. Wraps ``Runtime.is_ready_for_browser_connection``, the one thing the endpoint asks.
    """
    from streamlit.runtime.runtime import Runtime

    original = Runtime.is_ready_for_browser_connection

    async def ready(self: Runtime) -> tuple[bool, str]:
        ok, message = await original.fget(self)  # type: ignore[attr-defined]  # mypy sees the property's value, not the property
        if ok and not done.is_set():
            return False, "warming up: importing the pages' modules (dashboard.serve.warm_up)"
        return ok, message

    Runtime.is_ready_for_browser_connection = property(ready)  # type: ignore[method-assign,assignment]  # a property replaced


WARMED = "headwatch: the pages' modules imported in"  # the warm-up's line on stderr, before the server says it is ready


def _warm_up_then(done: threading.Event) -> None:
    import time

    t = time.perf_counter()
    try:
        warm_up()
        print(f"{WARMED} {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    finally:  # a failed import must not keep the server from answering: the page's own run reports it
        done.set()


def main(argv: list[str] | None = None) -> None:
    """``streamlit run app.py`` with ``argv`` (default: this process's arguments) as its options, the page
    modules imported first (`warm_up`, in a background thread once Streamlit's runtime exists; the health check
    says the server is ready only after it, `ready_after`; not with ``HEADWATCH_WARM_UP=0``)."""
    from streamlit.web import cli

    if os.environ.get(WARM_UP_ENV, "1") != "0":
        done = threading.Event()
        ready_after(done)
        threading.Thread(target=_warm_up_then, args=(done,), name="headwatch-warm-up", daemon=True).start()
    declare_navigation_pages()
    args = streamlit_options(list(sys.argv[1:] if argv is None else argv))
    cut = args.index("--") if "--" in args else len(args)
    args = args[:cut] + config_options(APP.parent / ".streamlit" / "config.toml", args[:cut]) + args[cut:]
    cli.main(args=["run", str(APP), *args], prog_name="streamlit")


if __name__ == "__main__":
    main()
