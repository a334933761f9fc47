"""CPU-seconds per checkpoint of the ablation lens (`precompute.lenses.ablation`) against the plain way, same answers.

The plain way: one forward pass per head through transformers, with a forward pre-hook on the layer's output
projection (GPT-2's ``attn.c_proj``, GPT-NeoX's ``attention.dense``, Llama's ``o_proj``) that replaces that head's
d_head slice of its input by the head's mean over the text's tokens (read by the same hooks in one intact pass). The
lens: every head of a layer a lane of one batched computation over the intact pass's layer input
(`ablation_pass`). Both run on the same text and probe sequences (the evaluation set's shapes: N text sequences of T
tokens and probe sequences of 2R = T), and the run checks their per-token losses agree (the largest difference is
printed).

Two shapes:

- ``d128``: the induction-d128 run's (GPT-2, 2 layers x 8 heads, d_model 128, MLP 512, context 64, vocabulary 256),
  random init, or ``--checkpoint runs/ih-d128-s1234/step4000``; 32 text sequences. Every head, both ways.
- ``pythia160m``: Pythia-160M's (GPT-NeoX, 12 layers x 12 heads, d_model 768, vocabulary 50,304), random init,
  T = 256, ``--sequences`` text sequences (default 4) and 4 probe sequences. The plain way takes long there: the heads
  of the first and the last layer are timed both ways, and each way's checkpoint is implied by scaling its measured
  CPU-seconds by its multiply-adds over every head against those of the timed heads (the plain way's heads all cost
  one forward pass; the lens's lanes of a layer cost less the higher the layer, by one block per layer, so the first
  and the last layer's span the rest). It also prints ABLATION_SECONDS_160M, the lens at 32 + 8 sequences (the
  figure ``headwatch plan`` prices with), implied the same way.

Each way runs in a fresh worker process (`benchmarks.common.in_worker`), warmed up on one sequence and one layer's
heads (lazy initialisation kept out of the timing), timed ``--repeats`` times (the least CPU-seconds kept: on a shared
machine the others' load only adds), which reports its CPU-seconds
(``time.process_time``, every thread; run with OMP_NUM_THREADS=1 on a shared machine) and its peak resident memory
(``ru_maxrss``; on CUDA ``torch.cuda.max_memory_allocated``). The multiply-adds of both ways are counted
(`precompute.costs.ablation_token_macs`) and printed beside the measurement.

    OMP_NUM_THREADS=1 python -m benchmarks.bench_ablation --shape d128 [--checkpoint DIR] [--device cpu] [--repeats 5]
    OMP_NUM_THREADS=1 python -m benchmarks.bench_ablation --shape pythia160m [--sequences 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch

from benchmarks.common import in_worker, torch_machine
from benchmarks.shapes import pythia_160m_config
from headwatch.families.forward import architecture, parameters
from headwatch.precompute.lenses.ablation import ablated_losses, ablation_pass

PROBE = 4  # probe sequences in the pythia160m shape (the lens runs 8; a fixed share of the work either way)


def d128_config() -> Any:
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=256, n_embd=128, n_layer=2, n_head=8, n_inner=512, n_positions=64, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0
    )


def make_model(shape: str, checkpoint: str | None, device: str) -> Any:
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel, GPTNeoXForCausalLM

    if checkpoint:
        return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).to(device).eval()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(d128_config()) if shape == "d128" else GPTNeoXForCausalLM(pythia_160m_config())
    return model.to(device).eval()


def sequences(shape: str, n_text: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Random text ids ``(n_text, T)`` and probe ids (R random tokens twice), and the layers timed."""
    t = 64 if shape == "d128" else 256
    gen = torch.Generator().manual_seed(1)
    text = torch.randint(0, vocab, (n_text, t), generator=gen)
    first = torch.randint(0, vocab, (8 if shape == "d128" else PROBE, t // 2), generator=gen)
    return text, torch.cat([first, first], dim=1), t


def output_projection(model: Any, layer: int) -> torch.nn.Module:
    """The module whose input is the heads' outputs z, head-major (the plain way's hook point)."""
    kind = model.config.model_type
    if kind == "gpt2":
        return model.transformer.h[layer].attn.c_proj
    if kind == "gpt_neox":
        return model.gpt_neox.layers[layer].attention.dense
    return model.model.layers[layer].self_attn.o_proj


def plain_losses(model: Any, ids: torch.Tensor, batch: int) -> np.ndarray:
    out = []
    for s in range(0, len(ids), batch):
        chunk = ids[s : s + batch].to(model.device)
        logits = model(input_ids=chunk, use_cache=False).logits[:, :-1].float()
        lost = torch.nn.functional.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none")
        out.append(lost.double().cpu())
    return torch.cat(out).numpy()


@torch.no_grad()
def plain(model: Any, text: torch.Tensor, probe: torch.Tensor, layers: list[int], batch: int) -> dict[str, np.ndarray]:
    """One forward pass per head, its slice of the output projection's input replaced by its mean over the text."""
    cfg = model.config
    n_layers, n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
    d_head = cfg.hidden_size // n_heads
    sums = [torch.zeros(cfg.hidden_size, dtype=torch.float64) for _ in range(n_layers)]

    def keep(layer: int) -> Any:
        def hook(module: Any, args: tuple[torch.Tensor, ...]) -> None:
            sums[layer] += args[0].double().sum(dim=(0, 1)).cpu()

        return hook

    handles = [output_projection(model, layer).register_forward_pre_hook(keep(layer)) for layer in range(n_layers)]
    plain_losses(model, text, batch)
    for h in handles:
        h.remove()
    means = [s / text[..., :].numel() for s in sums]
    out = {}
    for layer in layers:
        for head in range(n_heads):
            sl = slice(head * d_head, (head + 1) * d_head)
            mean = means[layer][sl].float().to(model.device)

            def swap(
                module: Any, args: tuple[torch.Tensor, ...], sl: slice = sl, mean: torch.Tensor = mean
            ) -> tuple[torch.Tensor]:
                z = args[0].clone()
                z[..., sl] = mean.to(z.dtype)
                return (z,)

            handle = output_projection(model, layer).register_forward_pre_hook(swap)
            out[f"{layer}.{head}.text"] = plain_losses(model, text, batch)
            out[f"{layer}.{head}.probe"] = plain_losses(model, probe, batch)
            handle.remove()
    return out


@torch.no_grad()
def batched(model: Any, text: torch.Tensor, probe: torch.Tensor, layers: list[int], batch: int) -> dict[str, np.ndarray]:
    """The lens's computation: the text's pass (the heads' means found in its intact pass), then the probe's, every
    head of the chosen layers a lane."""
    arch, params = architecture(model, sampler=False), parameters(model)
    device = model.device
    means, _, text_ablated, _ = ablation_pass(arch, params, text.to(device), batch=batch, layers=layers)
    _, probe_ablated = ablated_losses(arch, params, probe.to(device), means, batch=batch, layers=layers)
    out = {}
    for name, ablated in (("text", text_ablated), ("probe", probe_ablated)):
        for layer in layers:
            for head in range(arch.n_heads):
                out[f"{layer}.{head}.{name}"] = ablated[layer, head][:, 1:]
    return out


def worker(args: argparse.Namespace) -> None:
    """Time one way in this process and print its JSON line (CPU-seconds, peak memory, losses saved to a file)."""
    model = make_model(args.shape, args.checkpoint, args.device)
    text, probe, _ = sequences(args.shape, args.sequences, model.config.vocab_size)
    layers = [int(x) for x in args.layers.split(",")]
    way = plain if args.worker == "plain" else batched
    way(model, text[:1], probe[:1], layers[:1], args.batch)  # warm-up: lazy initialisation outside the timing
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    cpus, walls = [], []
    for _ in range(args.repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        losses = way(model, text, probe, layers, args.batch)
        if args.device == "cuda":
            torch.cuda.synchronize()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - t0)
    cpu, wall = min(cpus), min(walls)
    np.savez(args.out, **losses)  # type: ignore[arg-type]  # numpy's stub types the keywords as allow_pickle
    peak = (
        torch.cuda.max_memory_allocated() if args.device == "cuda" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    print(json.dumps({"cpu": cpu, "wall": wall, "cpus": cpus, "peak_bytes": peak}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=("d128", "pythia160m"), default="d128")
    p.add_argument("--checkpoint", default=None, help="d128: a checkpoint folder instead of random init")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--sequences", type=int, default=None, help="text sequences (d128: 32, pythia160m: 4)")
    p.add_argument("--batch", type=int, default=8, help="sequences per forward pass (both ways)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each way in its worker; the least CPU-s is kept")
    p.add_argument("--worker", choices=("plain", "batched"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--layers", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sequences is None:
        args.sequences = 32 if args.shape == "d128" else 4
    if args.worker:
        worker(args)
        return
    from headwatch.analysis.store.lenses.attention import INDUCTION_SEQUENCES
    from headwatch.families.registry import model_geometry, model_shape
    from headwatch.precompute.costs import ABLATION_REFERENCE, ablation_macs

    config = (d128_config() if args.shape == "d128" and not args.checkpoint else None) or (
        pythia_160m_config() if args.shape == "pythia160m" else None
    )
    if config is None:
        config = make_model(args.shape, args.checkpoint, "cpu").config
    n_layers = config.num_hidden_layers
    layers = list(range(n_layers)) if args.shape == "d128" else [0, n_layers - 1]
    layer_arg = ",".join(map(str, layers))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for way in ("plain", "batched"):
            extra = ["--checkpoint", args.checkpoint] if args.checkpoint else []
            results[way] = in_worker(
                "benchmarks.bench_ablation",
                *("--shape", args.shape, "--device", args.device, "--sequences", str(args.sequences)),
                *("--batch", str(args.batch), "--worker", way, "--layers", layer_arg, "--out", f"{tmp}/{way}.npz", *extra),
                *("--repeats", str(args.repeats)),
            )
            results[way]["losses"] = dict(np.load(f"{tmp}/{way}.npz"))
    a, b = results["plain"]["losses"], results["batched"]["losses"]
    diff = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
    cfg = config.to_dict()
    geometry = model_geometry(model_shape(cfg), cfg)
    t = 64 if args.shape == "d128" else 256
    n_probe = 8 if args.shape == "d128" else PROBE
    timed = ablation_macs(geometry, t, args.sequences, n_probe, layers=layers, contexts=False)
    whole = ablation_macs(geometry, t, args.sequences, n_probe, contexts=False)
    macs = dict(zip(("batched", "plain"), timed, strict=True))
    every = dict(zip(("batched", "plain"), whole, strict=True))
    implied = {way: results[way]["cpu"] * every[way] / macs[way] for way in ("plain", "batched")}
    print(f"# {torch_machine()}")
    print(
        f"# shape {args.shape}{' ' + args.checkpoint if args.checkpoint else ''}: {args.sequences} text + {n_probe} probe "
        f"sequences of {t} tokens; heads of layers {layer_arg} timed; largest per-token loss difference {diff:.2e} nats"
    )
    print(
        "| way | CPU-s (timed heads) | wall-s | peak memory | multiply-adds (timed) | multiply-adds (checkpoint) "
        "| CPU-s per checkpoint (implied) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for way in ("plain", "batched"):
        r = results[way]
        print(
            f"| {way} | {r['cpu']:.2f} | {r['wall']:.2f} | {r['peak_bytes'] / 2**20:.0f} MiB | {macs[way]:.3g} | "
            f"{every[way]:.3g} | {implied[way]:.2f} |"
        )
    if args.repeats > 1:
        for way in ("plain", "batched"):
            print(f"# {way}: CPU-s of each of {args.repeats} runs: {', '.join(f'{c:.3f}' for c in results[way]['cpus'])}")
    print(
        f"# ratio plain / batched: CPU-seconds {results['plain']['cpu'] / results['batched']['cpu']:.2f}x (timed heads), "
        f"{implied['plain'] / implied['batched']:.2f}x (checkpoint, implied); multiply-adds "
        f"{every['plain'] / every['batched']:.2f}x"
    )
    if args.shape == "pythia160m":  # the figure headwatch plan prices with: the lens at 32 + 8 sequences, contexts included
        ref_n, ref_t = ABLATION_REFERENCE
        lens = ablation_macs(geometry, ref_t, ref_n, INDUCTION_SEQUENCES)[0]
        figure = implied["batched"] * lens / every["batched"]
        print(f"# ABLATION_SECONDS_160M (implied at {ref_n} + {INDUCTION_SEQUENCES} x {ref_t}): {figure:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
