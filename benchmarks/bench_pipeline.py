"""Benchmark: one Pythia-1.4B-shaped checkpoint through the whole precompute pipeline.

Measures, in one run on one machine, for W_QK alone (``--matrices qk``; OV: benchmarks/bench_ov.py):
  (a) the whole per-checkpoint pipeline (hash, read attention tensors, extract,
      every statistic, commit), on a full-size fp16 safetensors file on disk;
  (b) its spectrum part alone (QR core, all 384 heads);
  (c) dense per-head d_model x d_model ``svdvals`` (timed on a sample of heads,
      extrapolated to 384; float32, the cheaper precision);
  (d) per-head thin SVDs of W_Q and W_K followed by the d_head x d_head core
      (what the reference dashboard does), all 384 heads, one at a time;
checks that the spectra agree, and breaks (a) down into reading, spectrum and
element-wise time. Prints a Markdown table for the README.

Usage: python -m benchmarks.bench_pipeline [--workdir /tmp/headwatch-bench] [--dense-sample 3]
The checkpoint (~2.8 GB) is written once and reused.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from headwatch.analysis.stats.elementwise import elementwise_statistics
from headwatch.analysis.stats.spectrum import singular_values
from headwatch.analysis.weights.heads import checkpoint_vectors
from headwatch.families.extract import attention_tensor_names, extract_qk
from headwatch.families.registry import model_shape
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.checkpoints import file_sha256, weight_files
from headwatch.precompute.sources.weights import read_tensors, tensor_names
from headwatch.precompute.store.pairs import HeadVectors, pair_rows

# Pythia-1.4B: 24 layers, 16 heads, d_model 2048, d_head 128, vocab 50304, MLP 8192.
CONFIG: dict[str, Any] = {
    "model_type": "gpt_neox",
    "architectures": ["GPTNeoXForCausalLM"],
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "intermediate_size": 8192,
    "vocab_size": 50304,
    "rotary_pct": 0.25,
    "max_position_embeddings": 2048,
    "torch_dtype": "float16",
}


def write_checkpoint(folder: Path, *, seed: int = 0, attn_out_std: float = 0.0, config: dict[str, Any] | None = None) -> None:
    """A full-size fp16 GPT-NeoX state dict (``config``, default `CONFIG`: Pythia-1.4B): random QKV
    weights at Pythia's small init scale, the attention output projection random with
    ``attn_out_std`` (0: zeros), zeros elsewhere. Kept if the folder already holds one."""
    import json

    from safetensors.torch import save_file

    if (folder / "model.safetensors").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    config = config or CONFIG
    d, layers = config["hidden_size"], config["num_hidden_layers"]
    ff, vocab = config["intermediate_size"], config["vocab_size"]
    gen = torch.Generator().manual_seed(seed)
    sigma0 = (2 / (5 * d)) ** 0.5
    state = {"gpt_neox.embed_in.weight": torch.zeros(vocab, d, dtype=torch.float16)}
    for i in range(layers):
        p = f"gpt_neox.layers.{i}."
        qkv = torch.randn(3 * d, d, generator=gen) * sigma0
        state[p + "attention.query_key_value.weight"] = qkv.half()
        state[p + "attention.query_key_value.bias"] = torch.zeros(3 * d, dtype=torch.float16)
        dense = torch.randn(d, d, generator=gen) * attn_out_std if attn_out_std else torch.zeros(d, d)
        state[p + "attention.dense.weight"] = dense.half()
        state[p + "attention.dense.bias"] = torch.zeros(d, dtype=torch.float16)
        state[p + "mlp.dense_h_to_4h.weight"] = torch.zeros(ff, d, dtype=torch.float16)
        state[p + "mlp.dense_h_to_4h.bias"] = torch.zeros(ff, dtype=torch.float16)
        state[p + "mlp.dense_4h_to_h.weight"] = torch.zeros(d, ff, dtype=torch.float16)
        state[p + "mlp.dense_4h_to_h.bias"] = torch.zeros(d, dtype=torch.float16)
        for ln in ("input_layernorm", "post_attention_layernorm"):
            state[p + ln + ".weight"] = torch.ones(d, dtype=torch.float16)
            state[p + ln + ".bias"] = torch.zeros(d, dtype=torch.float16)
    state["gpt_neox.final_layer_norm.weight"] = torch.ones(d, dtype=torch.float16)
    state["gpt_neox.final_layer_norm.bias"] = torch.zeros(d, dtype=torch.float16)
    state["embed_out.weight"] = torch.zeros(vocab, d, dtype=torch.float16)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def thin_svd_then_core(w_q: torch.Tensor, w_k: torch.Tensor) -> torch.Tensor:
    """Per head: W_Q = U_q S_q V_q^T, W_K = U_k S_k V_k^T, then svdvals(S_q U_q^T U_k S_k)."""
    out = []
    for q, k in zip(w_q.reshape(-1, *w_q.shape[-2:]), w_k.reshape(-1, *w_k.shape[-2:]), strict=True):
        u_q, s_q, _ = torch.linalg.svd(q.double(), full_matrices=False)
        u_k, s_k, _ = torch.linalg.svd(k.double(), full_matrices=False)
        core = (s_q[:, None] * (u_q.T @ u_k)) * s_k[None, :]
        out.append(torch.linalg.svdvals(core))
    return torch.stack(out).reshape(*w_q.shape[:2], -1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "headwatch-bench"))
    ap.add_argument("--dense-sample", type=int, default=3, help="heads timed for (c), extrapolated to all")
    args = ap.parse_args()
    work = Path(args.workdir)
    src = work / "src"
    ckpt = src / "step1000"
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.2f}"
    )
    _, t_write = timed(lambda: write_checkpoint(ckpt))
    size = (ckpt / "model.safetensors").stat().st_size
    print(f"checkpoint: {size / 2**30:.2f} GiB fp16 safetensors (written in {t_write:.1f} s)")

    # once per run, not per checkpoint: the null model's Monte Carlo expectations (cached)
    from headwatch.analysis.rmt.nullmodel import null_expectations

    _, t_null = timed(lambda: null_expectations(2048, 128))

    # hashing reads the whole file: the pipeline runs below then find it in the page cache alike
    files = weight_files(ckpt)
    _, t_hash = timed(lambda: [file_sha256(f) for f in files])

    # (a) the whole pipeline, end to end, as the CLI runs it; with and without the singular
    # vectors, alternating, best of two each (the first run in a process pays a warm-up of a few s)
    out = work / "store"
    runs: dict[int, list[float]] = {8: [], 0: []}
    for k in (8, 0, 8, 0):
        shutil.rmtree(out, ignore_errors=True)
        _, t = timed(
            functools.partial(
                run_precompute,
                src,
                out,
                RunOptions(
                    device="cpu",
                    progress=False,
                    lens_options={"embeddings": {"on": False}, "overlaps": {"k": k}},
                    matrices=("qk",),
                ),
            )
        )
        runs[k].append(t)
    t_pipeline, t_no_vectors = min(runs[8]), min(runs[0])

    # breakdown of (a), stage by stage
    shape = model_shape(CONFIG)

    def read():
        where = tensor_names(files)
        return extract_qk(shape, read_tensors(where, attention_tensor_names(shape, where)))

    (w_q, w_k), t_read = timed(read)
    # (b) the spectrum as the pipeline computes it: one batched call per layer (16 heads)
    sv_core, t_spectrum = timed(lambda: torch.stack([singular_values(w_q[i], w_k[i]) for i in range(shape.n_layers)]))
    # (b') the same with the 8 leading singular vectors, as the pipeline runs it for the overlaps
    (u, v, sv), t_vectors = timed(lambda: checkpoint_vectors(w_q, w_k, 8, values=True))
    held = {"qk": HeadVectors.of(u, v, w_q, w_k, sv)}
    _, t_pair = timed(lambda: pair_rows(0, 1, held, held))

    def elementwise():
        n = shape.d_model**2
        dense = torch.empty(shape.n_heads, shape.d_model, shape.d_model)
        scratch = (torch.empty(shape.n_heads, n), torch.empty(shape.n_heads, n), torch.empty(shape.n_heads, n, dtype=torch.int32))
        for layer in range(shape.n_layers):
            torch.matmul(w_q[layer].transpose(-1, -2), w_k[layer], out=dense)
            elementwise_statistics(dense.view(shape.n_heads, n), scratch=scratch)

    _, t_elem = timed(elementwise)

    # (c) dense svdvals per head, on a sample
    sample = [(0, 0), (11, 7), (23, 15)][: args.dense_sample]
    dense_sv = {}
    t0 = time.perf_counter()
    for layer, head in sample:
        dense_sv[(layer, head)] = torch.linalg.svdvals(w_q[layer, head].T @ w_k[layer, head])[: shape.d_head]
    t_dense_per_head = (time.perf_counter() - t0) / len(sample)
    t_dense = t_dense_per_head * shape.n_layers * shape.n_heads

    # (d) thin SVDs of each factor, then the core
    sv_thin, t_thin = timed(lambda: thin_svd_then_core(w_q, w_k))

    # agreement
    rel_dense = max(float(((sv_core[lh] - dense_sv[lh].double()).abs() / sv_core[lh]).max()) for lh in dense_sv)
    rel_thin = float(((sv_core - sv_thin).abs() / sv_core).max())
    assert rel_dense < 1e-3, f"QR core and dense SVD disagree: {rel_dense}"
    assert rel_thin < 1e-8, f"QR core and thin-SVD core disagree: {rel_thin}"

    rows = [
        ("(a) whole pipeline, per checkpoint (hash + read + extract + all statistics + commit), best of 2", t_pipeline),
        ("    the same without the singular vectors for the level-crossing overlaps (--overlap-k 0)", t_no_vectors),
        ("    of which: sha256 of the 2.8 GB weight file", t_hash),
        ("    of which: read attention tensors + extract per head", t_read),
        ("    of which: element-wise (dense W_QK per layer, moments, histogram, D_KL)", t_elem),
        ("(b) spectrum: QR core, all 384 heads (one batched call per layer), float64", t_spectrum),
        ("(b') spectrum and the 8 leading u, v per head (what (a) runs in place of (b))", t_vectors),
        ("    overlap matrices and relative change with the previous checkpoint, all heads", t_pair),
        (f"(c) dense svdvals of 2048x2048 W_QK per head, float32 (timed on {len(sample)}, x384)", t_dense),
        ("(d) per-head thin SVD of W_Q and W_K, then core (reference dashboard)", t_thin),
    ]
    print("\n| measurement | seconds |\n| --- | ---: |")
    for name, t in rows:
        print(f"| {name} | {t:.2f} |")
    print(f"| once per run, not per checkpoint: null-model Monte Carlo expectations (64 draws) | {t_null:.2f} |")
    print(f"\nratios: (c)/(b) = {t_dense / t_spectrum:.0f}x, (d)/(b) = {t_thin / t_spectrum:.1f}x")
    print(f"spectra agree: QR core vs dense (float32) max rel err {rel_dense:.1e}; vs thin-SVD core {rel_thin:.1e}")
    print(
        f"targets: (b) >= 100x faster than (c): {t_dense / t_spectrum >= 100}; (b) faster than (d): {t_spectrum < t_thin}; "
        f"(a) < 30 s: {t_pipeline < 30}"
    )


if __name__ == "__main__":
    main()
