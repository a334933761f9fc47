"""The Timeline's essential-dynamics chart (dashboard/figures/essential.py): through AppTest, one marker trace per
stage of the run and the cusps marked; in Chromium, the hover over a checkpoint names its step and a click opens the
Forward lenses page on its losses tab at that step (marked). The store is a shipped one given synthetic outputs with a
known cusp."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pyarrow as pa
import pytest

from headwatch.analysis.store import open_store
from headwatch.analysis.store.format import ESSENTIAL, ESSENTIAL_OUTPUTS
from headwatch.precompute.lenses.essential import output_rows, trajectory_rows
from headwatch.precompute.store.writer import commit_store
from tests.app.conftest import SHIPPED, chart, open_page, serve_only
from tests.app.test_browser import (
    ARTIFACTS,
    LOAD_TIMEOUT_MS,
    _errors,
    _open,
    _serve,
    _wait_laid_out,
)
from tests.app.test_timeline import shaded_stages

CUSP = 20  # the checkpoint (index) where the synthetic outputs turn back


@pytest.fixture(scope="module")
def essential_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped plain-text store with outputs that move along one direction to checkpoint `CUSP`, then back
    along another."""
    path = tmp_path_factory.mktemp("essential") / SHIPPED.name
    shutil.copytree(SHIPPED, path)
    store = open_store(path)
    steps = store.steps
    t = np.arange(len(steps), dtype=np.float64)[:, None]
    a, b = np.random.default_rng(0).normal(size=(2, 64))
    outputs = np.where(t <= CUSP, t * a, CUSP * a + (t - CUSP) * (0.4 * b - 0.9 * a)) - 5.0
    rows, explained, cusps = trajectory_rows(steps, outputs)
    outs = pa.concat_tables([output_rows(int(s), o)[ESSENTIAL_OUTPUTS.name] for s, o in zip(steps, outputs, strict=True)])
    record = {
        "values_per_checkpoint": 64,
        "turn_degrees": 90.0,
        "explained": explained.tolist(),
        "cusps": [int(c) for c in cusps],
    }
    commit_store(path, store.meta.with_record("essential", record), {ESSENTIAL_OUTPUTS.name: outs, ESSENTIAL.name: rows})
    assert [int(c) for c in cusps] == [int(steps[CUSP])]
    return path


def test_the_chart_has_one_trace_per_stage_and_the_cusp(essential_store: Path, tmp_path: Path, monkeypatch) -> None:
    serve_only(essential_store, tmp_path, monkeypatch)
    at = open_page("pages/run_timeline.py")
    assert not at.exception and not at.error
    fig = chart(at, "essential")
    stages = shaded_stages(essential_store)
    markers = [t for t in fig["data"] if t.get("mode") == "markers" and not t.get("name", "").startswith("cusp")]
    assert [t["name"].split(":")[0] for t in markers] == [f"S{s + 1}" for s in stages["stage"]]
    steps = [c[2] for t in markers for c in t["customdata"]]
    assert steps == [int(s) for s in open_store(essential_store).steps]
    cusp = next(t for t in fig["data"] if t.get("name", "").startswith("cusp"))
    assert [c[2] for c in cusp["customdata"]] == [int(open_store(essential_store).steps[CUSP])]
    assert "step %{customdata[2]:,}" in markers[0]["hovertemplate"]
    assert any("open circles are cusps" in c.value for c in at.caption)


def test_a_store_without_the_lens_says_how_to_add_it(tmp_path: Path, monkeypatch) -> None:
    """A store made before the lens (every shipped one carries it: a copy with its tables and record taken out)."""
    import json

    bare = tmp_path / "bare" / SHIPPED.name
    shutil.copytree(SHIPPED, bare)
    for table in (ESSENTIAL, ESSENTIAL_OUTPUTS):
        (bare / f"{table.name}.parquet").unlink()
    meta = json.loads((bare / "meta.json").read_text())
    del meta["essential"]
    (bare / "meta.json").write_text(json.dumps(meta))
    assert not open_store(bare).has(ESSENTIAL)
    serve_only(bare, tmp_path, monkeypatch)
    at = open_page("pages/run_timeline.py")
    assert not at.exception
    assert any("--lenses essential" in i.value for i in at.info)


@pytest.mark.browser
def test_hover_names_the_step_and_a_click_opens_it(essential_store: Path, tmp_path_factory, chromium) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    server = _serve(essential_store, tmp_path_factory)
    url = next(server)
    try:
        page = _open(chromium, f"{url}/timeline", plots=2)
        try:
            page.wait_for_selector(".st-key-essential .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
            page.locator(".st-key-essential").scroll_into_view_if_needed()
            _wait_laid_out(page, ["essential"])  # the panels above it done moving it down
            # the checkpoint whose point lies farthest from every other (the nearest point answers a hover)
            find = """() => {
                const gd = document.querySelector('.st-key-essential .js-plotly-plot');
                const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
                const pts = [];
                gd._fullData.forEach(t => { if (t.mode === 'markers' && !t.name.startsWith('cusp'))
                    t.x.forEach((x, i) => pts.push({px: xa.l2p(x), py: ya.l2p(t.y[i]), step: t.customdata[i][2]})); });
                let best = {gap: -1};
                for (const p of pts) {
                    const gap = Math.min(...pts.filter(q => q !== p).map(q => Math.hypot(q.px - p.px, q.py - p.py)));
                    const xy = [box.left + xa._offset + p.px, box.top + ya._offset + p.py];
                    if (gap > best.gap) best = {gap, step: p.step, xy};
                }
                return best;
            }"""
            found = page.evaluate(find)
            assert found["gap"] > 8, found
            page.mouse.move(*found["xy"])
            page.wait_for_selector(".st-key-essential .hoverlayer .hovertext", timeout=LOAD_TIMEOUT_MS)
            hover = page.locator(".st-key-essential .hoverlayer .hovertext").first.text_content() or ""
            assert f"step {found['step']:,}" in hover, (hover, found)
            page.screenshot(path=str(ARTIFACTS / "timeline_essential.png"), full_page=True)
            page.locator(".st-key-essential").scroll_into_view_if_needed()
            _wait_laid_out(page, ["essential"])
            again = page.evaluate(find)  # where the point is now: a late panel above can move the chart
            assert again["step"] == found["step"], (again, found)
            page.mouse.click(*again["xy"])
            page.wait_for_function("() => location.pathname.endsWith('/lenses')", timeout=LOAD_TIMEOUT_MS)
            page.wait_for_function("() => /[?&]panel=losses/.test(location.search)", timeout=LOAD_TIMEOUT_MS)
            query = parse_qs(urlsplit(page.url).query)
            assert query["step"] == [str(found["step"])] and query["panel"] == ["losses"], page.url  # the step marked
            page.wait_for_selector(".st-key-probe_loss .js-plotly-plot .main-svg", timeout=LOAD_TIMEOUT_MS)
            assert _errors(page) == []
        finally:
            page.close()
    finally:
        next(server, None)
