"""The essential-dynamics lens end to end on small checkpoints (precompute/lenses/essential.py): its outputs are the
models' own log-probabilities on the recorded sample, its components are numpy's SVD of the stored outputs, and a
store made in one run equals one that gains the lens later."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from headwatch.analysis.store import open_store, read_meta
from headwatch.analysis.store.lenses.essential import ESSENTIAL, ESSENTIAL_OUTPUTS
from headwatch.precompute.evalset import held_out_bytes, make_eval_set
from tests.integration.conftest import run_cli
from tests.integration.test_forward_lens import byte_run

LENS = ("--lenses", "essential", "--eval-sequences", "4", "--eval-length", "32")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return byte_run(tmp_path_factory.mktemp("essential"), [0, 1, 2, 4, 8])


@pytest.fixture(scope="module")
def store(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("essential-store") / "store"
    done = run_cli("--source", str(run), "--out", str(out), *LENS)
    assert done.returncode == 0, done.stderr
    return out


def test_the_outputs_are_the_models_log_probabilities_on_the_recorded_sample(run: Path, store: Path) -> None:
    from transformers import AutoModelForCausalLM

    record = read_meta(store).records["essential"]
    info = record["evaluation"]
    held, _ = held_out_bytes(json.loads((run / "run.json").read_text()), run)
    es = make_eval_set(
        np.frombuffer(held, np.uint8).astype(np.int64),
        n=4,
        t=32,
        vocab_size=256,
        text=info["text"],
        text_sha256=info["text_sha256"],
        tokenizer=info["tokenizer"],
    )
    assert es.info.tokens_sha256 == info["tokens_sha256"] and info["n_sequences"] == 4 and info["seq_len"] == 32
    assert record["sequences"] == {"evaluation": 4, "probe": 4}
    positions, tokens = record["positions"], np.array(record["tokens"])
    # a vocabulary of 256 > 128 tokens kept: the 128 next tokens the sample predicts most often, no rarer one kept
    assert len(tokens) == 128 and np.all(np.diff(tokens) > 0)
    targets = np.concatenate(
        [ids[:, np.array(positions[k]) + 1].ravel() for k, ids in (("evaluation", es.tokens[:4]), ("probe", es.induction[:4]))]
    )
    counts = np.bincount(targets, minlength=256)
    assert counts[tokens].min() >= np.delete(counts, tokens).max()
    assert record["values_per_checkpoint"] == 4 * (len(positions["evaluation"]) + len(positions["probe"])) * 128
    outputs = pq.read_table(store / ESSENTIAL_OUTPUTS.file)
    assert outputs.schema.equals(ESSENTIAL_OUTPUTS.schema) and outputs["step"].to_pylist() == [0, 1, 2, 4, 8]
    for step, row in zip(outputs["step"].to_pylist(), outputs["logprobs"].to_pylist(), strict=True):
        model = AutoModelForCausalLM.from_pretrained(run / f"step{step}", dtype=torch.float32).eval()
        expected = []
        for kind, ids in (("evaluation", es.tokens[:4]), ("probe", es.induction[:4])):
            with torch.no_grad():
                logits = model(input_ids=torch.from_numpy(ids)).logits.double().numpy()  # (4, L, 256)
            z = logits[:, positions[kind]]  # (4, P, 256): log-softmax by hand
            logp = z - z.max(-1, keepdims=True) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
            expected.append(logp[:, :, tokens].ravel())
        np.testing.assert_allclose(np.array(row), np.concatenate(expected), atol=2e-5)


def test_the_components_are_numpys_svd_of_the_stored_outputs(store: Path) -> None:
    outputs = pq.read_table(store / ESSENTIAL_OUTPUTS.file)
    x = np.stack(outputs["logprobs"].to_numpy(zero_copy_only=False)).astype(np.float64)
    x -= x.mean(axis=0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    frame = open_store(store).frame(ESSENTIAL)
    assert frame is not None
    k = int(frame["component"].max()) + 1
    assert k == 3
    for j in range(k):
        rows = frame[frame["component"] == j].sort_values("step")
        ref = u[:, j] * s[j]
        sign = np.sign(rows["score"].to_numpy() @ ref)
        np.testing.assert_allclose(rows["score"].to_numpy(), sign * ref, atol=1e-8 * np.abs(ref).max())
        np.testing.assert_allclose(rows["explained"].to_numpy(), s[j] ** 2 / np.sum(s**2), rtol=1e-9)
    record = read_meta(store).records["essential"]
    assert record["explained"] == pytest.approx((s**2 / np.sum(s**2))[:3].tolist())
    cusps = sorted(set(frame.loc[frame["cusp"], "step"]))
    assert record["cusps"] == cusps and record["steps"] == 5


def test_adding_the_lens_later_gives_the_one_shot_store(run: Path, store: Path, tmp_path: Path) -> None:
    later = tmp_path / "later"
    first = run_cli(
        "--source", str(run), "--out", str(later), "--lenses", "attention", "--eval-sequences", "4", "--eval-length", "32"
    )
    assert first.returncode == 0, first.stderr
    assert not (later / ESSENTIAL.file).exists()
    done = run_cli("--source", str(run), "--out", str(later), *LENS)
    assert done.returncode == 0, done.stderr
    for spec in (ESSENTIAL_OUTPUTS, ESSENTIAL):  # NaN-aware and exact (turn is NaN at the ends)
        pd.testing.assert_frame_equal(
            pq.read_table(store / spec.file).to_pandas(), pq.read_table(later / spec.file).to_pandas(), check_exact=True
        )
    assert read_meta(store).records["essential"] == read_meta(later).records["essential"]
