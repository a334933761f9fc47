"""The order begin -> page -> publish is enforced: widgets and the frame work only inside app.py's view."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.app.conftest import ROOT, TIMEOUT


def test_a_page_run_on_its_own_says_it_needs_the_app(app_env):
    at = AppTest.from_file(str(ROOT / "pages" / "layer_view.py"), default_timeout=TIMEOUT).run()
    [error] = at.exception
    assert error.proto.type == "RuntimeError"
    assert "viewstate.frame needs an active view" in error.value and "view_state" in error.value


def test_a_widget_after_the_view_is_published_raises():
    def script():
        from types import SimpleNamespace

        import streamlit as st

        from headwatch.dashboard import viewstate, widgets
        from headwatch.dashboard.settings import AppSettings

        with viewstate.view_state(AppSettings()) as view:
            view.open(SimpleNamespace(url_path="", title="Only page"), [])
            st.session_state["inside"] = widgets.select("layer", "Layer", [0, 1], 1)
        widgets.toggle("logy", "log y axis")

    at = AppTest.from_function(script, default_timeout=TIMEOUT).run()
    assert at.session_state["inside"] == 1 and at.query_params["layer"] == "1"  # published on leaving the block
    [error] = at.exception
    assert "widgets.toggle needs an active view" in error.value


def test_a_view_that_never_learns_its_page_is_not_published():
    def script():
        from headwatch.dashboard import viewstate, widgets
        from headwatch.dashboard.settings import AppSettings

        with viewstate.view_state(AppSettings()):
            widgets.select("layer", "Layer", [0, 1], 1)

    at = AppTest.from_function(script, default_timeout=TIMEOUT).run()
    [error] = at.exception
    assert "view.open(page, pages)" in error.value
    assert "layer" not in at.query_params
