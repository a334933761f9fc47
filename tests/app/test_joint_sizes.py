"""The joint trajectory map of several runs (issue 43) through AppTest, on the synthetic ladder of
``tests/unit/test_compare_cli.py`` (three runs with head types): the heads filled by run, by type and by joint
cluster, and the joint clusters' association with the types and the runs, checked against the store files (pandas)
and scikit-learn's AMI of the clusters the map shows."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_mutual_info_score

from headwatch.analysis.across_sizes.joint_clusters import TESTS
from headwatch.analysis.trajectories.significance import DECISION_WORDS
from headwatch.dashboard import style
from headwatch.dashboard.views.trajectories.data.maps import TYPE_COLOURS
from tests.app.conftest import chart, open_page
from tests.unit.test_compare_cli import write_ladder

TRAJ = "pages/trajectory_map.py"
RUN, OTHERS = "tiny-d64", ["tiny-d32", "tiny-d64-seed2"]


def _pca(x, settings):  # stands in for UMAP: deterministic, no numba compilation
    u, s, _ = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
    return u[:, :2] * s[:2]


@pytest.fixture(scope="module")
def ladder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("joint") / "data"
    write_ladder(root)
    return root


@pytest.fixture()
def ladder(ladder_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import headwatch.analysis.trajectories.maps as trajectories

    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(ladder_dir))
    monkeypatch.setattr(trajectories, "umap_embed", _pca)
    return ladder_dir


def _open(colour: str):
    at = open_page(TRAJ, {"run": RUN, "joint": OTHERS, "stat": "std", "colour": colour})
    if at.button:  # the joint map is computed on request (cached per server process)
        at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _heads(at) -> list[dict]:
    return [t for t in chart(at, "trajectory_map")["data"] if (t.get("meta") or {}).get("kind") == "heads"]


def end_types(path: Path) -> list[str]:
    """Each head's type label at the last checkpoint, layer-major, read from head_types.parquet with pandas."""
    frame = pd.read_parquet(path / "head_types.parquet")
    last = frame[frame["step"] == frame["step"].max()]
    held = last[last["holds"]].groupby(["layer", "head"])["type"].apply(lambda t: "+".join(sorted(t)))
    return [held.get((layer, head), "none") for layer in range(2) for head in range(3)]


def test_joint_map_fills_heads_by_type_and_by_run(ladder: Path) -> None:
    at = _open("type")
    drawn = _heads(at)
    assert [t["meta"]["run"] for t in drawn] == [RUN, *OTHERS]
    for t in drawn:
        want = [TYPE_COLOURS[label] for label in end_types(ladder / t["meta"]["run"])]
        assert list(t["marker"]["color"]) == want
        assert "type at the end of training: %{text}" in t["hovertemplate"]
    legend = [t["name"] for t in chart(at, "trajectory_map")["data"] if (t.get("meta") or {}).get("kind") == "group"]
    assert set(legend) == {label for run in [RUN, *OTHERS] for label in end_types(ladder / run)}
    assert "the fill by head type at the end of training" in " ".join(c.value for c in at.caption)

    at = _open("run")
    for i, t in enumerate(_heads(at)):
        assert set(t["marker"]["color"]) == {style.run_colour(i)}


def test_joint_clusters_and_their_association_with_types_and_runs(ladder: Path) -> None:
    at = _open("cluster")
    clusters, types, runs = [], [], []
    for t in _heads(at):
        clusters += [int(re.sub(r"\D", "", name)) for name in t["text"]]  # "joint cluster 2"
        types += end_types(ladder / t["meta"]["run"])
        runs += [t["meta"]["run"]] * len(t["text"])
    text = " ".join(m.value for m in at.markdown)
    assert f"asked of {', '.join(sorted([RUN, *OTHERS]))}" in text and "joint clusters of 18 heads" in text, text
    tests = next(d.value for d in at.dataframe if "test" in d.value.columns).set_index("test")
    assert tests.loc[TESTS["types"], "AMI or gain"] == pytest.approx(adjusted_mutual_info_score(types, clusters), abs=1e-9)
    assert tests.loc[TESTS["runs"], "AMI or gain"] == pytest.approx(adjusted_mutual_info_score(runs, clusters), abs=1e-9)
    assert set(tests.index) == set(TESTS.values()) and (tests["Holm over"] == "4 statistics").all()
    caption = " ".join(c.value for c in at.caption)
    assert "Holm's correction over the 4 statistics" in caption and "Monte Carlo" in caption
    counts = next(d.value for d in at.dataframe if "joint cluster" in d.value.columns)
    assert list(counts["joint cluster"]) == sorted(set(clusters))
    for run in [RUN, *OTHERS]:
        per = [sum(1 for c, r in zip(clusters, runs, strict=True) if c == k and r == run) for k in counts["joint cluster"]]
        assert list(counts[run]) == per


