"""The losses and ablation lenses end to end: ``--lenses attention --lenses losses --lenses ablation`` on byte-level
GPT-NeoX checkpoints saved by transformers (`tests.integration.test_forward_lens.byte_run`), through the command line.

The store's numbers against an independent brute force on the last checkpoint: TransformerLens's bridge over the
saved checkpoint, each head mean-ablated by a hook on ``blocks.{l}.attn.hook_z`` (its mean over the evaluation
text's tokens read by the same hook), one forward pass per head, float64; the statistics recomputed by plain loops.
The lens runs in float32, so the tolerance is 1e-4 nats. Shipped stores, made without either lens, still load and
``headwatch info`` lists both as absent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

from headwatch.analysis.store import open_store, read_meta
from headwatch.analysis.store.lenses.ablation import ABLATION, CONTEXTS_PER_HEAD, HEAD_CONTEXTS
from headwatch.analysis.store.lenses.losses import ICL, POSITION_LOSS, icl_positions
from headwatch.precompute.evalset import BYTE_TOKENIZER, held_out_bytes, make_eval_set
from tests.integration.conftest import REPO, run_cli
from tests.integration.test_forward_lens import byte_run

N, T = 4, 32
STEPS = [0, 1, 4]


def _brute_force(folder: Path, text: np.ndarray, probe: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-token losses ``(S, T)`` (column 0 NaN) intact, and per head ``(L, H, S, T)``, through TransformerLens."""
    pytest.importorskip("transformer_lens")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({f"b{i}": i for i in range(256)}, unk_token="b0")))
    bridge = TransformerBridge.boot_transformers(str(folder), dtype=torch.float64, device="cpu", tokenizer=tok)
    n_layers, n_heads = bridge.cfg.n_layers, bridge.cfg.n_heads
    ids = {"text": torch.from_numpy(text), "probe": torch.from_numpy(probe)}
    means: dict[int, torch.Tensor] = {}

    def keep(layer: int) -> Any:
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            means[layer] = z.detach().mean(dim=(0, 1))  # (S, T, H, d_head) -> (H, d_head)
            return z

        return hook

    with torch.no_grad():
        reads: list[Any] = [(f"blocks.{i}.attn.hook_z", keep(i)) for i in range(n_layers)]
        bridge.run_with_hooks(ids["text"], return_type="loss", fwd_hooks=reads)

        def losses(tokens: torch.Tensor, hooks: list[Any]) -> np.ndarray:
            out = bridge.run_with_hooks(tokens, return_type="loss", loss_per_token=True, fwd_hooks=hooks).detach().numpy()
            return np.concatenate([np.full((len(out), 1), np.nan), out], axis=1)

        base = {name: losses(t, []) for name, t in ids.items()}
        ablated = {name: np.empty((n_layers, n_heads, *t.shape)) for name, t in ids.items()}
        for layer in range(n_layers):
            for head in range(n_heads):

                def swap(z: torch.Tensor, hook: Any, layer: int = layer, head: int = head) -> torch.Tensor:
                    z[:, :, head] = means[layer][head]
                    return z

                for name, t in ids.items():
                    ablated[name][layer, head] = losses(t, [(f"blocks.{layer}.attn.hook_z", swap)])
    return base, ablated


def _se(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / np.sqrt(len(values)))


