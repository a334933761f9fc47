"""What the views and the report read of the losses and ablation lenses (`analysis.findings.ablation`) and the head
cards (`analysis.findings.cards`), on a copy of the shipped run induction-d128 given the planted tables of
`tests.app.planted_ablation`: every value against the fixture's closed forms, the partners against a pandas scan of
composition.parquet, the types against head_emergence.parquet read directly."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headwatch.analysis.findings.ablation import (
    ablation_effect,
    context_steps,
    contexts_csv,
    head_contexts,
    icl_rows,
    icl_scores,
    second_copy_share,
)
from headwatch.analysis.findings.cards import card_heads, card_markdown, head_card, window_text
from headwatch.analysis.findings.icl import sharpest_fall
from headwatch.analysis.store import open_store
from headwatch.dashboard.views.head.data import ablation_rows, context_step_labels
from headwatch.dashboard.views.head.figures.contexts import context_line, contexts_html, shades
from tests.app.planted_ablation import (
    ATTENDED,
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

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "data" / "induction-d128"
TEXT_ONLY = ROOT / "data" / "induction-d512"  # made before the ablation lens and the named LLC distributions


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("planted") / "induction-d128"
    shutil.copytree(SHIPPED, path)
    return add_planted_ablation(path)


def test_the_icl_scores_are_the_planted_ones_and_the_probe_falls_where_planted(planted: Path) -> None:
    store = open_store(planted)
    scores = icl_scores(store)
    assert scores is not None
    n = len(store.steps)
    np.testing.assert_allclose(scores.score["probe"], probe_icl(n))
    np.testing.assert_allclose(scores.score["text"], -0.05 * np.arange(n))
    np.testing.assert_allclose(scores.se["probe"], 0.02)
    fall = sharpest_fall(scores.steps, scores.score["probe"], scores.se["probe"])
    assert fall is not None
    assert (fall.start, fall.end) == (int(store.steps[PROBE_FALL - 1]), int(store.steps[PROBE_FALL]))
    assert fall.drop == pytest.approx(-1.8)
    assert "positions 33–63" in scores.positions["probe"] and "position 62 minus at position 5" in scores.positions["text"]
    rows = icl_rows(scores, "r")
    assert len(rows) == 2 * n and set(rows["statistic"]) == {"icl_text", "icl_probe"}


def test_the_ablation_effect_is_the_planted_one_at_every_step_and_head(planted: Path) -> None:
    store = open_store(planted)
    effect = ablation_effect(store)
    assert effect is not None and effect.method == "mean"
    n, n_layers, n_heads = len(store.steps), store.n_layers, store.n_heads
    for t in range(n):
        for layer in range(n_layers):
            for head in range(n_heads):
                assert effect.value["probe_increase"][t, layer, head] == pytest.approx(
                    planted_probe_increase(t, layer, head, n_steps=n, n_heads=n_heads)
                )
                assert effect.value["text_increase"][t, layer, head] == pytest.approx(
                    planted_text_increase(t, layer, head, n_heads=n_heads)
                )
    assert effect.last_index() == n - 1
    rows = ablation_rows(effect, run="r", layer=1, head=2)
    assert len(rows) == 4 * n  # four measures at every step
    probe = rows[rows["statistic"] == "probe_increase"]
    np.testing.assert_allclose(probe["value"], 3.0 * np.arange(n) / (n - 1))


def test_the_tokens_in_context_their_csv_and_their_drawing(planted: Path) -> None:
    store = open_store(planted)
    steps = planted_context_steps([int(s) for s in store.steps])
    assert context_steps(store) == steps
    rows = head_contexts(store, *PROBE_HEAD, steps[-1])
    assert rows is not None and list(rows["rank"]) == list(range(1, 21))
    np.testing.assert_allclose(rows["loss_increase"], 2.0 - 0.05 * np.arange(1, 21))
    assert second_copy_share(rows) == 1.0
    assert second_copy_share(head_contexts(store, *TEXT_HEAD, steps[-1])) == 0.0
    csv = contexts_csv(rows, run="r", layer=1, head=2, step=steps[-1])
    assert csv["window"].iloc[0] == "t0t1t2t3t4t5t6[X1]"
    assert csv["attention"].iloc[0] == "0.05;0.05;0.7;0.05;0.05;0.05;0.05;0"
    assert (csv["step"] == steps[-1]).all() and (csv["layer"] == 1).all()
    # the drawing: the attended token darkest (opacity 1), the others 0.05 / 0.7 of it, the target boxed
    np.testing.assert_allclose(
        shades(rows["attention"].iloc[0]), np.array([0.05] * 7 + [0.0]) / 0.7 + np.eye(8)[ATTENDED] * (1 - 0.05 / 0.7)
    )
    line = context_line(list(rows["tokens"].iloc[0]), list(rows["attention"].iloc[0]))
    assert "rgba(230,85,13,1.000)'>t2<" in line and "rgba(230,85,13,0.071)'>t0<" in line
    assert "title='target'" in line and ">X1</span>" in line
    assert contexts_html(rows).count("<tr>") == 21  # the header and 20 contexts
    assert window_text(["a", "\n", "b", "T"]) == "a⏎b[T]"


def test_the_step_picker_names_the_stage_boundaries_and_the_last_step(planted: Path) -> None:
    stages = pd.DataFrame(
        {"stage": [0, 1], "start_step": [0, 1250], "boundary": ["start of training", "induction heads form (L1 H0)"]}
    )
    labels = context_step_labels([0, 1250, 4000], stages)
    assert labels == {0: "0", 1250: "1,250 · S2 begins: induction heads form (L1 H0)", 4000: "4,000 · last"}


def test_the_report_picks_the_typed_heads_and_those_whose_ablation_costs_most(planted: Path) -> None:
    store = open_store(planted)
    emergence = pd.read_parquet(planted / "head_emergence.parquet")
    typed = {(int(r.layer), int(r.head)) for r in emergence[emergence["emergence_step"].notna()].itertuples()}
    picked = {(layer, head): why for layer, head, why in card_heads(store)}
    assert typed <= set(picked)
    assert any("costs the probe most (1st" in w for w in picked[PROBE_HEAD])
    assert any("costs the text most (1st" in w for w in picked[TEXT_HEAD])
    # the second by cost, by hand: the planted probe increase at the last step is 0.01 x index but for PROBE_HEAD's 3
    n_heads = store.n_heads
    last = {
        (lay, hd): planted_probe_increase(len(store.steps) - 1, lay, hd, n_steps=len(store.steps), n_heads=n_heads)
        for lay in range(store.n_layers)
        for hd in range(n_heads)
    }
    second = sorted(last, key=lambda k: -last[k])[1]
    assert any("costs the probe most (2nd" in w for w in picked[second])


def test_a_card_gathers_types_ablation_contexts_llc_and_partners(planted: Path) -> None:
    store = open_store(planted)
    card = head_card(store, 1, 6)
    emergence = pd.read_parquet(planted / "head_emergence.parquet")
    mine = emergence[(emergence["layer"] == 1) & (emergence["head"] == 6) & emergence["emergence_step"].notna()]
    assert card.types == {str(r.type): int(r.emergence_step) for r in mine.itertuples()}
    probe = card.probe.last() if card.probe is not None else None
    assert probe is not None and probe[1] == pytest.approx(0.01 * (1 * store.n_heads + 6))
    llc = pd.read_parquet(planted / "llc.parquet")
    last_llc = llc[(llc["layer"] == 1) & (llc["head"] == 6)].sort_values("step").iloc[-1]
    estimate = card.llc.last() if card.llc is not None else None
    assert estimate is not None and estimate[1] == pytest.approx(float(last_llc["llc"]))
    # partners: a pandas scan of composition.parquet at its last step, each pair by its largest of q, k, v
    comp = pd.read_parquet(planted / "composition.parquet")
    comp = comp[comp["step"] == comp["step"].max()].assign(best=lambda f: f[["q", "k", "v"]].max(axis=1))
    sources = comp[(comp["layer_b"] == 1) & (comp["head_b"] == 6)].sort_values(
        ["best", "layer_a", "head_a"], ascending=[False, True, True]
    )
    assert card.reads_from is not None
    assert [(p.layer, p.head) for p in card.reads_from] == list(
        zip(sources["layer_a"].head(3), sources["head_a"].head(3), strict=True)
    )
    assert [p.score for p in card.reads_from] == pytest.approx(list(sources["best"].head(3)))
    assert card.read_by == []  # layer 1 is the last of this two-layer model
    text = "\n".join(card_markdown(card, run="r", store_path=str(planted)))
    assert "induction from step" in text and "read by no later head" in text and "flag:" in text


def test_a_card_of_a_store_without_the_lenses_says_which_lens_adds_each_part(tmp_path: Path) -> None:
    """A shipped store made before the ablation lens (the GPU-built induction-d512)."""
    assert not (TEXT_ONLY / "ablation.parquet").exists()
    store = open_store(TEXT_ONLY)
    card = head_card(store, 0, 1)
    assert card.probe is None and card.contexts is None
    text = "\n".join(card_markdown(card, run=TEXT_ONLY.name, store_path=str(TEXT_ONLY)))
    assert "--lenses ablation" in text and "head_contexts.parquet" in text
    with pytest.raises(ValueError, match="L9 H0"):
        head_card(store, 9, 0)


def test_a_card_of_the_rebuilt_induction_d128_reads_its_own_ablations_and_contexts() -> None:
    """induction-d128 carries the ablation lens: a head's card holds its probe ablation over training and its tokens in
    context at the last checkpoint with them, as ablation.parquet and head_contexts.parquet hold them (read with
    pandas)."""
    store = open_store(SHIPPED)
    card = head_card(store, 1, 6)
    ablation = pd.read_parquet(SHIPPED / "ablation.parquet").query("layer == 1 and head == 6").sort_values("step")
    assert card.probe is not None
    np.testing.assert_array_equal(card.probe.steps, ablation["step"].to_numpy())
    np.testing.assert_allclose(card.probe.value, ablation["probe_increase"].to_numpy())
    contexts = pd.read_parquet(SHIPPED / "head_contexts.parquet").query("layer == 1 and head == 6")
    assert card.contexts is not None and len(contexts)
    text = "\n".join(card_markdown(card, run=SHIPPED.name, store_path=str(SHIPPED)))
    assert "--lenses ablation" not in text


def test_the_report_writes_the_icl_section_and_a_card_per_picked_head(planted: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from headwatch.report import write_report

    out = tmp_path / "report"
    text = write_report(planted, out).read_text()
    store = open_store(planted)
    a, b = int(store.steps[PROBE_FALL - 1]), int(store.steps[PROBE_FALL])
    section = text[text.index("## In-context learning") : text.index("## Head types")]
    assert f"The probe ICL score falls most sharply over steps {a:,} → {b:,} (−1.8 ± 0.028 nats)" in section
    assert (
        f"induction heads form at the stage boundary at step {induction_boundary_step(planted):,}" in section
        and (out / "icl.svg").is_file()
    )
    cards = text[text.index("## Head cards") : text.index("## Do the trajectory clusters")]
    picked = card_heads(store)
    assert cards.count("\n### ") == len(picked)
    for layer, head, why in picked:
        assert f"### L{layer} H{head}\n\nWhy a card: {'; '.join(why)}." in cards
        assert (out / f"card_L{layer}H{head}.svg").is_file()
    probe_card = cards[cards.index(f"### L{PROBE_HEAD[0]} H{PROBE_HEAD[1]}") :].split("\n### ")[0]
    assert "100% of them second-copy tokens of the probe" in probe_card


def test_a_cards_refined_llc_names_its_distribution_and_reads_train_where_held(tmp_path: Path) -> None:
    """A shipped store whose estimates are all on text (the GPU-built induction-d512) reads them and says so; a store
    holding train beside text reads train (the weight-refined LLC, planted as three times the text estimate) and
    names it."""
    shipped = open_store(TEXT_ONLY)
    text = "\n".join(card_markdown(head_card(shipped, 1, 6), run="r", store_path=str(TEXT_ONLY)))
    assert "- **Refined LLC on held-out text**: " in text
    path = tmp_path / "two"
    shutil.copytree(TEXT_ONLY, path)
    llc = pd.read_parquet(path / "llc.parquet")
    llc.insert(1, "data", "text")
    train = llc.assign(data="train", llc=llc["llc"] * 3.0)
    pd.concat([llc, train]).sort_values(["step", "data", "layer", "head"]).to_parquet(path / "llc.parquet", index=False)
    chains = pd.read_parquet(path / "llc_chains.parquet")
    chains.insert(1, "data", "text")
    pd.concat([chains, chains.assign(data="train")]).sort_values(["step", "data", "layer", "head", "chain"]).to_parquet(
        path / "llc_chains.parquet", index=False
    )
    card = head_card(open_store(path), 1, 6)
    last = llc[(llc["layer"] == 1) & (llc["head"] == 6)].sort_values("step").iloc[-1]
    assert card.llc is not None and card.llc_data == "train"
    estimate = card.llc.last()
    assert estimate is not None and estimate[1] == pytest.approx(3.0 * float(last["llc"]))
    assert "- **Refined LLC on the training distribution**: " in "\n".join(card_markdown(card, run="r", store_path=str(path)))


def test_the_probe_check_names_the_costliest_head_and_the_best_induction_head(planted: Path) -> None:
    """Issue 59's check on the planted tables: the probe's costliest head is the planted PROBE_HEAD (no type; all 20
    of its contexts second-copy tokens); the induction head that costs the probe most is the induction head of the
    largest planted cost, 0.01 (layer n_heads + head) at the last checkpoint, with no second-copy contexts."""
    from headwatch.analysis.findings.ablation import probe_check, probe_check_lines
    from headwatch.analysis.findings.held_types import head_types

    store = open_store(planted)
    check = probe_check(store)
    assert check is not None
    n = len(store.steps)
    assert check.step == int(store.steps[-1])
    assert check.top.head == PROBE_HEAD and check.top.cost == pytest.approx(3.0) and check.top.se == pytest.approx(0.01)
    assert check.top.share == 1.0 and check.top.contexts == 20 and check.top.types == ()
    kinds = head_types(store)
    assert kinds is not None
    induction = [(int(a), int(b)) for a, b in zip(*np.nonzero(kinds.held["induction"][-1]), strict=True)]
    expected = max(induction, key=lambda h: planted_probe_increase(n - 1, *h, n_steps=n, n_heads=store.n_heads))
    assert check.induction is not None and check.induction.head == expected
    assert check.induction.cost == pytest.approx(planted_probe_increase(n - 1, *expected, n_steps=n, n_heads=store.n_heads))
    assert "induction" in check.induction.types and check.induction.share == 0.0
    lines = probe_check_lines(check)
    assert lines[0] == (
        f"At step {check.step:,}, the head whose ablation costs the probe most is L{PROBE_HEAD[0]} H{PROBE_HEAD[1]} "
        "(no type): +3 ± 0.01 nats; 100% of its 20 top tokens in context are second-copy tokens of the probe."
    )
    assert lines[1].startswith(f"The induction head that costs the probe most is L{expected[0]} H{expected[1]} (")


def test_the_report_prints_the_probe_check(planted: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from headwatch.analysis.findings.ablation import probe_check, probe_check_lines
    from headwatch.report import write_report

    text = write_report(planted, tmp_path / "report").read_text()
    check = probe_check(open_store(planted))
    assert check is not None
    for line in probe_check_lines(check):
        assert f"- {line}" in text
