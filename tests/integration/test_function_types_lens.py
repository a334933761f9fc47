"""The types lens's multigram and other heads end to end, on a copy of the shipped induction-d128 store given planted
ablation tables (ablation.parquet, head_contexts.parquet, as the ablation lens declares them) and a planted n-gram
text: each planted head gets exactly its type, from the checkpoint its contexts first show it; typed heads, small
effects and effects within their error get neither; a store without the ablation lens says what adds it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headwatch.analysis.attention.function_types import FLOOR, MIN_TEXT_CONTEXTS
from headwatch.analysis.findings.held_types import head_types
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.ablation import ABLATION, HEAD_CONTEXTS
from headwatch.analysis.store.lenses.types import CONTEXT_NGRAMS, HEAD_EMERGENCE, HEAD_TYPES_TABLE
from headwatch.precompute.lenses.types import main
from headwatch.precompute.store.writer import commit_store
from tests.integration.conftest import REPO

PHRASE = "thou art "
LETTERS = "bcfjkmpqvwxyz"  # not in the phrase
CONTEXT_STEPS = (3000, 4000)
# (layer, head): (effect from step 2000 in nats, its standard error, contexts frequent n-grams?)
PLANTED = {
    (0, 3): (0.08, 0.002, True),  # untyped at the end: multigram
    (0, 4): (0.08, 0.002, False),  # untyped, rare contexts: other
    (0, 6): (0.004, 0.0005, True),  # below the floor: neither
    (1, 2): (0.08, 0.05, True),  # within 3 standard errors: neither
    (1, 0): (0.3, 0.002, True),  # an induction head: neither
    (1, 3): (0.08, 0.002, True),  # 12 frequent text contexts and 8 probe ones: multigram on its text contexts
    (1, 7): (0.08, 0.002, True),  # 3 frequent text contexts and 17 probe ones: too few to judge, other
}
# the planted heads meant to hold no attention type at the end, and the induction head (checked on the copy)
UNTYPED = [head for head in PLANTED if head != (1, 0)]
# Of a head's top 20 contexts, how many are on the probe (random tokens: they continue no n-gram); the rest on text.
PROBE_CONTEXTS = {(1, 3): 8, (1, 7): 17}


def ngram_file(path: Path) -> Path:
    rng = np.random.default_rng(0)
    pieces = [PHRASE if rng.random() < 0.85 else "".join(rng.choice(list(LETTERS), 5)) for _ in range(3000)]
    path.write_text("".join(pieces), encoding="utf-8")
    return path


def window(kind: bool, rng: np.random.Generator) -> list[str]:
    """A context window of single characters ending at its target: inside the phrase, or in random letters."""
    if kind:
        text = (PHRASE * 3)[rng.integers(0, len(PHRASE)) :][:12]
        while text[-4:] not in {"thou", "hou ", "ou a", "u ar"}:
            text = text[:-1]
    else:
        text = "".join(rng.choice(list(LETTERS), 10))
    return list(text)


def planted_store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(REPO / "data" / "induction-d128", store)
    # what the plan needs of the store, read with pandas: which heads hold an attention type at its last checkpoint
    types = pd.read_parquet(store / "head_types.parquet")
    end = types[(types["step"] == types["step"].max()) & types["holds"] & ~types["type"].isin(["multigram", "other"])]
    held = {(int(a), int(b)): set(end[(end["layer"] == a) & (end["head"] == b)]["type"]) for a, b in PLANTED}
    assert "induction" in held[(1, 0)] and not any(held[head] for head in UNTYPED), held
    opened = open_store(store)
    steps = opened.steps
    n_layers, n_heads = opened.n_layers, opened.n_heads
    keys = [(int(s), layer, head) for s in steps for layer in range(n_layers) for head in range(n_heads)]
    increase, sem = [], []
    for step, layer, head in keys:
        effect, error, _ = PLANTED.get((layer, head), (0.0, 0.001, False))
        increase.append(effect if step >= 2000 else 0.0)
        sem.append(error)
    nan = pa.array(np.full(len(keys), np.nan))
    ablation = pa.table(
        {
            "step": pa.array([k[0] for k in keys], pa.int64()),
            "layer": pa.array([k[1] for k in keys], pa.int32()),
            "head": pa.array([k[2] for k in keys], pa.int32()),
            "method": pa.array(["mean"] * len(keys)),
            "text_increase": pa.array(increase, pa.float64()),
            "text_increase_sem": pa.array(sem, pa.float64()),
        }
        | {c: nan for c in ABLATION.schema.names[6:]},
        schema=ABLATION.schema,
    )
    rng = np.random.default_rng(1)
    rows: dict[str, list] = {name: [] for name in HEAD_CONTEXTS.schema.names}
    for step in CONTEXT_STEPS:
        for layer in range(n_layers):
            for head in range(n_heads):
                frequent = PLANTED.get((layer, head), (0, 0, False))[2]
                n_text = 20 - PROBE_CONTEXTS.get((layer, head), 0)
                for rank in range(1, 21):
                    on_text = rank <= n_text
                    tokens = window(frequent and on_text, rng)
                    where = "text" if on_text else "probe"
                    values = {"step": step, "layer": layer, "head": head, "rank": rank, "set": where, "sequence": 0}
                    values |= {"position": 20, "second_copy": not on_text, "start": 20 - len(tokens) + 1}
                    values |= {"target": tokens[-1], "tokens": tokens, "attention": [0.0] * len(tokens)}
                    values |= {"loss_increase": 0.1, "base_loss": 1.0}
                    for name, value in values.items():
                        rows[name].append(value)
    contexts = pa.table(rows, schema=HEAD_CONTEXTS.schema)
    meta = opened.meta.with_record("ablation", {"method": "mean", "context_steps": list(CONTEXT_STEPS)})
    commit_store(store, meta, {ABLATION.name: ablation, HEAD_CONTEXTS.name: contexts})
    return store


def test_planted_heads_get_multigram_and_other(tmp_path: Path, capsys) -> None:
    store = planted_store(tmp_path)
    text = ngram_file(tmp_path / "ngrams.txt")
    # without a text: no multigram or other heads, and why
    assert main([str(store)]) == 0
    printed = capsys.readouterr().out
    assert "multigram: not decided: no training text" in printed and "--ngram-text" in printed
    assert main([str(store), "--ngram-text", str(text)]) == 0
    printed = capsys.readouterr().out
    assert "multigram rule: base rate" in printed
    opened = open_store(store)
    types = opened.frame(HEAD_TYPES_TABLE)
    assert types is not None
    function = types[types["type"].isin(["multigram", "other"])]
    assert set(function["step"]) == set(CONTEXT_STEPS)  # decided where the contexts are
    held = function[function["holds"]]
    got = {(int(r.layer), int(r.head), r.type) for r in held.itertuples()}
    # L1 H3's pooled contexts (12 of 20 explained) would not beat the base rate; its text contexts (12 of 12) do.
    # L1 H7 has 3 text contexts: not judged, other.
    assert got == {(0, 3, "multigram"), (0, 4, "other"), (1, 3, "multigram"), (1, 7, "other")}
    emergence = opened.frame(HEAD_EMERGENCE)
    assert emergence is not None
    emerged = emergence[emergence["type"].isin(["multigram", "other"])].dropna(subset=["emergence_step"])
    assert {(int(r.layer), int(r.head), r.type, int(r.emergence_step)) for r in emerged.itertuples()} == {
        (0, 3, "multigram", 3000),
        (0, 4, "other", 3000),
        (1, 3, "multigram", 3000),
        (1, 7, "other", 3000),
    }
    # the score is the ablation effect, the null the measurable level
    row = held[(held["layer"] == 0) & (held["head"] == 3)].iloc[0]
    assert row["score"] == pytest.approx(0.08) and row["null"] == pytest.approx(FLOOR)
    # every context's n-gram check: the multigram head's contexts all continue a frequent n-gram, the other's none
    checked = opened.frame(CONTEXT_NGRAMS)
    assert checked is not None and len(checked) == len(CONTEXT_STEPS) * opened.n_layers * opened.n_heads * 20
    share = checked.assign(explained=checked["order"] > 0).groupby(["layer", "head"])["explained"].mean()
    assert share[(0, 3)] == 1.0 and share[(0, 4)] == 0.0
    record = json.loads((store / "meta.json").read_text())["types"]
    assert record["function"]["context_steps"] == list(CONTEXT_STEPS) and 0 < record["function"]["base_rate"] < 1
    assert record["function"]["text"]["text"] == "ngrams.txt"
    assert record["function"]["min_text_contexts"] == MIN_TEXT_CONTEXTS
    few = {(r["step"], r["layer"], r["head"], r["text_contexts"]) for r in record["function"]["few_text_contexts"]}
    assert few == {(step, 1, 7, 3) for step in CONTEXT_STEPS}
    assert "fewer than 5 text contexts" in printed
    # the attention types are unchanged, and the views read the new types
    kinds = head_types(opened)
    assert kinds is not None and kinds.emergence["multigram"][0, 3] == 3000 and kinds.emergence["other"][0, 4] == 3000
    assert kinds.emergence["induction"][1, 0] >= 0 and kinds.emergence["multigram"][1, 0] == -1


def test_a_store_without_the_ablation_lens_says_what_adds_it(tmp_path: Path, capsys) -> None:
    store = tmp_path / "store"
    shutil.copytree(REPO / "data" / "induction-d512", store)  # made before the ablation lens (GPU-built)
    assert not (store / ABLATION.file).exists()
    assert main([str(store), "--ngram-text", str(ngram_file(tmp_path / "t.txt"))]) == 0
    printed = capsys.readouterr().out
    assert "multigram: not decided: the store has no ablation lens" in printed and "--lenses ablation" in printed
    checked = open_store(store).frame(CONTEXT_NGRAMS)
    assert checked is not None and checked.empty  # written, with no context to check
