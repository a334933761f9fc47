"""The trajectory map answers the study's open question: clusters of trajectories against head types.

A copy of the synthetic test store gets a head_types.parquet whose last checkpoint types the heads in a known
pattern; the page's association table must hold scikit-learn's AMI of those types against the clusters it
shows, the map coloured by type must put each head in its type's trace, and a click on a head of a type trace
must open that head (Chromium).
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import adjusted_mutual_info_score

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.types import HEAD_TYPES, HEAD_TYPES_TABLE
from headwatch.analysis.trajectories.type_association import cluster_trajectories
from tests.app.conftest import DIMS, arr, chart, open_page, serve_only

TRAJ = "pages/trajectory_map.py"
N_LAYERS, N_HEADS = DIMS["n_layers"], DIMS["n_heads"]
# type of head (layer, head) at the last checkpoint: layer 0 sinks, heads 1 of layers 1-2 previous-token,
# head 2 of layer 3 induction, and L1 H1 also a sink
PATTERN = {(0, h): {"sink"} for h in range(N_HEADS)} | {(1, 1): {"previous_token", "sink"}, (2, 1): {"previous_token"}}
PATTERN |= {(3, 2): {"induction"}}


def expected_label(layer: int, head: int) -> str:
    held = PATTERN.get((layer, head), set())
    return "+".join(t for t in HEAD_TYPES if t in held) or "none"


def write_types(path) -> None:
    """head_types.parquet at every checkpoint of the store: the PATTERN at the last, nothing before."""
    store = open_store(path)
    steps = [int(s) for s in store.steps]
    rows: dict[str, list[object]] = {c: [] for c in HEAD_TYPES_TABLE.schema.names}
    for step in steps:
        for layer in range(N_LAYERS):
            for head in range(N_HEADS):
                for name in HEAD_TYPES:
                    on = step == steps[-1] and name in PATTERN.get((layer, head), set())
                    for c, v in zip(
                        rows, (step, layer, head, name, 0.5 if on else 0.01, 0.01, 50.0 if on else 1.0, on, on), strict=True
                    ):
                        rows[c].append(v)
    pq.write_table(HEAD_TYPES_TABLE.sorted(pa.table(rows, schema=HEAD_TYPES_TABLE.schema)), path / HEAD_TYPES_TABLE.file)


@pytest.fixture(scope="module")
def typed_store(store_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("typed") / "typed-run"
    shutil.copytree(store_path, path)
    write_types(path)
    return path


def test_the_table_gives_scikit_learns_ami_of_the_types_against_the_shown_clusters(typed_store, tmp_path, monkeypatch):
    serve_only(typed_store, tmp_path, monkeypatch)
    at = open_page(TRAJ, {"stat": "std", "colour": "cluster"})
    table = at.dataframe[-1].value
    row = table[table["statistic"] == "σ"].iloc[0] if (table["statistic"] == "σ").any() else None
    store = open_store(typed_store)
    labels = np.array([expected_label(lay, hd) for lay in range(N_LAYERS) for hd in range(N_HEADS)])
    clusters, k, _ = cluster_trajectories(store.array("std"))
    assert row is not None, table["statistic"].tolist()
    assert row["clusters (k)"] == k
    assert row["AMI"] == pytest.approx(adjusted_mutual_info_score(labels, clusters))
    assert 0 < row["p (shuffled over heads)"] <= 1 and 0 < row["p (shuffled within layers)"] <= 1
    assert row["types at step"] == int(store.steps[-1])
    # the map coloured by cluster: each cluster trace holds exactly that cluster's heads
    fig = chart(at, "trajectory_map")
    for c in range(k):
        trace = next(t for t in fig["data"] if t["name"].startswith(f"cluster {c + 1} "))
        got = {(int(a), int(b)) for a, b, *_ in arr(trace["customdata"]).reshape(-1, 3)}
        assert got == {(i // N_HEADS, i % N_HEADS) for i in np.flatnonzero(clusters == c)}


def test_the_reading_asks_the_runs_replicate_or_says_how_to_make_one(typed_store, tmp_path, monkeypatch):
    """Issue 62: on the shipped induction-d128 among every shipped run, the sentence above the table asks its second
    seed alone, named, and the table says each run's recipe; a run alone gives the command that trains a replicate."""
    from tests.app.conftest import ROOT

    monkeypatch.delenv("HEADWATCH_STORE", raising=False)
    monkeypatch.setenv("HEADWATCH_DATA", str(ROOT / "data"))
    at = open_page(TRAJ, {"run": "induction-d128", "stat": "kl_gauss"})
    assert not at.exception
    reading = " ".join(m.value for m in at.markdown if m.value.startswith("**D_KL"))
    # issue 62: read from each seed's Holm decision (on the GPU-built stores: no association shown in seed 1234, where
    # it read "associated", p < 0.05), the decisions computed here apart from the page (`tests.replication`)
    from tests import replication

    assert (
        "Replication, asked of this run's replicate `induction-d128-seed2` (the same recipe, another seed), read from "
        "each run's decision over heads after Holm's correction."
    ) in reading
    pair = ("kl_gauss", "qk")
    decisions = [replication.decisions(ROOT / "data" / run)[pair] for run in ("induction-d128", "induction-d128-seed2")]
    assert replication.verdicts(reading, {pair: replication.page_name(pair)}) == {pair: replication.rule(decisions)}
    assert "Across the" not in reading and "The table's other runs (induction-d256, " in reading
    table = at.dataframe[-1].value
    recipe = dict(zip(table["run"], table["recipe"], strict=False))
    assert recipe["induction-d128"] == "this run" and recipe["induction-d128-seed2"] == "the same recipe, seed 2"
    serve_only(typed_store, tmp_path, monkeypatch)
    alone = open_page(TRAJ, {"stat": "std"})
    said = " ".join(m.value for m in alone.markdown if m.value.startswith("**σ"))
    assert "Whether it replicates is not asked. No replicate of `" in said and "--seed " in said


