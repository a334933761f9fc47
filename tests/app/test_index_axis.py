"""The checkpoint-index time axis: checkpoint i at x = i, ticks labelled with steps; hovers and clicks still the step.

A linear step axis squeezes a log-spaced start (steps 0 to 128 of 1,536) into a sliver; a log axis cannot
give a Pythia-like schedule's many late checkpoints room. The index axis gives every checkpoint one unit.
Checked against the store's own step list (meta.json), not the axis code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.app.conftest import arr, chart, notices, open_page
from tests.app.test_compare import DEEP, SHALLOW, aligned, data_dir, link, traces, two_runs  # noqa: F401 (fixtures)

LAYERS = "pages/layer_view.py"
HEAD = "pages/head_explorer.py"


def _steps(store: Path) -> list[int]:
    """The real checkpoints' steps, from meta.json (duplicates left out)."""
    meta = json.loads((store / "meta.json").read_text())
    return [c["step"] for c in meta["checkpoints"] if c.get("duplicate_of") is None]


def test_the_index_axis_puts_checkpoint_i_at_i_and_labels_ticks_with_its_step(store_path: Path) -> None:
    from headwatch.analysis.store import open_store
    from headwatch.dashboard.data import step_axis

    steps = _steps(store_path)
    axis = step_axis(open_store(store_path), scale="index")
    assert axis.x.tolist() == list(range(len(steps))) and axis.steps.tolist() == steps and not axis.log
    assert axis.tickvals[0] == 0 and axis.tickvals[-1] == len(steps) - 1
    for i, text in zip(axis.tickvals, axis.ticktext, strict=True):
        assert float(i).is_integer()
        s = steps[int(i)]
        assert text == (str(s) if s < 10_000 else f"{s // 1000}k")  # the synthetic late steps are whole thousands
    # the duplicate (step 3 repeats step 0) is marked between steps 2 and 4: index 2.5
    assert axis.dup_x.tolist() == [steps.index(2) + 0.5]
    assert np.allclose(axis.edges, np.arange(len(steps) + 1) - 0.5)  # one unit per cell


def test_the_layer_view_opens_on_the_index_axis_with_the_real_step_in_hover_and_click(app_env: Path) -> None:
    steps = _steps(app_env)
    at = open_page(LAYERS, {"layer": "1"})
    assert at.query_params["xscale"] == "index" and not notices(at)
    fig = chart(at, "layer_lines")
    xaxis = fig["layout"]["xaxis"]
    assert xaxis["tickmode"] == "array" and "index" in xaxis["title"]["text"]
    labels = dict(zip(xaxis["tickvals"], xaxis["ticktext"], strict=True))
    assert labels[0] == "0" and labels[len(steps) - 1] == f"{steps[-1] // 1000}k"
    heads = [t for t in fig["data"] if str(t.get("name", "")).startswith("H")]
    for t in heads:
        assert arr(t["x"]).tolist() == list(range(len(steps)))
        custom = arr(t["customdata"]).reshape(len(steps), -1)
        assert custom[:, 2].tolist() == steps  # [layer, head, step]: the click and the hover read the real step
        assert "step %{customdata[2]}" in t["hovertemplate"] and "%{x" not in t["hovertemplate"]


def test_every_time_axis_chart_of_the_head_explorer_hovers_the_step_on_the_index_axis(app_env: Path) -> None:
    steps = _steps(app_env)
    for panel, key in (("leading", "leading"), ("statistic", "head_in_layer")):  # each chart in its tab
        at = open_page(HEAD, {"layer": "1", "head": "2", "xscale": "index", "panel": panel})
        assert not notices(at)
        fig = chart(at, key)
        for t in fig["data"]:
            if t.get("x") is None or t.get("hoverinfo") == "skip" or len(arr(t["x"])) != len(steps):
                continue
            assert "%{x" not in (t.get("hovertemplate") or ""), (key, t.get("name"))
            assert np.allclose(arr(t["x"]), np.arange(len(steps)))


def test_compare_runs_on_the_index_axis_share_one_index_over_both_schedules(two_runs: Path) -> None:  # noqa: F811
    for align in ("step", "fraction"):
        at = open_page("pages/compare_runs.py", link(stat="std", matrix="qk", align=align, xscale="index"))
        assert not notices(at)
        times = {run: aligned(two_runs, run, align) for run in (DEEP, SHALLOW)}
        grid = sorted(set(times[DEEP].tolist()) | set(times[SHALLOW].tolist()))
        for run in (DEEP, SHALLOW):
            for t in traces(at, "compare_bands", run=run, kind="mean"):
                x = arr(t["x"])
                step = arr(t["customdata"])[:, 0]
                # each checkpoint sits at the index of its own time among both runs' times, and hovers its step
                assert [grid[int(i)] for i in x] == [times[run][int(s)] for s in step]
                assert step.tolist() == _steps(two_runs / run)
        xaxis = chart(at, "compare_bands")["layout"]["xaxis"]
        for i, text in zip(xaxis["tickvals"], xaxis["ticktext"], strict=True):
            want = grid[int(i)]
            assert text == (f"{want:.3g}" if align == "fraction" else f"{want:.0f}")
