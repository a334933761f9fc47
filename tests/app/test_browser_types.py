"""Head types in a real browser (Chromium through Playwright, the app served as the Dockerfile serves it) on the
two shipped runs: the Heads table's type filter narrows its rows to the heads holding the type, the Forward lenses
heatmaps carry markers on a known previous-token head, and Compare runs draws the heads per type for both runs.
The expected values are read from the stores' own head-type tables here. Without the tables the views say how
to add them (AppTest, on a copy of the shipped run without them)."""

from __future__ import annotations

import io
import json
import shutil

import pandas as pd
import pytest

from headwatch.analysis.store.lenses.types import HEAD_EMERGENCE, HEAD_TYPES, HEAD_TYPES_TABLE
from tests.app import test_browser
from tests.app.conftest import ROOT, open_page, serve_only
from tests.app.test_browser import ARTIFACTS, _dialogs, _errors, _open, _serve

browser = test_browser.browser  # the module-scoped Chromium fixture

SHIPPED = ROOT / "data" / "shakespeare-pythia-6x8"
SEED2 = ROOT / "data" / "shakespeare-pythia-6x8-seed2"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    data = tmp_path_factory.mktemp("types-browser")
    shutil.copytree(SEED2, data / SEED2.name)
    yield from _serve(SHIPPED, tmp_path_factory, data_dir=data)


def _traces(page, key: str) -> list[dict]:
    return page.evaluate(
        """key => {
        const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
        return gd._fullData.map(t => ({name: t.name, meta: t.meta || null, text: t.text || null, n: (t.x || []).length}));
    }""",
        key,
    )


@pytest.mark.browser
def test_the_type_filter_narrows_the_heads_table(browser, two_runs) -> None:
    types = pd.read_parquet(SHIPPED / HEAD_TYPES_TABLE.file)
    last = types[types["step"] == types["step"].max()]
    held = last[(last["type"] == "previous_token") & last["holds"]]
    assert 0 < len(held) < 48

    names: dict[str, str] = {}

    def download(url: str) -> pd.DataFrame:
        page = _open(browser, two_runs + url, 0)
        try:
            assert _errors(page) == [] and _dialogs(page) == []
            with page.expect_download(timeout=60_000) as info:
                page.locator(".st-key-heads_table_csv button").first.click()
            if "types=" in url:
                page.screenshot(path=str(ARTIFACTS / "heads-types.png"), full_page=True)
            names[url] = info.value.suggested_filename
            return pd.read_csv(io.BytesIO(info.value.path().read_bytes()))
        finally:
            page.close()

    every = download("/heads?stat=prev_token")
    assert len(every) == 48 and {"type", "emerged at step", "prev", "÷ uniform"} <= set(every.columns)
    assert not {"value", "over reference", "k"} & set(every.columns)  # no raw names, no empty k for a score
    narrowed = download("/heads?stat=prev_token&types=previous_token&sort=emerged")
    assert "previous_token" in names["/heads?stat=prev_token&types=previous_token&sort=emerged"]  # the filter, named
    assert len(narrowed) == len(held)
    assert set(zip(narrowed["layer"], narrowed["head"], strict=True)) == set(zip(held["layer"], held["head"], strict=True))
    assert narrowed["type"].str.contains("previous_token").all()
    emergence = pd.read_parquet(SHIPPED / HEAD_EMERGENCE.file)
    prev = emergence[emergence["type"] == "previous_token"].set_index(["layer", "head"])["emergence_step"]
    emerged = narrowed["emerged at step"]
    assert emerged.tolist() == sorted(emerged.tolist())  # sorted by emergence step
    for layer, head, step in zip(narrowed["layer"], narrowed["head"], emerged, strict=True):
        assert step == prev.loc[(layer, head)]


