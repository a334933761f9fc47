"""The Head similarity page against its store: the matrices, the dendrogram order and the ultrametric shares equal
what similarity.parquet and ultrametricity.parquet hold (pandas and scipy here, not the page's code), and a click
on a cell opens its row's head (Chromium)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.cluster.hierarchy import dendrogram, linkage
from scipy.spatial.distance import squareform

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.similarity import SIMILARITY, SIMILARITY_STATS, ULTRAMETRICITY
from tests.app.conftest import DIMS, arr, chart, open_page, serve_only

PAGE = "pages/head_similarity.py"
L, H = DIMS["n_layers"], DIMS["n_heads"]


def _write(path) -> None:
    steps = [int(s) for s in open_store(path).steps]
    rng = np.random.default_rng(11)
    heads = [(a, b) for a in range(L) for b in range(H)]
    rows = []
    for step in steps:
        for i, (la, ha) in enumerate(heads):
            for lb, hb in heads[i + 1 :]:
                frob = rng.uniform(-0.4, 0.9)
                rows.append(
                    (step, la, ha, lb, hb, frob, *rng.uniform(0.05, 0.9, 2), rng.uniform(-0.4, 0.9), *rng.uniform(0.05, 0.9, 2))
                )
    frame = pd.DataFrame(rows, columns=["step", "layer_a", "head_a", "layer_b", "head_b", *SIMILARITY_STATS])
    pq.write_table(
        SIMILARITY.sorted(pa.Table.from_pandas(frame, schema=SIMILARITY.schema, preserve_index=False)), path / SIMILARITY.file
    )
    ultra = pd.DataFrame(
        [(step, layer, stat, 4, *rng.uniform(0, 1, 4)) for step in steps for layer in range(L) for stat in SIMILARITY_STATS],
        columns=ULTRAMETRICITY.schema.names,
    )
    table = pa.Table.from_pandas(ultra, schema=ULTRAMETRICITY.schema, preserve_index=False)
    pq.write_table(ULTRAMETRICITY.sorted(table), path / ULTRAMETRICITY.file)
    meta = json.loads((path / "meta.json").read_text())
    meta["similarity"] = {"tolerance": 0.1, "baseline": {"mean": {"frob": 0.0, "col": 0.25, "row": 0.25}}}
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def sim_store(store_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("similarity") / "similar-run"
    shutil.copytree(store_path, path)
    _write(path)
    return path


def _square(path, stat: str, step: int) -> np.ndarray:
    df = pd.read_parquet(path / SIMILARITY.file)
    df = df[df["step"] == step]
    m = np.eye(L * H)
    i, j = df["layer_a"] * H + df["head_a"], df["layer_b"] * H + df["head_b"]
    m[i, j] = m[j, i] = df[stat]
    return m


def test_every_head_against_every_head_is_the_stored_similarity(sim_store, tmp_path, monkeypatch):
    serve_only(sim_store, tmp_path, monkeypatch)
    step = int(open_store(sim_store).steps[4])
    at = open_page(PAGE, {"sim": "ov_col", "step": str(step)})
    square = _square(sim_store, "ov_col", step)
    d = np.sqrt(np.clip(1 - square, 0, None))  # the cosines' distance
    np.fill_diagonal(d, 0)
    leaves = dendrogram(linkage(squareform(d, checks=False), method="average"), no_plot=True)["leaves"]
    fig = chart(at, "similarity")
    assert leaves != list(range(L * H))  # the default view, ordered by the dendrogram (it was layer-major)
    assert fig["layout"]["yaxis"]["ticktext"] == [f"L{i // H} H{i % H}" for i in leaves]
    z = arr(fig["data"][0]["z"]).reshape(L * H, L * H)
    np.testing.assert_allclose(z, square[np.ix_(leaves, leaves)], rtol=1e-6)


def test_one_layer_is_ordered_by_scipys_dendrogram_of_its_distances(sim_store, tmp_path, monkeypatch):
    serve_only(sim_store, tmp_path, monkeypatch)
    last = int(open_store(sim_store).steps[-1])
    at = open_page(PAGE, {"sim": "qk_frob", "layer": "2"})
    block = _square(sim_store, "qk_frob", last)[2 * H : 3 * H, 2 * H : 3 * H]
    d = np.sqrt(np.clip(2 - 2 * block, 0, None))
    np.fill_diagonal(d, 0)
    leaves = dendrogram(linkage(squareform(d, checks=False), method="average"), no_plot=True)["leaves"]
    fig = chart(at, "similarity")
    assert fig["layout"]["yaxis"]["ticktext"] == [f"L2 H{h}" for h in leaves]
    z = arr(fig["data"][0]["z"]).reshape(H, H)
    np.testing.assert_allclose(z, block[np.ix_(leaves, leaves)], rtol=1e-6)


def test_ultrametric_shares_per_layer_and_their_random_baseline(sim_store, tmp_path, monkeypatch):
    serve_only(sim_store, tmp_path, monkeypatch)
    at = open_page(PAGE, {"sim": "qk_row", "xscale": "linear"})
    rows = pd.read_parquet(sim_store / ULTRAMETRICITY.file)
    traces = chart(at, "ultrametricity")["data"]
    for layer in range(L):
        mine = rows[(rows["distance"] == "qk_row") & (rows["layer"] == layer)].sort_values("step")
        line = next(t for t in traces if t["name"] == f"L{layer}")
        np.testing.assert_allclose(arr(line["y"]), mine["share"])
        base = next(t for t in traces if t["name"] == f"L{layer} random heads")
        np.testing.assert_allclose(arr(base["y"]), mine["baseline"])
    # what the shares mean, at the last step, from the table itself
    last = rows[(rows["distance"] == "qk_row") & (rows["step"] == rows["step"].max())].sort_values("layer")
    text = next(m.value for m in at.markdown if m.value.startswith("At step"))
    for r in last.itertuples(index=False):
        said = f"layer {r.layer}: {r.share:.2f} against {r.baseline:.2g} for random heads ("
        meaning = f"{r.share / r.baseline:.1f}× as often: nested families" if r.share > 2 * r.baseline else "no more hierarchy"
        assert said + meaning in text, (said, text)


def test_a_store_without_similarity_says_how_to_add_it(app_env):
    at = open_page(PAGE)
    assert any("--lenses similarity" in i.value for i in at.info)


@pytest.fixture(scope="module")
def sim_server(sim_store, tmp_path_factory):
    from tests.app.test_browser import _serve

    yield from _serve(sim_store, tmp_path_factory)


def test_a_click_on_a_cell_opens_its_rows_head(sim_server, chromium):
    from tests.app.test_browser import LOAD_TIMEOUT_MS, _wait_view

    page = chromium.new_page(viewport={"width": 1500, "height": 1900})
    try:
        page.goto(sim_server + "/similarity")
        _wait_view(page, "/similarity", "Head similarity", 2)
        xy = page.evaluate(
            """([rowName, colName]) => {
            const gd = document.querySelector('.st-key-similarity .js-plotly-plot');
            const names = gd._fullLayout.yaxis.ticktext;  // the heads in the matrix's (dendrogram) order
            const row = names.indexOf(rowName), col = names.indexOf(colName);
            const t = gd._fullData.find(t => t.name === 'pairs');
            const i = t.customdata.findIndex((c, j) => t.y[j] === row && t.x[j] === col);
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(t.x[i]), box.top + ya._offset + ya.l2p(t.y[i])];
        }""",
            ["L1 H3", "L2 H1"],
        )
        page.mouse.move(*xy)
        page.mouse.click(*xy)
        page.wait_for_function(
            "() => location.pathname.endsWith('/head') && location.search.includes('layer=1') "
            "&& location.search.includes('head=3')",
            timeout=LOAD_TIMEOUT_MS,
        )
    finally:
        page.close()


def test_a_layer_the_model_lacks_names_the_allowed_layers_plainly(sim_store, tmp_path, monkeypatch):
    """``layer=7`` on a 4-layer model: the notice names the layers 0 to 3 and says -1 is every head (it read "-1-3",
    then "-1 to 3" with -1 unexplained)."""
    serve_only(sim_store, tmp_path, monkeypatch)
    at = open_page(PAGE, {"layer": "7"})
    text = " ".join(w.value for w in at.warning)
    assert f"allowed: 0 to {L - 1}, or -1 for every head); showing layer=-1 (every head)." in text, text