def test_compare_runs_says_across_sizes_what_headwatch_compare_writes(ladder: Path) -> None:
    at = open_page("pages/compare_runs.py", {"runs": [RUN, *OTHERS], "stat": "std"})
    assert not at.exception
    tables = [el.value for el in at.dataframe]
    runs = next(t for t in tables if "parameters" in t.columns).set_index("run")
    for run in [RUN, *OTHERS]:
        emergence = pd.read_parquet(ladder / run / "head_emergence.parquet")
        first = emergence.groupby("type")["emergence_step"].min()
        assert runs.loc[run, "previous-token first step"] == first["previous_token"]
        if "induction" in first:
            assert runs.loc[run, "induction first step"] == first["induction"]
        else:
            assert pd.isna(runs.loc[run, "induction first step"])
    joint = next(t for t in tables if "test" in t.columns)
    consolidation = next(t for t in tables if "σ of the entries" in t.columns)
    assert len(joint) == 4 * 4 and set(consolidation["run"]) == {RUN, *OTHERS}  # four tests of four statistics
    assert set(joint["verdict"]) <= {*DECISION_WORDS.values(), "not tested"}
    words = " ".join(m.value for m in at.markdown)
    assert "first induction emergence, in steps: no fit. 1 model size" in words and "N^" not in words
    spec = chart(at, "sizes_scaling")
    assert spec["layout"]["xaxis"]["title"]["text"] == "non-embedding parameters (log)"
    assert spec["layout"]["yaxis"]["title"]["text"] == "training step (log)"


def test_every_timescale_on_the_scaling_chart_has_a_colour_and_a_marker_of_its_own(ladder: Path) -> None:
    """The ladder's runs give ten timescales (two head types' emergence, four statistics' first and last layers);
    the chart cycled eight run colours and symbols, so the ninth and tenth repeated the first two (induction
    emergence and a consolidation both red diamonds)."""
    at = open_page("pages/compare_runs.py", {"runs": [RUN, *OTHERS], "stat": "std"})
    assert not at.exception
    series = [t for t in chart(at, "sizes_scaling")["data"] if t.get("mode") == "markers"]
    assert len(series) == 10, [t["name"] for t in series]
    colours = [t["marker"]["color"] for t in series]
    symbols = [t["marker"]["symbol"] for t in series]
    assert len(set(colours)) == len(series), list(zip([t["name"] for t in series], colours, strict=True))
    assert len(set(symbols)) == len(series), list(zip([t["name"] for t in series], symbols, strict=True))


def test_the_joint_clusters_have_colours_no_run_has(ladder: Path) -> None:
    """Filled by joint cluster, the map's colours are the clusters' alone: none is a run's colour (the runs are told
    apart by their marker symbols, every head outlined in one grey)."""
    at = _open("cluster")
    spec = chart(at, "trajectory_map")
    swatches = [t["marker"]["color"] for t in spec["data"] if (t.get("meta") or {}).get("kind") == "group"]
    assert len(swatches) >= 2 and len(set(swatches)) == len(swatches)
    runs = {c.lower() for c in style.RUN_COLOURS}
    assert not runs & {c.lower() for c in swatches}, swatches
    for t in _heads(at):
        assert set(t["marker"]["color"]) <= set(swatches)
        assert t["marker"]["line"]["color"].lower() not in runs | {c.lower() for c in swatches}
    symbols = [t["marker"]["symbol"] for t in _heads(at)]
    assert len(set(symbols)) == len(symbols) == 3


# --- the runs joined with the map, as a link names them (issue 63) ---------------------------------------------------


def _notices(at) -> str:
    return " ".join(w.value for w in at.warning)


def test_a_link_naming_the_pages_own_run_among_the_joined_ones_loses_that_run_alone(ladder: Path) -> None:
    at = open_page(TRAJ, {"run": RUN, "joint": [RUN, OTHERS[1]], "stat": "std"})
    assert at.multiselect(key="joint").value == [OTHERS[1]]
    assert at.query_params["joint"] in (OTHERS[1], [OTHERS[1]])
    text = _notices(at)
    assert f"`joint={RUN}` is this page's own run" in text and "left out of the runs joined with it" in text, text
    assert "not valid here" not in text, text  # it is a run, only not one to join with itself

    at = open_page(TRAJ, {"run": RUN, "joint": RUN, "stat": "std"})  # only the own run: a map of this run alone
    assert at.multiselect(key="joint").value == [] and "joint" not in at.query_params
    assert f"`joint={RUN}` is this page's own run" in _notices(at) and "default" not in _notices(at)


def test_picking_a_joined_run_in_the_sidebar_keeps_the_other_joined_runs(ladder: Path) -> None:
    at = open_page(TRAJ, {"run": RUN, "joint": OTHERS, "stat": "std"})
    assert at.multiselect(key="joint").value == OTHERS and not _notices(at)
    at.selectbox(key="run").set_value(OTHERS[0]).run()  # a run joined with the map becomes the page's own
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="joint").value == [OTHERS[1]]  # it alone leaves the joined runs (all of them did)
    assert at.query_params["joint"] in (OTHERS[1], [OTHERS[1]]) and at.query_params["run"] in (OTHERS[0], [OTHERS[0]])
    assert f"`joint={OTHERS[0]}` is this page's own run" in _notices(at), _notices(at)
    at.run()  # said once, on the run that left it out
    assert at.multiselect(key="joint").value == [OTHERS[1]] and "own run" not in _notices(at)