@pytest.mark.browser
def test_forward_heatmaps_mark_a_known_previous_token_head(browser, two_runs) -> None:
    emergence = pd.read_parquet(SHIPPED / HEAD_EMERGENCE.file)
    known = emergence[(emergence["layer"] == 2) & (emergence["head"] == 3) & (emergence["type"] == "previous_token")]
    step = int(known["emergence_step"].iloc[0])
    page = _open(browser, two_runs + "/lenses?panel=types", 5)  # the head-type tab
    try:
        page.screenshot(path=str(ARTIFACTS / "lenses-types.png"), full_page=True)
        assert _errors(page) == [] and _dialogs(page) == []
        for key in ("type_prev_token", "type_induction", "type_sink"):
            traces = _traces(page, key)
            became = [t for t in traces if t["meta"] == {"kind": "emergence", "type": "previous_token"}]
            assert len(became) == 1 and f"L2 H3 became previous_token at step {step:,}" in became[0]["text"], key
            assert became[0]["n"] == int(emergence[emergence["type"] == "previous_token"]["emergence_step"].notna().sum())
            induction = [t for t in traces if t["meta"] == {"kind": "type", "type": "induction"}]
            assert induction and induction[0]["n"] == 0  # no head holds the induction type on this run
        legend = page.locator(".st-key-type_prev_token .legendtext").all_text_contents()
        assert "previous_token: held" in legend and "previous_token: became one" in legend
    finally:
        page.close()


@pytest.mark.browser
def test_compare_runs_counts_heads_per_type_for_each_run(browser, two_runs) -> None:
    page = _open(browser, two_runs + f"/compare?runs={SHIPPED.name}&runs={SEED2.name}&stat=prev_token&align=step", 4)
    try:
        page.screenshot(path=str(ARTIFACTS / "compare-types.png"), full_page=True)
        assert _errors(page) == [] and _dialogs(page) == []
        traces = page.evaluate(
            """() => {
            const gd = document.querySelector('.st-key-compare_types .js-plotly-plot');
            return gd._fullData.filter(t => t.meta && t.meta.kind === 'type_count').map(t => [t.meta.run, t.meta.type, t.y]);
        }"""
        )
        decided = {r.name: set(pd.read_parquet(r / HEAD_TYPES_TABLE.file)["type"]) for r in (SHIPPED, SEED2)}
        # a line per type each run decides (all six on the stores rebuilt 2026-11-29)
        assert {(r, t) for r, t, _ in traces} == {(r, t) for r, kinds in decided.items() for t in HEAD_TYPES if t in kinds}
        for run, name, y in traces:
            types = pd.read_parquet(ROOT / "data" / run / HEAD_TYPES_TABLE.file)
            want = types[types["type"] == name].groupby("step")["holds"].sum().tolist()
            # multigram and other are decided at the checkpoints with tokens in context alone: no point elsewhere
            assert [int(v) for v in y if v is not None] == want, (run, name)
        # the legend is a key: each run once (its colour) and each type once (its dash), not a line per run and type
        legend = page.locator(".st-key-compare_types .legendtext").all_text_contents()
        shown = [t for t in HEAD_TYPES if any(t in kinds for kinds in decided.values())]
        assert sorted(legend) == sorted([SHIPPED.name, SEED2.name, *shown]), legend
    finally:
        page.close()


def test_views_of_a_store_without_head_types_say_how_to_add_them(tmp_path, monkeypatch) -> None:
    store = tmp_path / "untyped"
    shutil.copytree(SHIPPED, store)
    for spec in (HEAD_TYPES_TABLE, HEAD_EMERGENCE):
        (store / spec.file).unlink()
    meta = json.loads((store / "meta.json").read_text())
    meta.pop("types")
    (store / "meta.json").write_text(json.dumps(meta))
    serve_only(store, tmp_path, monkeypatch)
    command = f"python -m headwatch.precompute.lenses.types {store}"
    at = open_page("pages/heads_table.py", {"stat": "prev_token"})
    assert any(command in c.value for c in at.caption)
    table = next(d.value for d in at.dataframe if d.proto.id.endswith("-heads_table"))
    assert "type" not in table.columns and len(table) == 48
    at = open_page("pages/forward_lenses.py", {"panel": "types"})  # the head types' tab
    assert any(command in i.value for i in at.info)