def test_colour_by_type_puts_every_head_in_its_types_trace(typed_store, tmp_path, monkeypatch):
    serve_only(typed_store, tmp_path, monkeypatch)
    at = open_page(TRAJ, {"colour": "type"})
    fig = chart(at, "trajectory_map")
    seen = {}
    for trace in fig["data"]:
        if trace.get("customdata") is None or trace["name"] in ("highlighted head",):
            continue
        label = trace["name"].rsplit(" (", 1)[0]
        for a, b, *_ in arr(trace["customdata"]).reshape(-1, 3):
            seen[(int(a), int(b))] = label
    assert seen == {(lay, hd): expected_label(lay, hd) for lay in range(N_LAYERS) for hd in range(N_HEADS)}
    assert any("type" in c.value and "step" in c.value for c in at.caption)


def test_a_store_without_types_says_how_to_add_them(app_env):
    at = open_page(TRAJ)
    assert any("headwatch.precompute.lenses.types" in i.value for i in at.info)
    assert "type" not in [o for o in at.selectbox(key="colour").options]


@pytest.fixture(scope="module")
def typed_server(typed_store, tmp_path_factory):
    from tests.app.test_browser import _serve

    yield from _serve(typed_store, tmp_path_factory)


def test_a_click_on_a_typed_head_opens_that_head(typed_server, chromium):
    from tests.app.test_browser import LOAD_TIMEOUT_MS, _wait_view

    page = chromium.new_page(viewport={"width": 1500, "height": 1900})
    try:
        page.goto(typed_server + "/trajectories?colour=type")
        _wait_view(page, "/trajectories", "Trajectory map", 2)
        xy = page.evaluate(
            """([layer, head]) => {
            const gd = document.querySelector('.st-key-trajectory_map .js-plotly-plot');
            for (const t of gd._fullData) {
                if (!t.customdata || !t.name.startsWith('induction')) continue;
                const i = t.customdata.findIndex(c => c[0] === layer && c[1] === head);
                if (i < 0) continue;
                const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
                return [box.left + xa._offset + xa.l2p(t.x[i]), box.top + ya._offset + ya.l2p(t.y[i])];
            }
            return null;
        }""",
            [3, 2],
        )
        assert xy is not None, "no induction trace holding L3 H2"
        page.mouse.move(*xy)
        page.mouse.click(*xy)
        page.wait_for_function(
            "() => location.pathname.endsWith('/head') && location.search.includes('layer=3') "
            "&& location.search.includes('head=2')",
            timeout=LOAD_TIMEOUT_MS,
        )
        assert "layer=3" in page.url and "head=2" in page.url
    finally:
        page.close()
