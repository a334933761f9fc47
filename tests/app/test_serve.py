"""headwatch.dashboard.serve's command line: the file watcher is off unless the caller chooses one; ``--dev`` polls."""

from __future__ import annotations

from headwatch.dashboard.serve import streamlit_options

NONE = ["--server.fileWatcherType", "none"]


def test_no_watcher_unless_chosen() -> None:
    assert streamlit_options([], environ={}) == NONE
    assert streamlit_options(["--server.port", "8501"], environ={}) == ["--server.port", "8501", *NONE]


def test_dev_polls_the_app_files() -> None:
    assert streamlit_options(["--dev", "--server.port=1"], environ={}) == ["--server.port=1", "--server.fileWatcherType", "poll"]


def test_a_watcher_the_caller_chooses_is_passed_on_as_given() -> None:
    for args in (["--server.fileWatcherType", "auto"], ["--server.fileWatcherType=watchdog"]):
        assert streamlit_options(args, environ={}) == args
        assert streamlit_options(["--dev", *args], environ={}) == args  # the explicit choice wins over --dev
    assert streamlit_options([], environ={"STREAMLIT_SERVER_FILE_WATCHER_TYPE": "auto"}) == []


def test_the_scripts_own_arguments_are_left_alone() -> None:
    assert streamlit_options(["--", "--dev", "--server.fileWatcherType=auto"], environ={}) == [
        *NONE,
        "--",
        "--dev",
        "--server.fileWatcherType=auto",
    ]


def test_the_apps_config_comes_as_options_unless_given(tmp_path):
    """Streamlit reads .streamlit/config.toml only from the working directory: served from an
    installed copy, the app's scalar settings are passed as options; the caller's win."""
    from headwatch.dashboard.serve import config_options

    config = tmp_path / "config.toml"
    config.write_text(
        '[server]\nfolderWatchBlacklist = [".venv"]\nheadless = true\n'
        '[client]\ntoolbarMode = "viewer"\n[browser]\ngatherUsageStats = false\n'
        '[theme.dark]\ncodeFont = "ui-monospace, monospace"\n'
    )
    assert config_options(config, ["--browser.gatherUsageStats=true"]) == [
        "--server.headless",
        "true",
        "--client.toolbarMode",
        "viewer",
        "--theme.dark.codeFont",
        "ui-monospace, monospace",
    ]
    assert config_options(tmp_path / "missing.toml", []) == []


def test_the_app_is_found_in_a_clone_or_an_installed_copy():
    from headwatch.dashboard.serve import APP

    assert APP.is_file() and APP.name == "app.py" and (APP.parent / "pages").is_dir()
