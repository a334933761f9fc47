"""The headline a researcher reads first (Overview, Timeline), its evidence links, and what the Timeline says about a run,
against the store's own tables read with pandas: head_emergence.parquet for which heads formed when, composition.parquet
and meta.json for the strongest K-composition source, stages.parquet for the stages table."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.findings.headline import run_headline
from headwatch.analysis.store import open_store
from tests.app.conftest import ROOT, arr, chart, open_page, serve_only

DATA = ROOT / "data"
RUNS = sorted(p.name for p in DATA.iterdir() if (p / "meta.json").is_file())
D128 = DATA / "induction-d128"


def _first_heads(run: str) -> dict[str, tuple[int, list[tuple[int, int]], int]]:
    """Per type some head holds at the end: the earliest emergence step, every head emerging then, and how many later
    (head_emergence.parquet read directly)."""
    table = pd.read_parquet(DATA / run / "head_emergence.parquet").dropna(subset=["emergence_step"])
    out = {}
    for kind, rows in table.groupby("type"):
        first = int(rows["emergence_step"].min())
        at = rows[rows["emergence_step"] == first]
        out[str(kind)] = (first, sorted(zip(at["layer"].astype(int), at["head"].astype(int), strict=True)), len(rows) - len(at))
    return out


def _strongest_source(run: str, target: tuple[int, int], step: int) -> tuple[tuple[int, int], float]:
    """The source with the largest K-composition into ``target`` at ``step`` and its score over the random-heads mean
    (composition.parquet and meta.json read directly)."""
    rows = pd.read_parquet(DATA / run / "composition.parquet")
    rows = rows[(rows["step"] == step) & (rows["layer_b"] == target[0]) & (rows["head_b"] == target[1])]
    best = rows.loc[rows["k"].idxmax()]
    baseline = json.loads((DATA / run / "meta.json").read_text())["composition"]["baseline"]["k"]
    return (int(best["layer_a"]), int(best["head_a"])), float(best["k"]) / baseline


@pytest.mark.parametrize("run", RUNS)
def test_the_headline_names_every_first_head_its_step_and_the_strongest_source(run: str) -> None:
    want = _first_heads(run)
    got = {t.type: t for t in run_headline(open_store(DATA / run)) or []}
    assert {k for k, t in got.items() if t.step is not None} == set(want)
    for kind, (step, heads, later) in want.items():
        assert (got[kind].step, list(got[kind].first), got[kind].later) == (step, heads, later), kind
    steps = [t.step for t in got.values() if t.step is not None]
    assert steps == sorted(steps)  # what formed first comes first
    if "induction" in want and (DATA / run / "composition.parquet").exists():
        step, heads, _ = want["induction"]
        sources = got["induction"].sources
        assert [s.target for s in sources] == heads
        for s in sources:
            source, ratio = _strongest_source(run, s.target, step)
            assert s.step == step and s.source == source and s.ratio == pytest.approx(ratio, rel=1e-9)


def _held_from(run: str, kind: str) -> dict[tuple[int, int], int]:
    """Per head that holds ``kind`` at the last checkpoint, the first checkpoint from which it holds it to the end, by a
    plain pass over head_types.parquet (``holds`` per step), not head_emergence.parquet."""
    table = pd.read_parquet(DATA / run / "head_types.parquet").query("type == @kind").sort_values("step")
    out = {}
    for (layer, head), rows in table.groupby(["layer", "head"]):
        holds, steps = rows["holds"].tolist(), rows["step"].tolist()
        if not holds[-1]:
            continue
        i = len(holds) - 1
        while i > 0 and holds[i - 1]:
            i -= 1
        out[(int(layer), int(head))] = int(steps[i])
    return out


def test_the_induction_ladder_reads_as_the_new_user_counted_it() -> None:
    """The emergence steps the issue took four Timelines to read, per induction run: the headline's first step and
    first heads are those a plain pass over head_types.parquet finds (the earliest step from which a head holds the
    type to the end, and every head from then), and a run none of whose heads holds the type at the end (the d64
    control, in the shipped stores) names none."""
    runs = [run for run in RUNS if "induction" in run]
    assert runs
    for run in runs:
        got = {t.type: t for t in run_headline(open_store(DATA / run)) or []}["induction"]
        held = _held_from(run, "induction")
        if not held:
            assert got.step is None, run
            continue
        first = min(held.values())
        assert got.step == first, (run, got.step, held)
        assert list(got.first) == sorted(h for h, s in held.items() if s == first), run
        assert got.later == sum(s > first for s in held.values()), run


def _as_markdown(text: str) -> str:
    """A headline drawn with links to this tab (``<a href="..." target="_self">L1 H0</a>``, `dashboard.charts.app_links`)
    as the Markdown it was written from (``[L1 H0](...)``)."""
    return re.sub(r'<a href="([^"]+)" target="_self">([^<]+)</a>', lambda m: f"[{m.group(2)}]({html.unescape(m.group(1))})", text)


def _links(text: str) -> dict[str, str]:
    """Markdown links ``[label](target)`` -> {label: target} (the first of each label)."""
    out: dict[str, str] = {}
    for label, target in re.findall(r"\[([^\]]+)\]\(([^)]+)\)", text):
        out.setdefault(label, target)
    return out


def _serve_data(monkeypatch) -> None:
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(DATA))


def test_the_overview_opens_on_the_runs_headline_with_a_link_to_each_heads_evidence(monkeypatch) -> None:
    _serve_data(monkeypatch)
    at = open_page(None, {"run": "induction-d128"})
    assert not at.exception and not at.error
    drawn = next(m.value for m in at.markdown if "Induction heads" in m.value)  # above the list of views
    views = next(i for i, m in enumerate(at.markdown) if "Head explorer" in m.value or "one head:" in m.value)
    assert next(i for i, m in enumerate(at.markdown) if m.value == drawn) < views
    first = _as_markdown(drawn)
    step, heads, later = _first_heads("induction-d128")["induction"]
    assert f"**Induction heads** form at step {step:,}" in first and f"{later} more by step" in first
    links = _links(first)
    for layer, head in heads:
        query = parse_qs(urlparse(links[f"L{layer} H{head}"]).query)
        assert query == {
            "run": ["induction-d128"],
            "layer": [str(layer)],
            "head": [str(head)],
            "stat": ["induction"],
            "panel": ["statistic"],
            "step": [str(step)],
        }
    source, ratio = _strongest_source("induction-d128", heads[0], step)
    name = f"L{source[0]} H{source[1]}"
    query = parse_qs(urlparse(links[name]).query)
    assert urlparse(links[name]).path == "circuits" and query["step"] == [str(step)] and query["kind"] == ["k"]
    assert f"[{name}]({links[name]}) (previous-token) for L{heads[0][0]} H{heads[0][1]} ({ratio:.2f}× random heads)" in first
    # every run's card says it too: a run none of whose heads holds the type at the end (head_types.parquet) names no
    # induction head and its highest score (d64, the control, and both plain-text runs, in the shipped stores)
    without = [run for run in RUNS if not _held_from(run, "induction")]
    assert without and sum("**No induction head**" in m.value for m in at.markdown) == len(without)


# the head explorer's tabs (URL panel) and the charts each draws, W_QK and W_OV side by side (both=1, the default)
HEAD_TABS = {
    "weights": ["density_map", "density_map_other", "density_slices", "density_slices_other"],
    "spectrum": ["spectrum_map", "spectrum_map_other", "spectrum_slices", "spectrum_slices_other"],
    "leading": ["leading", "leading_other"],
    "statistic": ["head_in_layer"],  # an attention statistic (induction): no chart of it per matrix
}


def _page_charts(at) -> list[str]:
    """The keys of the page's charts, in order, the sidebar's loss curve (its run card) left out."""
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in at.get("plotly_chart")]
    keys.remove("loss_curve")
    return keys


def test_an_evidence_link_opens_the_head_explorer_on_the_types_score_tab(d128: Path) -> None:
    """``panel=statistic`` opens the head explorer on the tab of the statistic against its layer, drawn alone (no
    weight panel is sent), titled without a matrix: the induction score is an attention statistic of the head, not of
    W_QK."""
    at = open_page(
        "pages/head_explorer.py",
        {"run": "induction-d128", "layer": "1", "head": "0", "stat": "induction", "panel": "statistic", "step": "1400"},
    )
    assert not at.exception and not at.error
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in at.get("plotly_chart")]
    assert keys[0] == "head_in_layer", keys
    assert _page_charts(at) == HEAD_TABS["statistic"] and at.query_params["panel"] == "statistic"
    title = chart(at, "head_in_layer")["layout"]["title"]["text"]
    assert "layer 1, head 0 · induction against its layer" in title and "W_QK" not in title and "W_OV" not in title


def test_the_head_explorer_opens_on_the_weights_without_the_parameter(d128: Path) -> None:
    """Without ``panel`` the head explorer opens on the weights' tab, its charts alone on the page; the link's ``panel``
    picks the tab drawn, only its charts sent; a bad one falls back to the weights with a notice."""
    query = {"run": "induction-d128", "layer": "1", "head": "0", "stat": "induction"}
    at = open_page("pages/head_explorer.py", query)
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in at.get("plotly_chart")]
    assert keys[0] == "density_map" and "head_in_layer" not in keys  # the statistic is in a tab of its own
    assert _page_charts(at) == HEAD_TABS["weights"] and at.query_params["panel"] == "weights"
    for panel, charts in HEAD_TABS.items():
        tab = open_page("pages/head_explorer.py", dict(query, panel=panel))
        assert not tab.exception and not tab.error and not tab.warning, panel
        assert _page_charts(tab) == charts and tab.query_params["panel"] == panel, (panel, _page_charts(tab))
    bad = open_page("pages/head_explorer.py", {"run": "induction-d128", "panel": "sideways"})
    assert any("panel=sideways" in w.value and "showing panel=weights" in w.value for w in bad.warning)
    assert _page_charts(bad) == HEAD_TABS["weights"] and bad.query_params["panel"] == "weights"  # the URL is repaired


def test_a_links_settings_of_a_tab_not_drawn_stay_in_the_link_until_that_tab_shows_them(d128: Path) -> None:
    """A link names a statistic but opens the weights' tab, where no widget reads ``stat``: the address keeps the link's
    ``stat`` (a collaborator's link loses nothing), and a click on the statistic tab shows the link's statistic, not
    the session's own or the default. A statistic chosen there stays in the link when the weights are shown again. A
    bad value is told when its tab is drawn, and the address repaired."""
    query = {"run": "induction-d128", "layer": "1", "head": "0", "stat": "prev_token", "panel": "weights"}
    at = open_page("pages/head_explorer.py", query)
    assert not at.exception and not at.warning
    assert _page_charts(at) == HEAD_TABS["weights"]
    assert (at.query_params["stat"], at.query_params["panel"]) == ("prev_token", "weights")
    at.selectbox(key="layer").set_value(0).run()  # a rerun of the same tab: the kept value stays
    assert (at.query_params["stat"], at.query_params["layer"]) == ("prev_token", "0")
    at.session_state["panel"] = "statistic"  # what a click on the tab hands the rerun (`widgets.panel_tabs`)
    at.run()
    assert _page_charts(at) == HEAD_TABS["statistic"] and at.selectbox(key="stat").value == "prev_token"
    title = chart(at, "head_in_layer")["layout"]["title"]["text"]
    assert title.endswith("layer 0, head 0 · prev against its layer"), title  # STATS["prev_token"]'s short name
    at.selectbox(key="stat").set_value("sink").run()
    at.session_state["panel"] = "weights"
    at.run()
    assert _page_charts(at) == HEAD_TABS["weights"] and at.query_params["stat"] == "sink"  # chosen there, kept here

    bad = open_page("pages/head_explorer.py", dict(query, stat="nonsense"))
    assert not bad.warning and bad.query_params["stat"] == "nonsense"  # nothing reads it yet: not judged, not dropped
    bad.session_state["panel"] = "statistic"
    bad.run()
    assert any("stat=nonsense" in w.value for w in bad.warning), [w.value for w in bad.warning]
    assert bad.query_params["stat"] != "nonsense"


@pytest.mark.parametrize("page", ["head_explorer", "forward_lenses"])
def test_each_tab_owns_the_parameters_its_page_says(d128: Path, page: str) -> None:
    """A page's ``OWNS`` (which URL parameters each tab's own widgets have: the link keeps those of the tabs not drawn)
    is what each tab registers beyond what every tab does; the statistic tab opened on lambda_k, a positive statistic,
    so that its k and its log switch are drawn too."""
    import ast

    # read, not imported: a page runs main() on import; a page that calls a view's main() says OWNS in that view's page
    tree = ast.parse((ROOT / "pages" / f"{page}.py").read_text())
    view = next((n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module and ".views." in n.module), None)
    if view is not None:
        tree = ast.parse((ROOT / (view.replace(".", "/") + ".py")).read_text())
    owns = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["OWNS"]
    )
    drawn, lacking = {}, set()
    for panel in owns:
        query = {"run": "induction-d128", "panel": panel} | ({"stat": "lambda"} if panel == "statistic" else {})
        at = open_page(f"pages/{page}.py", query)
        assert not at.exception and not at.error, panel
        drawn[panel] = set(at.query_params.keys())
        if any("--lenses ablation" in i.value for i in at.info):  # the shipped store lacks the tab's lens: no widget
            lacking.add(panel)
    common = set.intersection(*drawn.values())
    owned = {panel: set() if panel in lacking else set(names) for panel, names in owns.items()}
    assert {panel: keys - common for panel, keys in drawn.items()} == owned


def test_the_forward_lenses_step_waits_for_its_tab_and_the_loss_switch_for_its(d128: Path) -> None:
    """On the Forward lenses the step is the divergence tab's frame and the losses tab's mark, the loss switch the
    over-training tabs': each control on the tabs it changes, and a link's value for the other kept until its tab."""
    steps = [int(s) for s in open_store(D128).steps]
    at = open_page("pages/forward_lenses.py", {"run": "induction-d128", "step": str(steps[3]), "loss": "1"})
    assert [t.label for t in at.toggle] == ["Overlay the loss curve"] and not at.get("select_slider")
    assert at.query_params["step"] == str(steps[3])  # not drawn on the layers' tab, kept
    at.toggle(key="loss").set_value(False).run()
    at.session_state["panel"] = "divergence"
    at.run()
    assert at.select_slider(key="step").value == steps[3] and not at.toggle
    assert at.query_params["loss"] == "0" and at.query_params["step"] == str(steps[3])  # chosen on layers, kept here


def test_a_page_without_tabs_keeps_only_what_it_draws(d128: Path) -> None:
    """Pages that draw every widget they have keep none of a link's other parameters (a typo, another page's)."""
    at = open_page("pages/layer_view.py", {"run": "induction-d128", "layer": "1", "panelz": "x"})
    assert not at.exception and "panelz" not in at.query_params and at.query_params["layer"] == "1"


@pytest.fixture()
def d128(monkeypatch) -> Path:
    _serve_data(monkeypatch)
    return D128


def test_the_timelines_type_event_names_every_head_formed_at_the_first_step(d128: Path) -> None:
    at = open_page("pages/run_timeline.py", {"run": "induction-d128", "kinds": ["head type"]})
    table = next(d.value for d in at.dataframe if "event" in d.value.columns)
    assert list(table.columns[:4]) == ["step", "kind", "event", "link"]  # the evidence before the long detail
    step, heads, later = _first_heads("induction-d128")["induction"]
    row = table[table["event"].str.startswith("first induction")].iloc[0]
    assert row["event"] == "first induction heads: " + ", ".join(f"L{a} H{b}" for a, b in heads)
    rest = pd.read_parquet(d128 / "head_emergence.parquet").query("type == 'induction' and emergence_step > @step")
    assert later == len(rest)
    together = f"{len(heads)} heads hold" if len(heads) > 1 else "holds"
    more = ""
    if later:  # the later heads: at one step, or by the last of theirs
        steps = sorted(int(s) for s in rest["emergence_step"])
        when = f"at step {steps[0]:,}" if steps[0] == steps[-1] else f"by step {steps[-1]:,}"
        more = f"; {later} more head{'s' if later > 1 else ''} {when}"
    assert row["detail"] == f"{together} the type from step {step:,} to the end{more}"
    headline = next(m.value for m in at.markdown if "Induction heads" in m.value)  # the Timeline opens with it too
    assert f"form at step {step:,}" in headline


def test_the_stages_table_names_its_columns_and_gives_end_minus_start(d128: Path) -> None:
    at = open_page("pages/run_timeline.py", {"run": "induction-d128", "basis": "llc"})
    table = next(d.value for d in at.dataframe if "from step" in d.value.columns)
    stored = pd.read_parquet(d128 / "stages.parquet").query("basis == 'llc'").sort_values("stage")
    assert not [c for c in table.columns if "_" in c]  # no raw column names (start_value, change_se)
    assert table["end − start"].to_numpy() == pytest.approx((stored["end_value"] - stored["start_value"]).to_numpy())
    assert table["fitted change"].to_numpy() == pytest.approx(stored["change"].to_numpy())
    assert table["stage"].tolist() == (stored["stage"] + 1).tolist()
    # the run's stages (the default basis): the curve they report named (meta.json stages.run.trend_from), their support
    run = open_page("pages/run_timeline.py", {"run": "induction-d128"})
    table = next(d.value for d in run.dataframe if "from step" in d.value.columns)
    stored = pd.read_parquet(d128 / "stages.parquet").query("basis == 'run'").sort_values("stage")
    assert json.loads((d128 / "meta.json").read_text())["stages"]["run"]["trend_from"] == "llc"
    assert table["whole-model LLC at start"].to_numpy() == pytest.approx(stored["start_value"].to_numpy())
    assert table["supported by (curve: boundary, step)"].tolist() == stored["support"].tolist()


def _negative_whole_model(path: Path) -> list[int]:
    """The steps of negative whole-model estimates under the distribution the stages read: the training one where the
    store holds it, else its text estimates (llc.parquet read with pandas)."""
    table = pd.read_parquet(path / "llc.parquet")
    if "data" in table.columns:
        table = table[table["data"] == ("train" if (table["data"] == "train").any() else "text")]
    return sorted(int(s) for s in table[(table["head"] < 0) & (table["llc"] < 0)]["step"])


def _stage_notes(at) -> list[str]:
    return [c.value for c in at.caption if c.value.startswith("Stages:")]


def test_the_llc_note_shows_only_with_the_llcs_stages_and_names_its_steps(tmp_path: Path, monkeypatch) -> None:
    """A run whose whole-model estimates are negative at its first checkpoints (a copy of induction-d128 with the first
    two made so, under the distribution its stages read, and its stages made again): the note names them as steps
    written out, on the LLC's stages only. The shipped induction-d128 says so where, and only where, its own
    estimates are negative."""
    from headwatch.precompute.lenses.stages import add_stages

    shipped = _negative_whole_model(D128)
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(DATA))
    said = _stage_notes(open_page("pages/run_timeline.py", {"run": "induction-d128", "basis": "llc"}))
    assert any("negative whole-model estimates" in n for n in said) == bool(shipped), (said, shipped)

    path = tmp_path / "negative" / "induction-d128"
    shutil.copytree(D128, path)
    table = pd.read_parquet(path / "llc.parquet")
    rows = table["head"] < 0
    if "data" in table.columns:
        rows &= table["data"] == ("train" if (table["data"] == "train").any() else "text")
    first = sorted(table.loc[rows, "step"].unique())[:2]
    rows &= table["step"].isin(first)
    table.loc[rows, "llc"] = -table.loc[rows, "llc"].abs() - 0.5
    table.to_parquet(path / "llc.parquet", index=False)
    add_stages(path)
    negative = _negative_whole_model(path)
    assert negative == [int(s) for s in first]
    words = ("step " if len(negative) == 1 else "steps ") + ", ".join(f"{s:,}" for s in negative)
    serve_only(path, tmp_path, monkeypatch)
    notes = _stage_notes(open_page("pages/run_timeline.py", {"basis": "llc"}))
    assert any(f"negative whole-model estimates at {words}:" in n for n in notes), notes
    assert not any("[" in n for n in notes)
    loss = open_page("pages/run_timeline.py", {"basis": "loss"})
    assert not [c.value for c in loss.caption if "whole-model" in c.value and c.value.startswith("Stages:")]


# --- Compare runs: emergence across runs, a default depth bin every run has ------------------------------------------

INDUCTION_RUNS = ["induction-d64", "induction-d128", "induction-d128-seed2", "induction-d256"]


def test_compare_runs_gives_each_runs_emergence_step_per_type(monkeypatch) -> None:
    _serve_data(monkeypatch)
    at = open_page("pages/compare_runs.py", {"runs": INDUCTION_RUNS, "stat": "induction"})
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "first formed at step" in d.value.columns)
    for run in INDUCTION_RUNS:
        stored = pd.read_parquet(DATA / run / "head_emergence.parquet")
        last = int(pd.read_parquet(DATA / run / "head_types.parquet")["step"].max())
        for kind, words in (("previous_token", "previous-token"), ("induction", "induction")):
            rows = stored[(stored["type"] == kind)].dropna(subset=["emergence_step"])
            got = table[(table["run"] == run) & (table["type"] == words)].iloc[0]
            if rows.empty:
                assert pd.isna(got["first formed at step"]) and got["heads at the end"] == 0
                continue
            first = int(rows["emergence_step"].min())
            at_first = rows[rows["emergence_step"] == first].sort_values(["layer", "head"])
            assert int(got["first formed at step"]) == first and got["heads at the end"] == len(rows)
            assert got["first heads"] == ", ".join(f"L{a} H{b}" for a, b in zip(at_first["layer"], at_first["head"], strict=True))
            assert got["fraction of the run"] == pytest.approx(first / last)
            assert int(got["last formed at step"]) == int(rows["emergence_step"].max())
    steps = dict(
        zip(table[table["type"] == "induction"]["run"], table[table["type"] == "induction"]["first formed at step"], strict=True)
    )
    for run in INDUCTION_RUNS:  # and as a plain pass over head_types.parquet finds them
        held = _held_from(run, "induction")
        assert (int(steps[run]) if held else None) == (min(held.values()) if held else None), run


def test_compare_runs_opens_on_a_depth_bin_every_chosen_run_has(monkeypatch) -> None:
    """2 and 6 layers in 4 bins: floor(4 layer / n_layers) gives the 2-layer runs bins 0 and 2 only, so the page opens
    on bin 2, [0.5, 0.75), with a panel of heads for every run (it opened on the empty [0.75, 1))."""
    _serve_data(monkeypatch)
    at = open_page("pages/compare_runs.py", {"runs": ["induction-d128", "shakespeare-pythia-6x8"], "stat": "std"})
    assert not at.exception and not at.error
    assert at.query_params["bin"] == "2" and at.query_params["nbins"] == "4"
    drawn: dict[str, list[int]] = {}
    for t in chart(at, "compare_bin")["data"]:
        if (t.get("meta") or {}).get("kind") == "heads":
            drawn.setdefault(t["meta"]["run"], []).append(t["meta"]["layer"])
    want = {
        run: [la for la in range(n) if (4 * la) // n == 2] for run, n in (("induction-d128", 2), ("shakespeare-pythia-6x8", 6))
    }
    assert drawn == want == {"induction-d128": [1], "shakespeare-pythia-6x8": [3, 4]}
    titles = [a.get("text", "") for a in chart(at, "compare_bin")["layout"].get("annotations", [])]
    assert not [t for t in titles if "no layer in this bin" in t], titles


def test_compare_runs_second_time_axis_has_no_title_of_its_own(monkeypatch) -> None:
    _serve_data(monkeypatch)
    at = open_page("pages/compare_runs.py", {"runs": ["induction-d128", "induction-d256"], "stat": "std", "xscale": "log"})
    for key in ("compare_bands", "compare_bin"):
        layout = chart(at, key)["layout"]
        assert layout["xaxis"]["title"]["text"].endswith("+ one step (log scale)")
        assert not (layout["xaxis2"].get("title") or {}).get("text"), key


# --- the head explorer: W_QK and W_OV side by side ---------------------------------------------------------------------


def test_both_matrices_side_by_side_in_every_weight_panel(d128: Path) -> None:
    """By default (no ``both`` in the link): each weight panel twice, the matrix chosen (keys as before) and the other
    (``_other``), each titled with its matrix and drawn from its own rows of heads.parquet (read with pandas), in one
    load; each weight tab (URL panel) so. Older links say what they said: ``both=0`` draws the chosen matrix alone,
    ``matrix=ov`` puts W_OV first."""
    query = {"run": "induction-d128", "layer": "1", "head": "0"}
    tabs = {  # the weight tabs, their charts and the subheaders of their panels
        "weights": (("density_map", "density_slices"), ("Weight distribution over training", "Distribution at the chosen steps")),
        "spectrum": (("spectrum_map", "spectrum_slices"), ("Spectrum over training",)),
        "leading": (("leading",), ()),
    }
    heads = pd.read_parquet(d128 / "heads.parquet", columns=["step", "layer", "head", "matrix", "stable_rank"])
    for tab, (tab_keys, tab_subheads) in tabs.items():
        at = open_page("pages/head_explorer.py", dict(query, panel=tab))
        assert not at.exception and not at.error
        keys = [el.proto.id.rsplit("-", 1)[-1] for el in at.get("plotly_chart")]
        for key in tab_keys:
            assert key in keys and f"{key}_other" in keys, (key, keys)
            assert "W_QK" in chart(at, key)["layout"]["title"]["text"]
            assert "W_OV" in chart(at, f"{key}_other")["layout"]["title"]["text"]
        if tab == "spectrum":
            for key, matrix in (("spectrum_slices", "qk"), ("spectrum_slices_other", "ov")):
                mine = heads[(heads["layer"] == 1) & (heads["head"] == 0) & (heads["matrix"] == matrix)]
                want = mine.sort_values("step")["stable_rank"].to_numpy()
                drawn = [t for t in chart(at, key)["data"] if len(arr(t["y"])) == len(want)]
                assert any(np.allclose(arr(t["y"]), want) for t in drawn), key
        subheads = [h.value for h in at.subheader]
        for panel in tab_subheads:
            assert f"{panel} · W_QK" in subheads and f"{panel} · W_OV" in subheads, subheads
        assert at.query_params.get("both") == "1"
        alone = open_page("pages/head_explorer.py", dict(query, both="0", panel=tab))
        assert not alone.exception and not alone.warning
        assert [k for k in keys if k.endswith("_other")]  # the same tab draws the other matrix with both=1
        assert not [k for k in (el.proto.id for el in alone.get("plotly_chart")) if k.endswith("_other")], tab
    ov = open_page("pages/head_explorer.py", {"run": "induction-d128", "layer": "1", "head": "0", "matrix": "ov"})
    assert "W_OV" in chart(ov, "density_map")["layout"]["title"]["text"]
    assert "W_QK" in chart(ov, "density_map_other")["layout"]["title"]["text"]


def test_the_both_switch_sits_on_the_weight_tabs_only(d128: Path) -> None:
    """The statistic tab draws the statistic of W_QK and of W_OV on one pair of axes whatever ``both`` says, so the
    switch is drawn on the weight tabs only (it sat above the tabs, where it changed nothing on the statistic tab);
    a link's ``both=0`` opened on the statistic tab stays in the address for the weight tabs, which then draw the
    chosen matrix alone."""
    query = {"run": "induction-d128", "layer": "1", "head": "0", "both": "0"}
    at = open_page("pages/head_explorer.py", dict(query, panel="statistic"))
    assert not at.exception and not at.error
    assert "both" not in [t.key for t in at.toggle]
    assert at.query_params.get("both") == "0"
    for tab in ("weights", "spectrum", "leading"):
        on_tab = open_page("pages/head_explorer.py", dict(query, panel=tab))
        assert [t.value for t in on_tab.toggle if t.key == "both"] == [False], tab
        assert not [k for k in (el.proto.id for el in on_tab.get("plotly_chart")) if k.endswith("_other")], tab


def test_a_type_no_head_holds_links_its_highest_score() -> None:
    """The plain-text run has no induction head: the headline names the head with the highest induction score
    (head_emergence.parquet's peak_score) and links it at its peak step, on the score's panel."""
    from headwatch.analysis.findings.headline import headline_markdown

    run = "shakespeare-pythia-6x8"
    rows = pd.read_parquet(DATA / run / "head_emergence.parquet").query("type == 'induction'")
    assert rows["emergence_step"].isna().all()
    peak = rows.loc[rows["peak_score"].idxmax()]
    line = next(s for s in headline_markdown(open_store(DATA / run), run) if s.startswith("**No induction head**"))
    name = f"L{int(peak['layer'])} H{int(peak['head'])}"
    assert f"highest induction score {peak['peak_score']:.3g}, [{name}](" in line
    query = parse_qs(urlparse(_links(line)[name]).query)
    assert query["step"] == [str(int(peak["peak_step"]))] and query["stat"] == ["induction"] and query["panel"] == ["statistic"]


def test_a_level_crossing_event_opens_the_head_explorer_on_its_crossings(d128: Path) -> None:
    """The Timeline's level-crossing event links ``panel=leading``: the tab of the λ_0 … λ_3 panel, where the crossing
    is marked, its charts alone on the page, on the head and matrix the event names, with the step among the chosen
    ones."""
    at = open_page("pages/run_timeline.py", {"run": "induction-d128", "kinds": ["level crossing"]})
    table = next(d.value for d in at.dataframe if "event" in d.value.columns)
    assert len(table), "induction-d128 has level crossings"
    row = table.iloc[0]
    query = {k: v[0] for k, v in parse_qs(urlparse(row["link"]).query).items()}
    assert query["panel"] == "leading" and query["step"] == str(row["step"])
    assert f"L{query['layer']} H{query['head']}" in row["event"]
    page = open_page("pages/head_explorer.py", query)
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in page.get("plotly_chart")]
    assert keys[0] == "leading", keys
    assert _page_charts(page) == HEAD_TABS["leading"] and page.query_params["panel"] == "leading"  # that tab alone
    title = chart(page, "leading")["layout"]["title"]["text"]
    name = "W_QK" if query["matrix"] == "qk" else "W_OV"
    assert f"layer {query['layer']}, head {query['head']} · {name}" in title and "crossings" in title


def test_an_rllc_rise_opens_the_refined_llc_page_on_that_estimates_chains(d128: Path) -> None:
    """The Timeline's largest rLLC rise links ``panel=traces``: the chains' loss traces of that head at that step come
    first on the Refined LLC page, and they are llc_chains.parquet's (read with pandas)."""
    at = open_page("pages/run_timeline.py", {"run": "induction-d128", "kinds": ["rLLC rise"]})
    table = next(d.value for d in at.dataframe if "event" in d.value.columns)
    query = {k: v[0] for k, v in parse_qs(urlparse(table.iloc[0]["link"]).query).items()}
    assert query["panel"] == "traces"
    page = open_page("pages/refined_llc.py", query)
    assert not page.exception and not page.error
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in page.get("plotly_chart")]
    assert keys[0] == "llc_traces", keys
    layer, head = (int(v) for v in query["trace"][1:].split("H"))
    chains = pd.read_parquet(d128 / "llc_chains.parquet")
    if "data" in chains.columns:  # estimates under several distributions: the link names the one that rose
        chains = chains[chains["data"] == query["data"]]
    own = chains[(chains["step"] == int(query["trace_step"])) & (chains["layer"] == layer) & (chains["head"] == head)]
    drawn = chart(page, "llc_traces")["data"]
    for trace, stored in zip(drawn, own.sort_values("chain")["trace"], strict=False):
        assert np.allclose(arr(trace["y"]), np.asarray(stored, dtype=np.float64), rtol=1e-6)
    assert len(own) > 0 and [k for k in keys if k == "llc_traces"] == ["llc_traces"]  # drawn once, first