def test_the_ablation_lens_equals_transformer_lens_hooks_one_head_at_a_time(tmp_path: Path) -> None:
    run = byte_run(tmp_path, STEPS)
    out = tmp_path / "store"
    args = ["--lenses", "attention", "--lenses", "losses", "--lenses", "ablation"]
    done = run_cli("--source", str(run), "--out", str(out), *args, "--eval-sequences", str(N), "--eval-length", str(T))
    assert done.returncode == 0, done.stderr
    store = open_store(out)
    L, H = store.n_layers, store.n_heads
    meta = read_meta(out)
    record = meta.records["ablation"]
    assert record["method"] == "mean" and record["context_steps"][-1] == STEPS[-1]
    assert meta.records["losses"]["early"], meta.records["losses"]["late"] == icl_positions(T)

    # the evaluation sequences, rebuilt as the job built them
    held, name = held_out_bytes(json.loads((run / "run.json").read_text()), run)
    ids = np.frombuffer(held, np.uint8).astype(np.int64)
    eval_set = make_eval_set(ids, n=N, t=T, vocab_size=256, text=name, text_sha256="", tokenizer=BYTE_TOKENIZER)
    assert eval_set.info.tokens_sha256 == meta.forward.tokens_sha256
    R = T // 2
    base, ablated = _brute_force(run / f"step{STEPS[-1]}", eval_set.tokens, eval_set.induction)

    # position_loss and icl at the last step
    pl = store.frame(POSITION_LOSS)
    assert pl is not None and len(pl) == len(STEPS) * ((T - 1) + (2 * R - 1))
    last = pl[pl["step"] == STEPS[-1]]
    for name in ("text", "probe"):
        rows = last[last["set"] == name].sort_values("position")
        assert list(rows["position"]) == list(range(1, base[name].shape[1]))
        np.testing.assert_allclose(rows["loss_mean"], np.nanmean(base[name][:, 1:], axis=0), atol=1e-4)
        np.testing.assert_allclose(rows["loss_sem"], [_se(base[name][:, p]) for p in range(1, base[name].shape[1])], atol=1e-4)
    icl = store.frame(ICL)
    assert icl is not None
    early, late = icl_positions(T)
    text_icl = icl[(icl["step"] == STEPS[-1]) & (icl["set"] == "text")].iloc[0]
    diffs = base["text"][:, late] - base["text"][:, early]
    assert abs(text_icl["score"] - diffs.mean()) < 1e-4 and abs(text_icl["score_sem"] - _se(diffs)) < 1e-4
    probe_icl = icl[(icl["step"] == STEPS[-1]) & (icl["set"] == "probe")].iloc[0]
    diffs = base["probe"][:, R + 1 :].mean(1) - base["probe"][:, 1:R].mean(1)
    assert abs(probe_icl["score"] - diffs.mean()) < 1e-4 and abs(probe_icl["score_sem"] - _se(diffs)) < 1e-4

    # ablation.parquet at the last step, head by head, against the brute force's plain loops
    table = store.frame(ABLATION)
    assert table is not None and len(table) == len(STEPS) * L * H
    at = table[table["step"] == STEPS[-1]].set_index(["layer", "head"])
    for layer in range(L):
        for head in range(H):
            row = at.loc[(layer, head)]
            text_inc = (ablated["text"][layer, head][:, 1:] - base["text"][:, 1:]).mean(1)
            probe_inc = (ablated["probe"][layer, head][:, R + 1 :] - base["probe"][:, R + 1 :]).mean(1)
            abl_t, abl_p = ablated["text"][layer, head], ablated["probe"][layer, head]
            icl_t = abl_t[:, late] - abl_t[:, early]
            icl_p = abl_p[:, R + 1 :].mean(1) - abl_p[:, 1:R].mean(1)
            want = {
                "text_increase": text_inc.mean(),
                "text_increase_sem": _se(text_inc),
                "probe_increase": probe_inc.mean(),
                "probe_increase_sem": _se(probe_inc),
                "icl_text": icl_t.mean(),
                "icl_text_sem": _se(icl_t),
                "icl_probe": icl_p.mean(),
                "icl_probe_sem": _se(icl_p),
            }
            for column, value in want.items():
                assert abs(row[column] - value) < 1e-4, (layer, head, column, row[column], value)
    assert at["text_increase"].abs().max() > 1e-3  # the heads matter: the comparison can fail

    # the tokens in context: kept at the recorded steps only, 20 per head, the largest increases first
    contexts = store.read(HEAD_CONTEXTS)
    assert contexts is not None
    assert sorted(set(contexts["step"].to_pylist())) == record["context_steps"]
    ctx = contexts.filter(pc.equal(contexts["step"], STEPS[-1])).to_pandas()
    assert len(ctx) == L * H * CONTEXTS_PER_HEAD
    pooled = {
        (layer, head): np.concatenate(
            [(ablated[n][layer, head] - base[n]).ravel() for n in ("text", "probe")]
        )  # the text's tokens, then the probe's
        for layer in range(L)
        for head in range(H)
    }
    for (layer, head), rows in ctx.groupby(["layer", "head"]):
        rows = rows.sort_values("rank")
        assert list(rows["rank"]) == list(range(1, CONTEXTS_PER_HEAD + 1))
        assert rows["loss_increase"].is_monotonic_decreasing
        top = np.sort(pooled[(layer, head)][np.isfinite(pooled[(layer, head)])])[::-1][:CONTEXTS_PER_HEAD]
        np.testing.assert_allclose(rows["loss_increase"], top, atol=1e-4)
        for r in rows.itertuples():
            ids = eval_set.tokens if r.set == "text" else eval_set.induction
            truth = (ablated[r.set][layer, head] - base[r.set])[r.sequence, r.position]
            assert abs(r.loss_increase - truth) < 1e-4 and abs(r.base_loss - base[r.set][r.sequence, r.position]) < 1e-4
            assert r.second_copy == (r.set == "probe" and r.position >= R + 1)
            window = ids[r.sequence, r.start : r.position + 1]
            assert list(r.tokens) == [bytes([int(i)]).decode("utf-8", errors="backslashreplace") for i in window]
            assert r.target == r.tokens[-1] and len(r.attention) == len(r.tokens) and r.attention[-1] == 0
            assert 0 < sum(r.attention) <= 1 + len(r.attention) * 2.0**-16  # each rounded to a multiple of 2^-16


