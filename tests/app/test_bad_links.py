"""Bad links open the page they name, with a notice, never a traceback (issue 25).

Through AppTest on the test store (4 layers x 4 heads): a link that overlays seven heads
in the head explorer (one more than the widget allows) keeps the first six and says which
it dropped (it raised ``StreamlitSelectionCountExceedsMaxError``); a notice about an
8,000-character bad value quotes a short cut of it, not the whole value. The unknown page
path (a browser matter: the path never reaches AppTest) is tested in
tests/app/test_browser_bad_links.py.
"""

from __future__ import annotations

from headwatch.dashboard.urlstate import parse_many, parse_one
from tests.app.conftest import notices, open_page

HEAD = "pages/head_explorer.py"
SEVEN = ["L0H1", "L0H2", "L0H3", "L1H0", "L1H1", "L1H2", "L1H3"]


def test_seven_overlaid_heads_keep_the_first_six_with_a_notice(app_env):
    at = open_page(HEAD, {"layer": "0", "head": "0", "cmp": SEVEN})  # open_page asserts there is no exception
    assert at.session_state["cmp"] == SEVEN[:6]
    text = " ".join(notices(at))
    assert "cmp=L1H3" in text and "6" in text, text
    assert at.query_params["cmp"] == SEVEN[:6]  # the URL is repaired
    assert any(el.proto.id.endswith("-density_slices") for el in at.get("plotly_chart"))  # the charts are drawn


def test_more_chosen_steps_than_allowed_keep_the_first_ones_with_a_notice(app_env):
    from headwatch.analysis.store import open_store

    steps = [str(int(s)) for s in open_store(app_env).steps][:10]
    at = open_page(HEAD, {"step": steps})
    assert [str(s) for s in at.session_state["step"]] == steps[:8]
    assert any(f"step={steps[8]}" in n for n in notices(at)), notices(at)


def test_a_notice_about_a_very_long_value_cuts_it(app_env):
    long = "x" * 8000
    at = open_page(HEAD, {"stat": long, "step": long, "panel": "statistic"})  # the statistic is drawn in its tab
    text = notices(at)
    assert text and all(len(n) < 1000 for n in text), [len(n) for n in text]
    assert any("stat=xxxx" in n for n in text) and any("step=xxxx" in n for n in text)
    assert any("8,000 characters" in n for n in text), text


def test_parse_quotes_a_short_cut_of_a_long_value():
    from headwatch.dashboard.urlstate import MAX_QUOTED

    one = parse_one("stat", ["y" * 5000], ["std"], "std").notice
    many = parse_many("step", ["z" * 5000, "0"], [0, 1], [0]).notice
    for notice in (one, many):
        assert notice is not None and len(notice) < MAX_QUOTED + 300
        assert "5,000 characters" in notice
    assert "`stat=short` is not valid" in parse_one("stat", ["short"], ["std"], "std").notice  # short values whole


def test_unknown_page_names_the_path_and_the_pages():
    from headwatch.dashboard.sharing import unknown_page

    paths = ["", "heads", "head"]
    assert unknown_page("http://h:1/", base_path="", url_paths=paths) is None
    assert unknown_page("http://h:1/head", base_path="", url_paths=paths) is None
    assert unknown_page("http://h:1/app/head", base_path="app", url_paths=paths) is None
    assert unknown_page("http://h:1/app", base_path="/app/", url_paths=paths) is None
    notice = unknown_page("http://h:1/app/nope", base_path="app", url_paths=paths)
    assert "`/nope` does not exist" in notice and "/heads, /head" in notice
    assert "`/a b`" in unknown_page("http://h:1/a%20b", base_path="", url_paths=paths)
