"""What a head does, end to end: the job writes the losses and ablation lenses on byte-level GPT-NeoX checkpoints
saved by transformers (`tests.integration.test_forward_lens.byte_run`), and the pages and the report show what the
store holds (each drawn value against the table read with pandas; the tables themselves are checked against
TransformerLens by the lens's own test)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.ablation import CONTEXTS_PER_HEAD
from tests.app.conftest import arr, chart, notices, open_page, serve_only
from tests.integration.conftest import run_cli
from tests.integration.test_forward_lens import byte_run

STEPS = [0, 1, 4]


@pytest.fixture(scope="module")
def job_store(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("job")
    run = byte_run(root, STEPS)
    out = root / "store"
    args = ["--lenses", "attention", "--lenses", "losses", "--lenses", "ablation", "--eval-sequences", "4", "--eval-length", "32"]
    done = run_cli("--source", str(run), "--out", str(out), *args)
    assert done.returncode == 0, done.stderr
    return out


def test_the_pages_draw_what_the_job_wrote(job_store, tmp_path, monkeypatch) -> None:
    serve_only(job_store, tmp_path, monkeypatch)
    store = open_store(job_store)
    icl = pd.read_parquet(job_store / "icl.parquet")
    ablation = pd.read_parquet(job_store / "ablation.parquet")
    contexts = pd.read_parquet(job_store / "head_contexts.parquet")

    timeline = open_page("pages/run_timeline.py")
    assert not timeline.error and not notices(timeline)
    fig = chart(timeline, "timeline_icl")
    for name in ("text", "probe"):
        drawn = next(t for t in fig["data"] if t.get("name") == f"{name} ICL score (nats)")
        want = icl[icl["set"] == name].sort_values("step")["score"].to_numpy()
        np.testing.assert_allclose(arr(drawn["y"]), want)

    last = int(store.steps[-1])
    at_last = ablation[ablation["step"] == last]
    top = at_last.sort_values("probe_increase", ascending=False).iloc[0]
    layer, head = int(top["layer"]), int(top["head"])
    heads = open_page("pages/heads_table.py", {"sort": "probe ablation", "desc": "1"}).dataframe[0].value
    assert (int(heads["layer"].iloc[0]), int(heads["head"].iloc[0])) == (layer, head)
    np.testing.assert_allclose(heads["probe ablation"].iloc[0], top["probe_increase"])

    does = open_page("pages/head_explorer.py", {"panel": "does", "layer": str(layer), "head": str(head)})
    assert not does.error and not notices(does)
    kept = sorted(int(s) for s in contexts["step"].unique())
    assert does.query_params["ctxstep"] == str(kept[-1])
    html = does.get("html")[0].proto.body
    mine = contexts[(contexts["step"] == kept[-1]) & (contexts["layer"] == layer) & (contexts["head"] == head)]
    assert html.count("<tr>") == 1 + len(mine) == 1 + CONTEXTS_PER_HEAD
    for value in mine["loss_increase"]:
        assert f"{value:+.3f}" in html
    drawn = next(t for t in chart(does, "head_ablation")["data"] if t.get("name") == "probe loss increase (nats)")
    want = ablation[(ablation["layer"] == layer) & (ablation["head"] == head)].sort_values("step")["probe_increase"]
    np.testing.assert_allclose(arr(drawn["y"]), want.to_numpy())


def test_the_report_gives_the_costliest_head_a_card(job_store, tmp_path) -> None:
    from headwatch.report import write_report

    path = write_report(job_store, tmp_path / "report")
    text = path.read_text()
    ablation = pd.read_parquet(job_store / "ablation.parquet")
    at_last = ablation[ablation["step"] == ablation["step"].max()]
    top = at_last.sort_values("probe_increase", ascending=False).iloc[0]
    name = f"L{int(top['layer'])} H{int(top['head'])}"
    assert "## In-context learning" in text and (tmp_path / "report" / "icl.svg").is_file()
    card = text[text.index(f"### {name}") :]
    assert card.split("\n\n", 2)[1].startswith("Why a card:") and "costs the probe most (1st" in card.split("\n\n", 2)[1]
    assert (tmp_path / "report" / f"card_L{int(top['layer'])}H{int(top['head'])}.svg").is_file()