def test_a_run_the_link_repeats_in_joint_is_joined_once_with_a_notice(ladder: Path) -> None:
    at = open_page(TRAJ, {"run": RUN, "joint": [OTHERS[0], OTHERS[1], OTHERS[0], OTHERS[0]], "stat": "std"})
    assert at.multiselect(key="joint").value == OTHERS
    assert f"The link repeats `joint={OTHERS[0]}` (3 times): each is shown once." in _notices(at), _notices(at)


# --- the shipped ladder: the same figures on the page, the joint map and the command line, in any order (issue 62) ---

LADDER = ["induction-d64", "induction-d128", "induction-d256", "induction-d512"]


@pytest.fixture()
def shipped(monkeypatch: pytest.MonkeyPatch) -> Path:
    import headwatch.analysis.trajectories.maps as trajectories
    from tests.conftest import SHIPPED_DATA

    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.delenv("STORE_REPO", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(SHIPPED_DATA))
    monkeypatch.setattr(trajectories, "umap_embed", _pca)
    return SHIPPED_DATA


def test_compare_runs_and_the_joint_map_print_the_commands_figures_for_the_runs_in_any_order(shipped: Path) -> None:
    """Across sizes on Compare runs, for the four sizes in two orders, is the table `headwatch compare` writes (its
    figures computed here from the stores, with the stores in a third order); the joint map of stable rank shows its
    rows. Before, the page sorted nothing and k-means' random starts were drawn by row: spectral entropy's AMI with
    the runs was 0.184 in one order and 0.135 in the other."""
    from headwatch.analysis.findings import sizes
    from headwatch.analysis.store import open_store

    stores = {n: open_store(shipped / n) for n in [LADDER[2], LADDER[0], LADDER[3], LADDER[1]]}
    want = sizes.association_table({s: sizes.store_joint_clusters(stores, s).association for s in sizes.SIZE_STATS})
    for order in (LADDER, LADDER[::-1]):
        at = open_page("pages/compare_runs.py", {"runs": order, "stat": "std"})
        joint = next(d.value for d in at.dataframe if "test" in d.value.columns)
        pd.testing.assert_frame_equal(joint.reset_index(drop=True), want)
        words = " ".join(m.value for m in at.markdown)
        assert f"asked of {', '.join(LADDER)}" in words, words
    at = open_page(TRAJ, {"run": LADDER[0], "joint": LADDER[1:], "stat": "stable_rank", "colour": "cluster"})
    if at.button:
        at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    shown = next(d.value for d in at.dataframe if "test" in d.value.columns).reset_index(drop=True)
    mine = want[want["statistic"] == "stable rank"].drop(columns=["statistic"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(shown, mine)


def test_the_trajectory_maps_table_corrects_each_run_as_the_report_does(ladder: Path, tmp_path: Path) -> None:
    """Each run's p-values on the Trajectory map are corrected by Holm over the statistics tested in that run (its
    rows and the study's statistics of the other matrix): the same adjusted p-values `headwatch report` writes."""
    from headwatch.analysis.trajectories.type_association import ASSOCIATION_STATS
    from headwatch.cli import main
    from headwatch.dashboard.labels import STATS

    at = open_page(TRAJ, {"run": RUN, "stat": "std"})
    if at.button:  # the map is computed on request
        at.button[0].click().run()
    table = next(d.value for d in at.dataframe if "p over heads, Holm" in d.value.columns)
    others = [arg for o in OTHERS for arg in ("--replicate", str(ladder / o))]
    assert main(["report", str(ladder / RUN), "--out", str(tmp_path / "out"), *others]) == 0
    text = (tmp_path / "out" / "report.md").read_text().split("## Do the trajectory clusters correspond")[1]
    rows = [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    head, body = rows[0], rows[1:]
    report = {(r[head.index("statistic")], r[head.index("run")]): r for r in body}
    names = {STATS[s].short(): s for s in ASSOCIATION_STATS}
    checked = 0
    for _, row in table.iterrows():
        assert np.isfinite(row["AMI"])
        cells = report[(f"{names[row['statistic']]} of W_QK", row["run"])]
        over, within = cells[head.index("p, Holm (over heads, within layers)")].split(", ")
        assert (over, within) == (f"{row['p over heads, Holm']:.4f}", f"{row['p within layers, Holm']:.4f}")
        assert cells[head.index("Holm over")] == row["Holm over"]
        checked += 1
    assert checked == 4 * 3  # the four statistics of W_QK in each of the three runs
