"""The head explorer's "What this head does" tab in Chromium, on a planted copy of induction-d128
(`tests.app.planted_ablation`): the step picker of the tokens in context writes its step into the address bar, a
shared link opens on that step, and the CSV button downloads exactly the contexts the store holds."""

from __future__ import annotations

import io
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from playwright.sync_api import expect

from headwatch.analysis.store import open_store
from tests.app.conftest import ROOT
from tests.app.planted_ablation import PROBE_HEAD, add_planted_ablation
from tests.app.planted_ablation import context_steps as planted_context_steps
from tests.app.test_browser import LOAD_TIMEOUT_MS, _errors, _link, _serve, _wait_published, _wait_url

pytestmark = pytest.mark.browser

CONTEXTS = "table.head-contexts"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    path = tmp_path_factory.mktemp("does-browser") / "induction-d128"
    shutil.copytree(ROOT / "data" / "induction-d128", path)
    return add_planted_ablation(path)


@pytest.fixture(scope="module")
def server(planted, tmp_path_factory):
    yield from _serve(planted, tmp_path_factory)


def _ready(page) -> None:
    page.wait_for_selector(CONTEXTS, timeout=LOAD_TIMEOUT_MS)
    _wait_published(page)


def test_the_step_picker_is_in_the_link_a_shared_link_restores_it_and_the_csv_is_the_stores(chromium, server, planted) -> None:
    store = open_store(planted)
    first, last = planted_context_steps([int(s) for s in store.steps])
    layer, head = PROBE_HEAD
    page = chromium.new_page(viewport={"width": 1500, "height": 1900}, accept_downloads=True)
    shared = None
    try:
        page.goto(f"{server}/head?layer={layer}&head={head}&panel=does")
        _ready(page)
        _wait_url(page, f"ctxstep={last}")  # the last step kept, by default, in the address bar
        page.get_by_role("combobox", name="Step of the tokens in context").click()
        page.get_by_role("option", name=re.compile(rf"^{first:,}\b")).click()
        _wait_url(page, f"ctxstep={first}")
        _wait_published(page)
        assert f"ctxstep={first}" in _link(page)
        expect(page.locator(".st-key-head_does")).to_contain_text(f"ablated at step {first:,}", timeout=LOAD_TIMEOUT_MS)

        with page.expect_download(timeout=LOAD_TIMEOUT_MS) as info:
            page.locator(".st-key-head_contexts_csv button").first.click()
        got = pd.read_csv(io.BytesIO(info.value.path().read_bytes()))
        assert info.value.suggested_filename.endswith(f"contexts_step_{first}.csv")
        shared = _link(page)
        assert _errors(page) == []
    finally:
        page.close()

    want = pd.read_parquet(planted / "head_contexts.parquet")
    want = want[(want["step"] == first) & (want["layer"] == layer) & (want["head"] == head)].sort_values("rank")
    assert list(got["rank"]) == list(want["rank"]) and len(got) == 20
    np.testing.assert_array_equal(got["loss_increase"].to_numpy(), want["loss_increase"].to_numpy())
    assert list(got["target"]) == list(want["target"])
    assert list(got["window"]) == ["".join(t[:-1]) + f"[{t[-1]}]" for t in want["tokens"]]
    assert list(got["attention"]) == [";".join(f"{float(a):.6g}" for a in att) for att in want["attention"]]
    assert set(got["step"]) == {first} and set(got["layer"]) == {layer} and set(got["head"]) == {head}

    # the shared link, in a fresh tab: the same step picked, its contexts drawn
    other = chromium.new_page(viewport={"width": 1500, "height": 1900})
    try:
        other.goto(shared)
        _ready(other)
        _wait_url(other, f"ctxstep={first}")
        picker = other.get_by_role("combobox", name="Step of the tokens in context")
        expect(picker).to_have_value(re.compile(rf"^{first:,}\b"), timeout=LOAD_TIMEOUT_MS)
        expect(other.locator(".st-key-head_does")).to_contain_text(f"ablated at step {first:,}", timeout=LOAD_TIMEOUT_MS)
        assert other.locator(f"{CONTEXTS} tbody tr").count() == 20
        assert _errors(other) == []
    finally:
        other.close()