def _listed_lenses(shipped: Path) -> dict[str, str]:
    """`headwatch info`'s lines of its lenses section, by lens."""
    info = subprocess.run([sys.executable, "-m", "headwatch", "info", str(shipped)], cwd=REPO, capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    listed = info.stdout.split("\nlenses:\n", 1)[1].split("\nwhat a checkpoint", 1)[0]  # the section that lists the lenses
    return {line.split()[0]: line for line in listed.splitlines() if line.split()}


def test_shipped_stores_load_without_the_lenses_and_info_lists_them_absent() -> None:
    """A store made before the lenses (the GPU-built induction-d512) loads, and `headwatch info` lists them absent."""
    shipped = REPO / "data" / "induction-d512"
    if not (shipped / "meta.json").is_file():
        pytest.skip("no shipped store in data/")
    assert not (shipped / ABLATION.file).exists() and not (shipped / POSITION_LOSS.file).exists()
    store = open_store(shipped)
    assert store.read(ABLATION) is None and store.read(POSITION_LOSS) is None
    lines = _listed_lenses(shipped)
    assert lines["ablation"].split()[1] == "absent" and lines["losses"].split()[1] == "absent"


@pytest.mark.parametrize("run", ["induction-d128", "induction-d128-seed2", "induction-d64", "induction-d256"])
def test_the_rebuilt_induction_stores_carry_both_lenses_at_every_checkpoint(run: str) -> None:
    """The induction stores rebuilt with every lens: ablation.parquet and position_loss.parquet hold every checkpoint
    of the store and every head (read with pyarrow), and `headwatch info` counts them so."""
    shipped = REPO / "data" / run
    store = open_store(shipped)
    steps = {int(s) for s in store.steps}
    ablation = pq.read_table(shipped / ABLATION.file, columns=["step", "layer", "head"]).to_pandas()
    assert set(ablation["step"]) == steps
    assert (ablation.groupby("step").size() == store.n_layers * store.n_heads).all()
    assert set(pq.read_table(shipped / POSITION_LOSS.file, columns=["step"]).to_pandas()["step"]) == steps
    lines = _listed_lenses(shipped)
    assert lines["ablation"].split()[1:3] == [str(len(steps)), "checkpoints;"], lines["ablation"]
    assert lines["losses"].split()[1:3] == [str(len(steps)), "checkpoints;"], lines["losses"]


def test_the_tokens_in_context_follow_the_chosen_checkpoints_across_runs(tmp_path: Path) -> None:
    """``--ablation-steps last`` keeps the last checkpoint's tokens in context only; a later run asking for ``all``
    reads the others again (their ablation rows unchanged); a run with another method is refused before anything is
    written."""
    run = byte_run(tmp_path, STEPS)
    out = tmp_path / "store"
    common = ["--source", str(run), "--out", str(out), "--lenses", "ablation"]
    common += ["--eval-sequences", str(N), "--eval-length", str(T)]
    done = run_cli(*common, "--ablation-steps", "last")
    assert done.returncode == 0, done.stderr
    first = open_store(out)
    contexts = first.read(HEAD_CONTEXTS)
    assert contexts is not None and set(contexts["step"].to_pylist()) == {STEPS[-1]}
    assert read_meta(out).records["ablation"]["context_steps"] == [STEPS[-1]]
    before = first.frame(ABLATION)

    # a second run over the finished store reuses what is there: its tables, with tokens in context at some
    # checkpoints only, do not read as disagreeing, and nothing is computed again
    done = run_cli(*common, "--ablation-steps", "last")
    assert done.returncode == 0, done.stderr
    assert "disagree" not in done.stderr, done.stderr
    assert "ablation lens: " not in done.stderr and "ablation: computed" not in done.stderr, done.stderr
    assert open_store(out).frame(ABLATION).equals(before)  # type: ignore[union-attr]  # the store has the table: frame is not None

    done = run_cli(*common, "--ablation-steps", "all")
    assert done.returncode == 0, done.stderr
    again = open_store(out)
    contexts = again.read(HEAD_CONTEXTS)
    assert contexts is not None and sorted(set(contexts["step"].to_pylist())) == STEPS
    assert read_meta(out).records["ablation"]["context_steps"] == STEPS
    after = again.frame(ABLATION)
    assert before is not None and after is not None and before.equals(after)
    n = again.n_layers * again.n_heads * CONTEXTS_PER_HEAD
    assert all(contexts.filter(pc.equal(contexts["step"], s)).num_rows == n for s in STEPS)

    refused = run_cli(*common, "--ablation-method", "zero")
    assert refused.returncode != 0 and "--ablation-method mean" in refused.stderr
    assert read_meta(out).records["ablation"]["method"] == "mean"
