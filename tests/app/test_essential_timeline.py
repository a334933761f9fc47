"""The Timeline's essential-dynamics chart (dashboard/figures/essential.py): through AppTest, one marker trace per
stage of the run and the cusps marked; in Chromium, the hover over a checkpoint names its step and a click opens the
Forward lenses page on its losses tab at that step (marked). The store is a shipped one given synthetic outputs with a
known cusp."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.essential import ESSENTIAL, ESSENTIAL_OUTPUTS
from headwatch.precompute.lenses.essential import output_rows, trajectory_rows
from headwatch.precompute.store.writer import commit_store
from tests.app.conftest import INDUCTION, ROOT, SHIPPED, chart, open_page, serve_only
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


# --- issue 63: the path's direction, its steps, its first and last stage, what a turn and the docs' measure say ------


def _most_stages() -> Path:
    """The shipped run with the most shaded stages (induction-d128-seed2's 12 on the GPU-built stores): more than the
    palette's ten colours, checked in the test."""
    runs = [p for p in sorted((ROOT / "data").iterdir()) if (p / "meta.json").is_file()]
    return max(runs, key=lambda p: len(shaded_stages(p)))


def _path_from_files(store_path: Path) -> pd.DataFrame:
    """(step, pc1, pc2) of essential.parquet, read with pandas, in step order."""
    frame = pd.read_parquet(store_path / "essential.parquet")
    wide = frame.pivot(index="step", columns="component", values="score").sort_index()
    return pd.DataFrame({"step": wide.index.to_numpy(), "pc1": wide[0].to_numpy(), "pc2": wide[1].to_numpy()})


def test_the_path_shows_its_direction_its_steps_and_a_last_stage_unlike_the_first(tmp_path: Path, monkeypatch) -> None:
    """A shipped run with more than 10 stages (the one with the most): the palette of ten gave S1 and S11 one blue, and
    the path had no direction or step to read. Each arrow lies on one segment of the path (essential.parquet) and
    points from its earlier checkpoint to its later one; the first and last checkpoints are labelled start and end
    with their steps."""
    many_stages = _most_stages()
    serve_only(many_stages, tmp_path, monkeypatch)
    at = open_page("pages/run_timeline.py")
    assert not at.exception
    fig = chart(at, "essential")
    path = _path_from_files(many_stages)
    x, y, steps = path["pc1"].to_numpy(), path["pc2"].to_numpy(), path["step"].to_numpy()
    notes = fig["layout"].get("annotations") or []
    arrows = [a for a in notes if a.get("showarrow") and a.get("axref") == "x"]
    assert len(arrows) >= 4, notes
    for a in arrows:  # (ax, ay) is a checkpoint j; (x, y) lies on the segment to j + 1, at least halfway, forward
        j = int(np.flatnonzero(np.isclose(x, a["ax"]) & np.isclose(y, a["ay"]))[0])
        assert j + 1 < len(x)
        seg, got = np.array([x[j + 1] - x[j], y[j + 1] - y[j]]), np.array([a["x"] - x[j], a["y"] - y[j]])
        f = float(got @ seg / (seg @ seg))
        assert 0.5 - 1e-9 <= f <= 1 + 1e-9 and np.allclose(got, f * seg, atol=1e-6 * np.abs(seg).max()), (a, j)
    labels = {a["text"].replace("<b>", "").replace("</b>", ""): (a["x"], a["y"]) for a in notes if a.get("axref") != "x"}
    assert labels[f"start: step {int(steps[0]):,}"] == pytest.approx((x[0], y[0]))
    assert labels[f"end: step {int(steps[-1]):,}"] == pytest.approx((x[-1], y[-1]))
    assert len(labels) >= 3  # and at least one checkpoint between, with its step
    stages = shaded_stages(many_stages)
    assert len(stages) > 10  # more stages than colours
    markers = [t for t in fig["data"] if t.get("mode") == "markers" and not t.get("name", "").startswith(("cusp", "near"))]
    looks = [(t["marker"]["color"], t["marker"].get("symbol", "circle")) for t in markers]
    assert len(set(looks)) == len(looks) == len(stages), looks  # every stage its own look, the first and the last too


def _copy_loss_window(store_path: Path) -> tuple[int, int]:
    """docs/stages.md's window for a run with induction heads, by a plain pass over eval_loss.parquet: the checkpoints
    over which ``probe_copy_loss`` falls from 90% to 10% of its drop (from its highest value before its lowest to its
    lowest), one checkpoint either side."""
    frame = pd.read_parquet(store_path / "eval_loss.parquet")[["step", "probe_copy_loss"]].dropna().sort_values("step")
    steps, copy = [int(s) for s in frame["step"]], [float(v) for v in frame["probe_copy_loss"]]
    low = copy.index(min(copy))
    high = copy.index(max(copy[: low + 1]))
    top, bottom = copy[high], copy[low]
    start = next(i for i in range(high, len(copy)) if copy[i] <= bottom + 0.9 * (top - bottom))
    end = next(i for i in range(start, len(copy)) if copy[i] <= bottom + 0.1 * (top - bottom))
    return steps[max(start - 1, 0)], steps[min(end + 1, len(steps) - 1)]


def test_the_caption_says_why_a_turn_matters_and_how_much_of_pc1_moves_while_heads_form(tmp_path, monkeypatch) -> None:
    """docs/stages.md measures the share of PC1's range the path covers while induction-d128's induction heads form
    (its copy loss's fall from 90% to 10% of its drop, one checkpoint either side). The caption says it, with the
    window and the share found here from eval_loss.parquet and essential.parquet read with pandas, and why a turn
    matters."""
    serve_only(INDUCTION, tmp_path, monkeypatch)
    at = open_page("pages/run_timeline.py")
    caption = next(c.value for c in at.caption if "principal components" in c.value)
    assert "stage boundary tends to sit there" in caption, caption
    start, end = _copy_loss_window(INDUCTION)
    path = _path_from_files(INDUCTION)
    inside = path[(path["step"] >= start) & (path["step"] <= end)]["pc1"].to_numpy()
    share = abs(inside[-1] - inside[0]) / (path["pc1"].max() - path["pc1"].min())
    assert f"While the induction heads form (steps {start:,} to {end:,}" in caption, caption
    assert f"the path covers {share:.0%} of PC1's range" in caption, caption
    assert "arrowheads give the direction of training" in caption


def _docs_table() -> dict[str, tuple[str, float | None]]:
    """docs/stages.md's essential-dynamics table: run -> (its window's cell, the share of PC1's range in percent)."""
    text = (ROOT / "docs" / "stages.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].startswith("`") and cells[1].isdigit():
            rows[cells[0].strip("`")] = (cells[7], float(cells[8].rstrip("%")) if cells[8].endswith("%") else None)
    return rows


@pytest.mark.parametrize("run", sorted(_docs_table()))
def test_the_window_and_the_share_of_pc1_are_those_the_docs_measured(run: str) -> None:
    from headwatch.analysis.stages.essential import store_trajectory
    from headwatch.dashboard.views.timeline.data import forming_window, pc1_share

    cell, share = _docs_table()[run]
    store = open_store(ROOT / "data" / run)
    window = forming_window(store)
    if share is None:  # induction-d64: no induction head; its previous-token heads give the caption a window
        assert window is not None and window.heads == "previous-token heads"
        return
    found = re.match(r"([\d,]+)–([\d,]+) \((copy loss|previous-token count)\)", cell)
    assert found, cell
    start, end = (int(found.group(i).replace(",", "")) for i in (1, 2))
    assert window is not None and (window.start, window.end) == (start, end), (window, cell)
    assert window.heads == ("induction heads" if found.group(3) == "copy loss" else "previous-token heads")
    trajectory = store_trajectory(store)
    assert trajectory is not None
    got = pc1_share(trajectory[0], window.start, window.end)
    assert got is not None and round(100 * got) == share, (got, share)


def test_the_navigation_names_the_essential_dynamics_under_the_timeline(app_env) -> None:
    """The Overview lists every view with its description (`dashboard.navigation`): the Timeline's names the essential
    dynamics, which were found only by scrolling the Timeline."""
    at = open_page(None)
    assert not at.exception
    assert any("essential dynamics" in m.value and "principal components" in m.value for m in at.markdown)


def test_the_caption_lists_each_turn_with_its_verdict() -> None:
    """The caption's turns (`views.timeline.essential.turns_text`), against the rule read here: every cusp and near one
    with its step, angle and speed; "No cusp" only where no turn is either."""
    import pandas as pd

    from headwatch.dashboard.views.timeline.essential import turns_text

    path = pd.DataFrame(
        {"step": [0, 10, 20, 30], "turn": [np.nan, 123.4, 88.0, 40.0], "speed": [1.0, 0.5, 0.25, 2.0]}
        | {"verdict": ["", "cusp", "near", "none"]}
    )
    assert turns_text(path) == (
        "Turns: cusp at step 10 (123 degrees, speed 0.5 nats per checkpoint); near a cusp at step 20 (88 degrees, "
        "speed 0.25 nats per checkpoint)."
    )
    assert turns_text(path.assign(verdict=["", "none", "none", "none"])).startswith("No cusp")
