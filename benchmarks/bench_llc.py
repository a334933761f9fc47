"""Seconds per refined-LLC estimate (`precompute.lenses.llc`, devinterp SGLD), on this machine.

Timed as the stage runs an estimate (the model loaded once per checkpoint, then one
`estimate_llc` per head and one for the whole model) under the default sampler settings
(`precompute.settings.SamplerSettings`, or ``--draws`` / ``--batch-size`` / ``--sequences``):

- the reference run's checkpoints (``--reference runs/shakespeare-pythia-6x8``; 6 layers x 8 heads,
  d_model 256, 4.9M parameters) on its held-out split: a head of the first layer (the backward pass
  runs through every layer), one of the last, and the whole model;
- a Pythia-160M-shaped GPT-NeoX with random weights (12 layers x 12 heads, d_model 768, vocabulary
  50,304; 162M parameters) on random token ids of the same length: the same three estimates.

Prints a table of wall and CPU seconds per estimate and the implied seconds per checkpoint
(n_layers x n_heads head estimates, the average of the first and last layer's, plus the whole model).
Nothing is written outside a temporary folder.

    python -m benchmarks.bench_llc --reference runs/shakespeare-pythia-6x8 [--device cpu] [--skip-160m]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.shapes import pythia_160m_config
from headwatch.analysis.store.lenses.llc import SamplerSettings
from headwatch.precompute.evalset import held_out_bytes, make_eval_set
from headwatch.precompute.lenses.attention import load_model
from headwatch.precompute.lenses.llc import estimate_llc, head_masks, sampler_sequences

ESTIMATES = ("first-layer head", "last-layer head", "whole model")


def time_estimates(
    model: torch.nn.Module,
    tokens: np.ndarray,
    sampler: SamplerSettings,
    *,
    n_layers: int,
    device: str,
    scratch: Path,
    label: str,
    which: tuple[str, ...] = ESTIMATES,
) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds of those of a first-layer head, a last-layer head and the whole model named in ``which``."""
    out = {}
    for name, masks in (
        ("first-layer head", head_masks(model, 0, 0)),
        ("last-layer head", head_masks(model, n_layers - 1, 0)),
        ("whole model", None),
    ):
        if name not in which:
            continue
        c0, t0 = time.process_time(), time.perf_counter()
        est = estimate_llc(model, tokens, masks, sampler, scratch=scratch, device=device)
        if device == "cuda":
            torch.cuda.synchronize()
        out[name] = (time.perf_counter() - t0, time.process_time() - c0)
        print(
            f"{label} {name}: {out[name][0]:.2f} s wall, {out[name][1]:.1f} CPU s, llc {est.llc:.4g} "
            f"+- {est.llc_std:.2g}, init loss {est.init_loss:.4f}",
            flush=True,
        )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, default=Path("runs/shakespeare-pythia-6x8"))
    p.add_argument("--step", default="step1536", help="reference checkpoint to time")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--draws", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--sequences", type=int, default=None)
    p.add_argument("--skip-160m", action="store_true")
    p.add_argument(
        "--estimates",
        nargs="+",
        choices=ESTIMATES,
        default=list(ESTIMATES),
        help="time only these (an estimate of the 160M-shaped model is the slowest by far on a CPU: docs/benchmarks.md)",
    )
    args = p.parse_args()
    sampler = SamplerSettings()
    for name in ("draws", "batch_size", "sequences"):
        if getattr(args, name) is not None:
            sampler = replace(sampler, **{name: getattr(args, name)})
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}, device {args.device}; sampler {sampler.as_meta()}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-llc-") as tmp:
        scratch = Path(tmp) / "scratch"
        if args.reference.is_dir():
            info = json.loads((args.reference / "run.json").read_text())
            data, name = held_out_bytes(info, args.reference)
            es = make_eval_set(
                np.frombuffer(data, np.uint8).astype(np.int64),
                n=32,
                t=256,
                vocab_size=256,
                text=name,
                text_sha256="",
                tokenizer="bytes",
            )
            model = load_model(args.reference / args.step, device=args.device, attn_implementation="sdpa")
            cfg = info["config"]["model"]
            estimate_llc(
                model,
                sampler_sequences(es, sampler),
                head_masks(model, 0, 0),
                replace(sampler, draws=1),
                scratch=scratch,
                device=args.device,
            )  # warm-up
            times = time_estimates(
                model,
                sampler_sequences(es, sampler),
                sampler,
                n_layers=cfg["n_layers"],
                device=args.device,
                scratch=scratch,
                label=f"reference {args.step}",
                which=tuple(args.estimates),
            )
            rows.append(("reference run (6 x 8, d_model 256)", cfg["n_layers"] * cfg["n_heads"], times))
            del model
        if not args.skip_160m:
            from transformers import GPTNeoXForCausalLM

            config = pythia_160m_config()
            torch.manual_seed(0)
            GPTNeoXForCausalLM(config).save_pretrained(Path(tmp) / "p160m")
            model = load_model(Path(tmp) / "p160m", device=args.device, attn_implementation="sdpa")
            ids = np.random.default_rng(0).integers(0, 50304, size=32 * 256 * 2)
            es = make_eval_set(ids, n=32, t=256, vocab_size=50304, text="random ids", text_sha256="", tokenizer="none")
            times = time_estimates(
                model,
                sampler_sequences(es, sampler),
                sampler,
                n_layers=12,
                device=args.device,
                scratch=scratch,
                label="pythia-160m-shaped",
                which=tuple(args.estimates),
            )
            rows.append(("Pythia-160M-shaped, random weights", 144, times))
    print(
        "\n| model | first-layer head (s) | last-layer head (s) | whole model (s) | CPU s per head estimate "
        "| implied s per checkpoint |\n| --- | ---: | ---: | ---: | ---: | ---: |"
    )
    for name, heads, t in rows:
        walls = [f"{t[e][0]:.2f}" if e in t else "not timed" for e in ESTIMATES]
        timed_heads = [t[e] for e in ESTIMATES[:2] if e in t]
        cpu = f"{np.mean([c for _, c in timed_heads]):.1f}" if timed_heads else "not timed"
        # implied: every head at the mean of the timed heads' walls, plus the whole model
        implied = (
            f"{heads * np.mean([w for w, _ in timed_heads]) + t['whole model'][0]:.0f}"
            if timed_heads and "whole model" in t
            else "not timed"
        )
        print(f"| {name} | {' | '.join(walls)} | {cpu} | {implied} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
