"""Links from inside a Hugging Face Space ($SPACE_ID): the share link is the Space page's URL with the view, the
app posts its view to the Space page, and ``?page=...`` on the root URL opens that page; off a Space, none of it."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from headwatch.dashboard.space import parent_sync_script, space_url
from tests.app.conftest import open_page, view_link

HEAD = "pages/head_explorer.py"
SPACE = "owner/headwatch-demo"


def link(at) -> str:
    return view_link(at)


def posted(at) -> list[dict]:
    """The messages the injected scripts post: (target window expression, message, target origin)."""
    out = []
    for el in at.get("iframe"):
        for target, message, origin in re.findall(r"([\w.|() ]+)\.postMessage\((\{.*?\}), (\"[^\"]*\")\)", el.proto.srcdoc):
            out.append({"target": target, "message": json.loads(message), "origin": json.loads(origin)})
    return out


@pytest.fixture()
def on_space(app_env, monkeypatch):
    monkeypatch.setenv("SPACE_ID", SPACE)
    return app_env


def test_share_link_on_a_space_is_the_space_page_with_the_view(on_space):
    at = open_page(HEAD, {"layer": "2", "head": "1"})
    url = urlsplit(link(at))
    assert (url.scheme, url.netloc, url.path) == ("https", "huggingface.co", f"/spaces/{SPACE}")
    query = parse_qs(url.query)
    assert query["page"] == ["head"] and query["layer"] == ["2"] and query["head"] == ["1"]
    assert query["run"] == [on_space.name]
    assert query["step"] == at.query_params["step"]  # every parameter the app writes to its own URL


def test_the_view_is_posted_to_the_space_page_after_every_rerun(on_space):
    at = open_page(HEAD, {"layer": "2"})
    [msg] = posted(at)
    assert msg["origin"] == "https://huggingface.co" and "parent.parent" in msg["target"]
    assert set(msg["message"]) == {"queryString", "hash"}
    assert msg["message"]["queryString"] == "?" + urlsplit(link(at)).query
    at.selectbox(key="layer").set_value(3).run()
    [msg] = posted(at)
    assert parse_qs(msg["message"]["queryString"][1:])["layer"] == ["3"]


def test_page_parameter_on_the_root_url_opens_that_page(on_space):
    at = open_page(None, {"page": "head", "layer": "1", "head": "2"})
    assert at.selectbox(key="layer").value == 1 and at.selectbox(key="head").value == 2
    assert any(el.proto.id.endswith("-density_map") for el in at.get("plotly_chart"))  # the head explorer's chart
    assert "page" not in at.query_params and at.query_params["layer"] == "1"  # page= is consumed
    assert parse_qs(urlsplit(link(at)).query)["page"] == ["head"]


def test_unknown_page_parameter_stays_on_the_overview_with_a_notice(on_space):
    at = open_page(None, {"page": "nope"})
    assert any("`page=nope`" in w.value for w in at.warning)
    assert "page" not in parse_qs(urlsplit(link(at)).query)


def test_off_a_space_nothing_is_posted_and_the_link_is_the_apps_own(app_env, monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    at = open_page(HEAD, {"layer": "2"})
    assert not posted(at) and not at.get("iframe")
    assert "huggingface.co" not in link(at) and "layer=2" in link(at) and "page=" not in link(at)


def test_space_url_and_script_builders():
    assert space_url("o/n", "", "") == "https://huggingface.co/spaces/o/n"
    assert space_url("o/n", "", "layer=1") == "https://huggingface.co/spaces/o/n?layer=1"
    assert space_url("o/n", "head", "layer=1") == "https://huggingface.co/spaces/o/n?page=head&layer=1"
    script = parent_sync_script("?a=</script><script>alert(1)")
    assert "</script><script>" not in script.split("<script>", 1)[1].rsplit("</script>", 1)[0]
