"""Serve the dashboard: ``python -m dashboard.serve [options of streamlit run]``.

The same as ``streamlit run app.py [options]``, except that Streamlit is told, before
the server starts, that the app declares its pages with ``st.navigation`` and does not
use the legacy ``pages/`` directory.

Why this is needed. Streamlit keeps one process-wide flag,
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

import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app.py"


def declare_navigation_pages() -> bool:
    """Tell Streamlit that this process's app uses ``st.navigation`` (no legacy ``pages/`` scan).

    Returns False, after a warning on stderr, when this Streamlit has no such flag (a
    later version may have dropped the legacy mode; the app still runs).
    """
    from streamlit.runtime.pages_manager import PagesManager

    if not hasattr(PagesManager, "uses_pages_directory"):
        print("dashboard.serve: this Streamlit has no PagesManager.uses_pages_directory; serving as "
              "`streamlit run app.py` would", file=sys.stderr)
        return False
    PagesManager.uses_pages_directory = False
    return True


def main(argv: list[str] | None = None) -> None:
    """``streamlit run app.py`` with ``argv`` (default: this process's arguments) as its options."""
    from streamlit.web import cli

    declare_navigation_pages()
    args = list(sys.argv[1:] if argv is None else argv)
    cli.main(args=["run", str(APP), *args], prog_name="streamlit")


if __name__ == "__main__":
    main()