def test_an_llc_stage_boundary_opens_the_refined_llc_page_on_the_whole_model(monkeypatch, tmp_path: Path) -> None:
    """A store whose events' boundaries are the LLC's (made before the run's merged boundaries: meta.json
    ``stages.primary`` is ``llc``; here the GPU-built induction-d512 so marked): each boundary's link opens the Refined
    LLC page with the whole-model LLC (the curve the stages are read from) as its first chart, at stages.parquet's
    start steps."""
    store = tmp_path / "induction-d512"
    shutil.copytree(DATA / "induction-d512", store)
    meta = json.loads((store / "meta.json").read_text())
    meta["stages"]["primary"] = "llc"
    (store / "meta.json").write_text(json.dumps(meta))
    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(tmp_path))
    at = open_page("pages/run_timeline.py", {"run": "induction-d512", "kinds": ["stage boundary"], "basis": "llc"})
    table = next(d.value for d in at.dataframe if "event" in d.value.columns)
    stages = pd.read_parquet(DATA / "induction-d512" / "stages.parquet").query("basis == 'llc' and stage > 0")
    assert sorted(table["step"]) == sorted(stages["start_step"].astype(int))
    query = {k: v[0] for k, v in parse_qs(urlparse(table.iloc[0]["link"]).query).items()}
    assert urlparse(table.iloc[0]["link"]).path == "llc" and query["panel"] == "model"
    page = open_page("pages/refined_llc.py", query)
    assert not page.exception and not page.error
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in page.get("plotly_chart")]
    assert keys[0] == "llc_model" and keys.count("llc_model") == 1, keys


