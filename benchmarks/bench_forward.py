"""Seconds per checkpoint of the forward-pass lens (`precompute.lenses.attention`), on this machine.

Two models, each timed as the precompute job runs the stage: load the whole checkpoint with
transformers from its folder (float32 on CPU), then evaluate N x T = 32 x 256 tokens plus the
induction probe (8 x 256) with attention weights returned, batch of 8 sequences:

- the reference run's checkpoints (``--reference runs/shakespeare-pythia-6x8``; 6 layers x 8
  heads, d_model 256, 4.9M parameters) on its held-out split;
- a Pythia-160M-shaped GPT-NeoX with random weights (12 layers x 12 heads, d_model 768, MLP 3072,
  vocabulary 50,304; 162M parameters, saved once as float32 safetensors) on random token ids.

On CUDA (``--device cuda``) the model is moved there in its checkpoint's dtype. Prints one
table; nothing is written outside a temporary folder.

    python -m benchmarks.bench_forward --reference runs/shakespeare-pythia-6x8 [--device cpu] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.shapes import pythia_160m_config
from headwatch.precompute.evalset import held_out_bytes, make_eval_set
from headwatch.precompute.lenses.attention import AttentionJob, forward_statistics, load_model


def time_checkpoint(folder: Path, job: AttentionJob, *, n_layers: int, n_heads: int) -> tuple[float, float, float, float]:
    """(load seconds, evaluate seconds, CPU seconds of both, loss) for one checkpoint, as the stage runs it.

    CPU seconds (this process, all threads) say what the work costs on a machine that others share;
    wall seconds are what a run takes here."""
    c0, t0 = time.process_time(), time.perf_counter()
    model = load_model(folder, device=job.device)
    t1 = time.perf_counter()
    stats = forward_statistics(model, job, n_layers=n_layers, n_heads=n_heads)
    if job.device == "cuda":
        torch.cuda.synchronize()
    t2, c2 = time.perf_counter(), time.process_time()
    del model
    return t1 - t0, t2 - t1, c2 - c0, float(stats["loss"])


def bench_reference(run: Path, device: str, steps: list[str]) -> list[tuple[float, float, float]]:
    info = json.loads((run / "run.json").read_text())
    data, name = held_out_bytes(info, run)
    es = make_eval_set(
        np.frombuffer(data, np.uint8).astype(np.int64), n=32, t=256, vocab_size=256, text=name, text_sha256="", tokenizer="bytes"
    )
    model = info["config"]["model"]
    job = AttentionJob(es, device=device)
    load_model(run / steps[0], device=device)  # warm-up: the first load imports transformers' model code
    out = []
    for step in steps:
        load, evaluate, cpu, loss = time_checkpoint(run / step, job, n_layers=model["n_layers"], n_heads=model["n_heads"])
        print(f"reference {step}: load {load:.2f} s, evaluate {evaluate:.2f} s, CPU {cpu:.1f} s, loss {loss:.3f}", flush=True)
        out.append((load, evaluate, cpu))
    return out


def bench_160m(device: str, repeats: int) -> list[tuple[float, float, float]]:
    from transformers import GPTNeoXForCausalLM

    config = pythia_160m_config()
    with tempfile.TemporaryDirectory(prefix="bench-forward-") as tmp:
        torch.manual_seed(0)
        model = GPTNeoXForCausalLM(config)
        n_params = sum(p.numel() for p in model.parameters())
        model.save_pretrained(tmp)
        del model
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
        print(f"pythia-160m-shaped: {n_params:,} parameters, {size:,} bytes on disk", flush=True)
        ids = np.random.default_rng(0).integers(0, 50304, size=32 * 256 * 2)
        es = make_eval_set(ids, n=32, t=256, vocab_size=50304, text="random ids", text_sha256="", tokenizer="none")
        job = AttentionJob(es, device=device)
        out = []
        for r in range(repeats):
            load, evaluate, cpu, loss = time_checkpoint(Path(tmp), job, n_layers=12, n_heads=12)
            print(
                f"pythia-160m-shaped run {r}: load {load:.2f} s, evaluate {evaluate:.2f} s, CPU {cpu:.1f} s, loss {loss:.3f}",
                flush=True,
            )
            out.append((load, evaluate, cpu))
    return out


def bench_shape_of(store: Path, device: str, repeats: int) -> list[tuple[float, float, float]]:
    """The lens on a model of ``store``'s shape (its meta.json config) with random weights, on random ids in the
    store's evaluation shape (N x T, and the induction probe as the job makes it): what the lens costs that model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from headwatch.analysis.store import open_store

    meta = open_store(store).meta
    assert meta.forward is not None, f"{store} has no forward lens"
    fields = {k: v for k, v in meta.model.config.items() if k != "architectures"}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    n, t, vocab = meta.forward.n_sequences, meta.forward.seq_len, int(config.vocab_size)
    with tempfile.TemporaryDirectory(prefix="bench-forward-") as tmp:
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
        ids = np.random.default_rng(0).integers(0, vocab, size=n * t * 2)
        es = make_eval_set(ids, n=n, t=t, vocab_size=vocab, text="random ids", text_sha256="", tokenizer="none")
        job = AttentionJob(es, device=device)
        load_model(Path(tmp), device=device)  # warm-up
        out = []
        for r in range(repeats):
            load, evaluate, cpu, _ = time_checkpoint(Path(tmp), job, n_layers=meta.model.n_layers, n_heads=meta.model.n_heads)
            what = f"{meta.model.id} shape ({n} x {t} tokens) run {r}"
            print(f"{what}: load {load:.2f} s, evaluate {evaluate:.2f} s, CPU {cpu:.1f} s", flush=True)
            out.append((load, evaluate, cpu))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, default=Path("runs/shakespeare-pythia-6x8"))
    p.add_argument("--steps", default="step0,step512,step1536", help="reference checkpoints to time")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--repeats", type=int, default=2, help="timed runs of the 160M-shaped model")
    p.add_argument("--skip-160m", action="store_true")
    p.add_argument("--shape-of", type=Path, action="append", default=[], help="also a random model of this store's shape")
    args = p.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}, device {args.device}",
        flush=True,
    )
    rows = []
    if args.reference.is_dir():
        ref = bench_reference(args.reference, args.device, args.steps.split(","))
        rows.append(("reference run (6 x 8, d_model 256)", *np.mean(ref, axis=0)))
    for store in args.shape_of:
        rows.append((f"{store.name} shape, random weights", *np.mean(bench_shape_of(store, args.device, args.repeats), axis=0)))
    if not args.skip_160m:
        rows.append(("Pythia-160M-shaped, random weights", *np.mean(bench_160m(args.device, args.repeats), axis=0)))
    print(
        "\n| model | load (s) | evaluate (s) | seconds per checkpoint | CPU seconds per checkpoint |\n"
        "| --- | ---: | ---: | ---: | ---: |"
    )
    for name, load, ev, cpu in rows:
        print(f"| {name} | {load:.2f} | {ev:.2f} | {load + ev:.2f} | {cpu:.1f} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
