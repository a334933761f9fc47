"""What a head does, through AppTest: the ICL scores on the Timeline and the Forward lenses, the head explorer's tabs
"What this head does" and "Head card", the Heads table's ablation columns, on a copy of the shipped run
induction-d128 given the planted tables of `tests.app.planted_ablation` (every drawn value against the fixture's closed
forms); on a shipped store without the lenses (induction-d512) every panel says so and names the command; and the
rebuilt induction-d128's own ablations in the Heads table."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.store import open_store
from tests.app.conftest import ROOT, arr, chart, notices, open_page, serve_only
from tests.app.planted_ablation import (
    PROBE_FALL,
    PROBE_HEAD,
    TEXT_HEAD,
    add_planted_ablation,
    induction_boundary_step,
    planted_probe_increase,
    planted_text_increase,
    probe_icl,
)
from tests.app.planted_ablation import context_steps as planted_context_steps

SHIPPED = ROOT / "data" / "induction-d128"
WITHOUT_LENSES = ROOT / "data" / "induction-d512"  # a shipped store made before the losses and ablation lenses
TIMELINE, LENSES, HEAD, HEADS = (
    "pages/run_timeline.py",
    "pages/forward_lenses.py",
    "pages/head_explorer.py",
    "pages/heads_table.py",
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("does") / "induction-d128"
    shutil.copytree(SHIPPED, path)
    return add_planted_ablation(path)


@pytest.fixture()
def planted_env(planted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return serve_only(planted, tmp_path, monkeypatch)


def _trace(fig: dict, name: str) -> dict:
    return next(t for t in fig["data"] if t.get("name") == name)


def _captions(at) -> str:
    return " ".join(c.value for c in at.caption)


@pytest.mark.parametrize(("page", "query", "key"), [(TIMELINE, {}, "timeline_icl"), (LENSES, {"panel": "icl"}, "lenses_icl")])
def test_the_icl_scores_are_drawn_with_their_fall_and_the_induction_boundary(planted_env: Path, page, query, key) -> None:
    at = open_page(page, query)
    assert not at.error and not notices(at)
    store = open_store(planted_env)
    fig = chart(at, key)
    probe = _trace(fig, "probe ICL score (nats)")
    np.testing.assert_allclose(arr(probe["y"]), probe_icl(len(store.steps)))
    band = _trace(fig, "probe ICL score (nats): ± 1 s.e.")  # the band's lower edge: one standard error below
    np.testing.assert_allclose(arr(band["y"]), probe_icl(len(store.steps)) - 0.02)
    text = _trace(fig, "text ICL score (nats)")
    np.testing.assert_allclose(arr(text["y"]), -0.05 * np.arange(len(store.steps)))
    # the probe's sharpest fall, between the planted checkpoints, as a shaded interval; the boundary as a dotted line
    a, b = int(store.steps[PROBE_FALL - 1]), int(store.steps[PROBE_FALL])
    rects = [s for s in fig["layout"]["shapes"] if s["type"] == "rect" and s.get("line", {}).get("dash") == "dash"]
    assert any(np.isclose(s["x0"], a + 1) or np.isclose(s["x0"], a) for s in rects), rects
    labels = [x["text"] for x in fig["layout"]["annotations"]]
    assert "probe ICL score: sharpest fall" in labels and "induction heads form" in labels
    caption = _captions(at)
    assert f"steps {a:,} → {b:,} (−1.8 ± 0.028 nats)" in caption
    assert f"induction heads form at the stage boundary at step {induction_boundary_step(planted_env):,}" in caption
    assert "position 62 minus at position 5" in caption


def test_what_this_head_does_shows_its_contexts_and_its_ablation_over_training(planted_env: Path) -> None:
    store = open_store(planted_env)
    steps = planted_context_steps([int(s) for s in store.steps])
    layer, head = PROBE_HEAD
    at = open_page(HEAD, {"panel": "does", "layer": str(layer), "head": str(head)})
    assert not at.error and not notices(at)
    assert at.query_params["ctxstep"] == str(steps[-1])  # the last step kept, by default
    html = at.get("html")[0].proto.body
    assert html.count("<tr>") == 21 and "probe, 2nd copy" in html and "+1.950" in html
    assert "100% of them are second-copy tokens" in _captions(at)
    fig = chart(at, "head_ablation")
    n = len(store.steps)
    probe = _trace(fig, "probe loss increase (nats)")
    planted_probe = [planted_probe_increase(t, layer, head, n_steps=n, n_heads=store.n_heads) for t in range(n)]
    np.testing.assert_allclose(arr(probe["y"]), planted_probe)
    text = _trace(fig, "text loss increase (nats)")
    np.testing.assert_allclose(arr(text["y"]), [planted_text_increase(t, layer, head, n_heads=store.n_heads) for t in range(n)])
    # the ICL scores with the head ablated (the fixture's intact score plus the head's increase) beside the intact ones
    icl = chart(at, "head_icl")
    ablated = _trace(icl, f"probe ICL score, L{layer}H{head} ablated (nats)")
    np.testing.assert_allclose(arr(ablated["y"]), probe_icl(n) + np.array(planted_probe))
    intact = _trace(icl, "probe ICL score, intact (nats)")
    np.testing.assert_allclose(arr(intact["y"]), probe_icl(n))
    assert intact["line"]["dash"] == "dot" and ablated["line"]["dash"] == "solid"
    # the other step kept: picked in the widget, it moves into the URL and the mark
    at.selectbox(key="ctxstep").set_value(steps[0]).run()
    assert at.query_params["ctxstep"] == str(steps[0])
    assert any(f"step {steps[0]:,}" in x["text"] for x in chart(at, "head_ablation")["layout"]["annotations"])
    # a link's step that is not kept: the last one, and the project's notice quoting it
    bad = open_page(HEAD, {"panel": "does", "ctxstep": "12345"})
    assert any("`ctxstep=12345` is not valid here" in n for n in notices(bad))
    assert bad.query_params["ctxstep"] == str(steps[-1])


def test_the_head_card_gathers_what_the_store_knows(planted_env: Path) -> None:
    at = open_page(HEAD, {"panel": "card", "layer": "1", "head": "6"})
    assert not at.error and not notices(at)
    does = open_page(HEAD, {"panel": "does", "layer": "1", "head": "6"})  # its tab owns ctxstep alone (page.OWNS)
    assert set(does.query_params.keys()) - set(at.query_params.keys()) == {"ctxstep"}
    assert set(at.query_params.keys()) <= set(does.query_params.keys())
    text = " ".join(m.value for m in at.markdown)
    # the store's estimates, named by their distribution: the training one where llc.parquet holds it, else the text
    llc = pd.read_parquet(planted_env / "llc.parquet").query("layer == 1 and head == 6")
    if "data" in llc.columns:
        llc = llc[llc["data"] == ("train" if (llc["data"] == "train").any() else "text")]
    words = "on the training distribution" if "data" in llc.columns and (llc["data"] == "train").all() else "on held-out text"
    for part in (
        "**Types**",
        "induction from step",
        "**Ablation**",
        "**Tokens in context**",
        f"**Refined LLC {words}**",
        "**Composition**",
    ):
        assert part in text, part
    store = open_store(planted_env)
    n = len(store.steps)
    ablated = _trace(chart(at, "card_ablation"), "probe loss increase (nats)")
    want = [planted_probe_increase(t, 1, 6, n_steps=n, n_heads=store.n_heads) for t in range(n)]
    np.testing.assert_allclose(arr(ablated["y"]), want)
    llc = llc.sort_values("step")
    llc = llc[llc["step"].isin(store.steps) & llc["llc"].notna()]
    drawn = _trace(chart(at, "card_llc"), f"refined LLC {words} (± chains' s.d.)")
    np.testing.assert_allclose(arr(drawn["y"]), llc["llc"].to_numpy())


def test_the_heads_table_has_the_ablation_columns_and_sorts_by_them(planted_env: Path) -> None:
    store = open_store(planted_env)
    n = len(store.steps)
    at = open_page(HEADS, {"sort": "probe ablation", "desc": "1"})
    assert not at.error
    table = at.dataframe[0].value
    assert (int(table["layer"].iloc[0]), int(table["head"].iloc[0])) == PROBE_HEAD
    assert table["open"].str.endswith("&panel=does").all()  # sorted by what the loss needs: a row opens what it does
    assert open_page(HEADS).dataframe[0].value["open"].str.endswith("&panel=statistic").all()
    columns = list(table.columns)  # beside the rank, in view without scrolling
    assert columns[columns.index("rank") + 1 : columns.index("rank") + 5] == [
        "probe ablation",
        "± probe",
        "text ablation",
        "± text",
    ]
    for layer, head, value in zip(table["layer"], table["head"], table["probe ablation"], strict=True):
        assert value == pytest.approx(planted_probe_increase(n - 1, int(layer), int(head), n_steps=n, n_heads=store.n_heads))
    by_text = open_page(HEADS, {"sort": "text ablation", "desc": "1", "step": str(int(store.steps[3]))}).dataframe[0].value
    assert (int(by_text["layer"].iloc[0]), int(by_text["head"].iloc[0])) == TEXT_HEAD
    assert by_text["text ablation"].iloc[0] == pytest.approx(planted_text_increase(3, *TEXT_HEAD, n_heads=store.n_heads))


@pytest.mark.parametrize(
    ("page", "query", "command"),
    [
        (TIMELINE, {}, "--lenses losses"),
        (LENSES, {"panel": "icl"}, "--lenses losses"),
        (HEAD, {"panel": "does"}, "--lenses ablation"),
        (HEAD, {"panel": "card"}, "--lenses ablation"),
        (HEADS, {}, "--lenses ablation"),
    ],
)
def test_the_shipped_store_without_the_lenses_says_what_adds_them(page, query, command, tmp_path, monkeypatch) -> None:
    """A shipped store made before the losses and ablation lenses (the GPU-built induction-d512): every panel of theirs
    says so and names the command."""
    assert not (WITHOUT_LENSES / "ablation.parquet").exists() and not (WITHOUT_LENSES / "icl.parquet").exists()
    serve_only(WITHOUT_LENSES, tmp_path, monkeypatch)
    at = open_page(page, query)
    assert not at.error and not at.exception
    said = " ".join([i.value for i in at.info] + [c.value for c in at.caption] + [m.value for m in at.markdown])
    assert command in said


def test_the_heads_table_names_the_stores_ablation_method(planted: Path, tmp_path: Path, monkeypatch) -> None:
    """The ablation columns and the caption say how the store's heads were ablated (meta.json ``ablation`` method),
    not a fixed "mean-ablated"."""
    import json

    zero = tmp_path / "induction-d128"
    shutil.copytree(planted, zero)
    meta = json.loads((zero / "meta.json").read_text())
    record = meta["records"]["ablation"] if "records" in meta else meta["ablation"]
    assert record["method"] == "mean"
    record["method"] = "zero"
    (zero / "meta.json").write_text(json.dumps(meta))
    serve_only(zero, tmp_path, monkeypatch)
    at = open_page(HEADS, {"sort": "probe ablation", "desc": "1"})
    assert not at.error
    caption = " ".join(c.value for c in at.caption)
    assert "when the head's output is replaced by zero at this step" in caption
    assert "replaced by its mean" not in caption


def test_the_heads_tables_ablation_columns_are_the_shipped_stores(tmp_path: Path, monkeypatch) -> None:
    """The rebuilt induction-d128 carries the ablation lens: sorted by the probe's ablation, the Heads table at the
    last step lists the heads in the order of ablation.parquet's probe increase (read with pandas), with its values
    and standard errors on the probe and on the text."""
    serve_only(SHIPPED, tmp_path, monkeypatch)
    stored = pd.read_parquet(SHIPPED / "ablation.parquet")
    last = int(stored["step"].max())
    stored = stored[stored["step"] == last].sort_values("probe_increase", ascending=False)
    at = open_page(HEADS, {"sort": "probe ablation", "desc": "1", "step": str(last)})
    assert not at.error and not at.exception
    table = at.dataframe[0].value
    assert list(zip(table["layer"].astype(int), table["head"].astype(int), strict=True)) == list(
        zip(stored["layer"].astype(int), stored["head"].astype(int), strict=True)
    )
    for column, name in (
        ("probe ablation", "probe_increase"),
        ("± probe", "probe_increase_sem"),
        ("text ablation", "text_increase"),
        ("± text", "text_increase_sem"),
    ):
        np.testing.assert_allclose(table[column].to_numpy(np.float64), stored[name].to_numpy(), rtol=1e-6, err_msg=column)