def test_a_run_boundary_opens_the_forward_lenses_on_the_losses_at_its_step(d128: Path) -> None:
    """A boundary of the run (stages.parquet basis ``run``) is read from curves: its link opens the Forward lenses page
    on the losses' tab (the copy loss the boundaries are named after, and the evaluation loss), its chart alone, with
    the boundary's step marked on it, at stages.parquet's start steps. Without ``panel`` the page opens on the layers'
    tab, without the losses."""
    at = open_page("pages/run_timeline.py", {"run": "induction-d128", "kinds": ["stage boundary"]})
    table = next(d.value for d in at.dataframe if "event" in d.value.columns)
    stages = pd.read_parquet(d128 / "stages.parquet").query("basis == 'run' and stage > 0")
    assert sorted(table["step"]) == sorted(stages["start_step"].astype(int))
    step = int(stages["start_step"].iloc[len(stages) // 2])
    link = table[table["step"] == step]["link"].iloc[0]
    query = {k: v[0] for k, v in parse_qs(urlparse(link).query).items()}
    assert urlparse(link).path == "lenses" and (query["panel"], query["step"]) == ("losses", str(step)), link
    page = open_page("pages/forward_lenses.py", query)
    assert not page.exception and not page.error
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in page.get("plotly_chart")]
    keys.remove("loss_curve")  # the sidebar's run card
    assert keys[0] == "probe_loss" and keys.count("probe_loss") == 1, keys
    assert keys == ["probe_loss"] and page.query_params["panel"] == "losses"  # the losses' tab alone
    fig = chart(page, "probe_loss")
    steps = list(arr(fig["data"][0]["customdata"]).astype(int))
    x = arr(fig["data"][0]["x"])[steps.index(step)]
    marks = [sh for sh in fig["layout"]["shapes"] if sh.get("type") == "line" and sh.get("yref") == "y domain"]
    (mark,) = [sh for sh in marks if sh["x0"] == pytest.approx(x) and sh["x1"] == pytest.approx(x)]
    assert mark["label"]["text"].strip() == f"step {step:,}"
    copy_loss = pd.read_parquet(d128 / "eval_loss.parquet").sort_values("step")["probe_copy_loss"].to_numpy()
    assert np.allclose(arr(fig["data"][0]["y"]), copy_loss, equal_nan=True)
    default = open_page("pages/forward_lenses.py", {"run": "induction-d128"})
    keys = [el.proto.id.rsplit("-", 1)[-1] for el in default.get("plotly_chart")]
    keys.remove("loss_curve")  # the sidebar's run card
    assert keys == ["bands_entropy", "bands_span"], keys  # the layers' tab by default, the losses not drawn
    assert default.query_params["panel"] == "layers"
    bad = open_page("pages/forward_lenses.py", {"run": "induction-d128", "panel": "sideways"})
    assert any("panel=sideways" in w.value and "showing panel=layers" in w.value for w in bad.warning)
    assert _page_charts(bad) == ["bands_entropy", "bands_span"] and bad.query_params["panel"] == "layers"  # the URL is repaired


@pytest.mark.parametrize("both", ["1", "0"])
def test_the_leading_tab_counts_its_approaches_and_writes_nothing_else(d128: Path, both: str) -> None:
    """Each leading-eigenvalue panel states how many approaches are crossings and repulsions, the counts of the
    verdict column of the table under it, singular for one; and nothing else is written on the tab. (Its one-line
    ``a() if both else b()`` was a bare expression: Streamlit's "magic" wrote its value, a stray ``None`` under the
    panels.)"""
    query = {"run": "induction-d128", "layer": "1", "head": "0", "both": both, "panel": "leading"}
    at = open_page("pages/head_explorer.py", query)
    assert not at.exception and not at.error
    lines = [m.value for m in at.markdown if "among λ_0" in m.value]
    tables = [d.value for d in at.dataframe if "verdict" in d.value.columns]
    assert len(lines) == len(tables) == (2 if both == "1" else 1)
    for line, table in zip(lines, tables, strict=True):
        for kind in ("crossing", "repulsion"):
            n = int((table["verdict"] == kind).sum())
            assert f"{n} {kind}{'' if n == 1 else 's'}" in line, (line, kind, n)
    assert [m.value for m in at.markdown if "None" in m.value] == []


def test_no_page_has_a_bare_expression_for_magic_to_write() -> None:
    """The app turns Streamlit's magic off (.streamlit/config.toml, runner.magicEnabled): a page that relied on it
    would lose what it writes. So no page states a value on its own line (a call, a docstring are not magic's)."""
    import ast

    found = []
    for path in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            blocks = [(field, getattr(node, field, None)) for field in ("body", "orelse", "finalbody")]
            for field, block in blocks:
                for i, stmt in enumerate(block if isinstance(block, list) else []):
                    if not isinstance(stmt, ast.Expr) or isinstance(stmt.value, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)):
                        continue
                    if field == "body" and i == 0 and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                        continue  # a docstring
                    found.append(f"{path.name}:{stmt.lineno} {ast.unparse(stmt)[:80]}")
    assert found == []
    import tomllib

    assert tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["runner"]["magicEnabled"] is False
