"""Every lens on one device: seconds per checkpoint and peak memory, stage by stage.

The command a session lent a GPU runs first (``python -m benchmarks.bench_lenses --device cuda``,
with ``PYTHONPATH=.`` from the repository root), beside ``pytest -m cuda``. It writes a
byte-level GPT-NeoX run of the chosen shape (random weights at Pythia's small init, two
checkpoints, the second a perturbed copy of the first, saved by transformers as float32
safetensors; an evaluation text of generated words) and runs the precompute job on it once per
stage, in this process, each into a fresh store:

- ``qk``, ``qk,ov``, ``layers`` (with qk, as a store needs a per-head matrix): the weight statistics
  (`--matrices`), 2 checkpoints;
- ``attention``: the forward-pass lens (N x T evaluation tokens, the induction probe), 2 checkpoints;
- ``llc``: the refined LLC of every head and the whole model at one checkpoint, under the default
  sampler settings (`precompute.settings.SamplerSettings`) unless ``--llc-draws`` says otherwise.

Seconds per checkpoint are the stage's wall time over the checkpoints it computed (the store's
commit included; the model's writing excluded). Peak memory: on CUDA the stage's
``torch.cuda.max_memory_allocated`` (reset before each stage); on CPU the process's peak resident
memory (VmHWM) after the stage, which only grows: read it as an upper bound. Prints a Markdown
table for the docs' benchmarks page.

Shapes: ``tiny`` (2 x 4 heads, d_model 64: a smoke run, seconds on a CPU), ``reference`` (the
shipped runs' 6 x 8, d_model 256), ``160m`` (Pythia-160M's 12 x 12, d_model 768, MLP 3072; the
byte vocabulary of the runs trained here, not Pythia's 50,304).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import tempfile
import time
from pathlib import Path

import torch

SHAPES = {  # (layers, heads, d_model, d_mlp, context)
    "tiny": (2, 4, 64, 256, 64),
    "reference": (6, 8, 256, 1024, 256),
    "160m": (12, 12, 768, 3072, 2048),
}
STAGES: dict[str, dict[str, tuple[str, ...]]] = {
    "qk": {"matrices": ("qk",)},
    "qk,ov": {"matrices": ("qk", "ov")},
    "layers": {"matrices": ("qk", "layers")},
    "attention": {"matrices": ("qk",), "lenses": ("attention",)},
    "llc": {"matrices": ("qk",), "lenses": ("llc",)},
}


def write_run(root: Path, shape: str) -> Path:
    """Two checkpoints of a byte-level GPT-NeoX of ``shape`` under ``root/run``, and ``root/eval.txt``."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    layers, heads, d_model, d_mlp, context = SHAPES[shape]
    config = GPTNeoXConfig(
        vocab_size=256,
        hidden_size=d_model,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=d_mlp,
        max_position_embeddings=context,
        rotary_pct=0.25,
        initializer_range=(2 / (5 * d_model)) ** 0.5,
    )
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(config)
    run = root / "run"
    model.save_pretrained(run / "step0")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    model.save_pretrained(run / "step1")
    (run / "run.json").write_text(
        json.dumps(
            {
                "tokens_per_step": 2048,
                "corpus": {"name": "generated words", "source": "bench_lenses", "tokenizer": "bytes (vocabulary 256)"},
            }
        )
    )
    rng = random.Random(0)
    words = ["thou", "art", "the", "king", "and", "I", "shall", "speak", "no", "more", "of", "this", "night"]
    (root / "eval.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(6000)))
    return run


def peak_memory(device: str) -> float:
    """GiB: CUDA's peak allocation since the last reset, or this process's peak resident memory."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def main() -> None:
    from headwatch.analysis.store.lenses.llc import LlcOptions, SamplerSettings
    from headwatch.precompute.job.run import run_precompute
    from headwatch.precompute.settings import RunOptions

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", choices=tuple(SHAPES), default="reference")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)} ('qk,ov' as qk+ov)")
    p.add_argument("--eval-sequences", type=int, default=32)
    p.add_argument("--eval-length", type=int, default=None, help="default: the shape's context, at most 256")
    p.add_argument("--llc-draws", type=int, default=None)
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HEADWATCH_EMBEDDINGS", "0")
    stages = [s.replace("+", ",") for s in args.stages.replace("qk,ov", "qk+ov").split(",")]
    root = args.workdir or Path(tempfile.mkdtemp(prefix="headwatch-bench-lenses-"))
    run = write_run(root, args.shape)
    t = args.eval_length or min(SHAPES[args.shape][4], 256)
    sampler = SamplerSettings() if args.llc_draws is None else SamplerSettings(draws=args.llc_draws)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {os.cpu_count()} cores"
    print(
        f"shape {args.shape} {SHAPES[args.shape]}, device {device_name}, torch {torch.__version__}, "
        f"eval {args.eval_sequences} x {t} tokens"
    )
    print("| stage | checkpoints | s per checkpoint | peak memory (GiB) |\n|---|---|---|---|")
    for stage in stages:
        spec = STAGES[stage]
        llc = "llc" in spec.get("lenses", ())
        options = RunOptions(
            device=args.device,
            progress=False,
            lens_options={"embeddings": {"on": False}, "llc": LlcOptions(steps="1" if llc else None, sampler=sampler)},
            matrices=spec["matrices"],
            lenses=spec.get("lenses", ()),
            eval_text=str(root / "eval.txt"),
            eval_sequences=args.eval_sequences,
            eval_length=t,
        )
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        run_precompute(run, root / f"store-{stage}", options)
        if args.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        n = 1 if llc else 2
        print(f"| {stage} | {n} | {seconds / n:.2f} | {peak_memory(args.device):.2f} |", flush=True)


if __name__ == "__main__":
    main()
