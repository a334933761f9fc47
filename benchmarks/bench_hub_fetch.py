"""Benchmark: fetching a Pythia-1.4B-shaped checkpoint from a Hub served on 127.0.0.1.

The checkpoint is one fp16 ``model.safetensors`` with every parameter of
Pythia-1.4B at its real shape (24 layers, d_model 2048, 16 heads of 128, fused
``query_key_value`` (6144, 2048) per layer, MLP 8192, vocab 50304; 1.41 B
parameters, ~2.8 GB), random values, written once under ``--workdir``. A fake Hub
(`benchmarks.fakehub`) serves it from disk with HTTP range support.

Measures, and prints as Markdown for the README:

(a) the range reader alone (header, then the ranges), for ``qk`` and for ``qk`` + ``ov``,
    each for the default merge gap and for a merge gap of 0: bytes fetched against the
    file, against the fused ``query_key_value`` tensors (Q, K and V rows: 24 x 6144 x
    2048 x 2 B), against the Q and K rows alone (2/3 of those) and against what the
    matrices need (Q and K rows; for ``ov`` also the V rows and ``attention.dense``);
    requests; seconds; counted by the client and, independently, by the server; the
    factors read over HTTP are checked equal to the file's;
(b) the whole job, ``run_precompute`` on the Hub source, over ``--revisions``
    branches served from the same bytes under distinct LFS digests (so each is
    computed, not skipped as a duplicate): seconds per checkpoint, with checkpoint
    t+1 fetched while t is computed; and the compute alone (extract + statistics)
    of one checkpoint, for comparison.

(c) the same ranges through huggingface_hub's ``HfFileSystem.cat_ranges`` (default
    settings and ``cache_type="none"``): bytes the server sent, requests, seconds.

Usage: python -m benchmarks.bench_hub_fetch [--workdir /tmp/headwatch-hub-bench] [--revisions 3] [--matrices qk,ov]
       [--no-job] (skip (b))
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import socket
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

REPO_ID = "bench/pythia-1.4b-shaped"
D, LAYERS, HEADS, FF, VOCAB = 2048, 24, 16, 8192, 50304
CONFIG = {
    "model_type": "gpt_neox",
    "architectures": ["GPTNeoXForCausalLM"],
    "hidden_size": D,
    "num_attention_heads": HEADS,
    "num_hidden_layers": LAYERS,
    "intermediate_size": FF,
    "vocab_size": VOCAB,
    "rotary_pct": 0.25,
    "max_position_embeddings": 2048,
    "torch_dtype": "float16",
}


def write_checkpoint(path: Path) -> float:
    """Every Pythia-1.4B parameter at its real shape, fp16, random; seconds taken (0 if it exists)."""
    import torch
    from safetensors.torch import save_file

    if path.is_file():
        return 0.0
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    sigma0 = (2 / (5 * D)) ** 0.5

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * sigma0).half()

    state = {"gpt_neox.embed_in.weight": rand(VOCAB, D)}
    for i in range(LAYERS):
        p = f"gpt_neox.layers.{i}."
        state[p + "attention.query_key_value.weight"] = rand(3 * D, D)
        state[p + "attention.query_key_value.bias"] = rand(3 * D)
        state[p + "attention.dense.weight"] = rand(D, D)
        state[p + "attention.dense.bias"] = rand(D)
        state[p + "mlp.dense_h_to_4h.weight"] = rand(FF, D)
        state[p + "mlp.dense_h_to_4h.bias"] = rand(FF)
        state[p + "mlp.dense_4h_to_h.weight"] = rand(D, FF)
        state[p + "mlp.dense_4h_to_h.bias"] = rand(D)
        for ln in ("input_layernorm", "post_attention_layernorm"):
            state[p + ln + ".weight"] = rand(D)
            state[p + ln + ".bias"] = rand(D)
    state["gpt_neox.final_layer_norm.weight"] = rand(D)
    state["gpt_neox.final_layer_norm.bias"] = rand(D)
    state["embed_out.weight"] = rand(VOCAB, D)
    tmp = path.with_suffix(".partial")
    save_file(state, str(tmp), metadata={"format": "pt"})
    tmp.rename(path)
    return time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "headwatch-hub-bench"))
    ap.add_argument("--revisions", type=int, default=3, help="checkpoints for the end-to-end run")
    ap.add_argument("--matrices", default="qk,ov", help="per-head matrices of the end-to-end run (b)")
    ap.add_argument("--no-job", action="store_true", help="measure (a) only")
    args = ap.parse_args()
    work = Path(args.workdir)
    port = free_port()
    # before huggingface_hub is imported: the local Hub, an empty cache, no token sent anywhere
    os.environ.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(work / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1")
    os.environ.pop("HF_TOKEN", None)
    os.environ.pop("HF_HUB_OFFLINE", None)

    import torch
    from huggingface_hub import HfApi
    from safetensors import safe_open

    from benchmarks.fakehub import FakeHub, Repo
    from headwatch.analysis.weights.heads import checkpoint_statistics
    from headwatch.families.extract import attention_tensor_names, extract_heads
    from headwatch.families.registry import model_shape
    from headwatch.precompute.job.run import run_precompute
    from headwatch.precompute.settings import FetchSettings, RunOptions
    from headwatch.precompute.sources.fetch import HubHttp, Meter, human_bytes
    from headwatch.precompute.sources.ranges import element_masks, header_from_metadata, header_read_cost, read_tensors

    ckpt = work / "model.safetensors"
    t_write = write_checkpoint(ckpt)
    size = ckpt.stat().st_size
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"checkpoint: {size / 1e9:.3f} GB fp16 safetensors" + (f" (written in {t_write:.0f} s)" if t_write else " (reused)"))

    shape = model_shape(CONFIG)
    with safe_open(str(ckpt), framework="pt") as f:
        names = attention_tensor_names(shape, f.keys(), matrices=("qk", "ov"))
        local = {n: f.get_tensor(n) for n in names}
    fused = sum(t.numel() * t.element_size() for n, t in local.items() if "query_key_value" in n)  # Q, K and V rows
    dense = sum(t.numel() * t.element_size() for n, t in local.items() if "attention.dense" in n)
    qk_rows = fused * 2 // 3  # the Q and K rows alone
    needed = {"qk": qk_rows, "qk,ov": fused + dense}  # what each set of matrices reads at the least
    print(
        f"fused query_key_value tensors: {fused:,} B; their Q and K rows: {qk_rows:,} B; attention.dense: {dense:,} B; "
        f"file: {size:,} B\n"
    )
    reference = extract_heads(shape, local)

    repo = Repo()
    commits = []
    for i in range(args.revisions):
        commit = repo.add(f"step{1000 * (i + 1)}", {"model.safetensors": ckpt, "config.json": json.dumps(CONFIG).encode()})
        repo.lfs_sha256[(commit, "model.safetensors")] = f"{i:064x}"  # distinct digests: each is computed
        commits.append(commit)

    with FakeHub(port=port) as hub:
        hub.repos[REPO_ID] = repo
        url = f"{hub.url}/{REPO_ID}/resolve/{commits[0]}/model.safetensors"

        # (a) the range reader alone
        rows = []
        for label, gap, matrices in (
            ("qk, default merge gap (4 MiB): one range per layer", FetchSettings().range_merge_gap, "qk"),
            ("qk, merge gap 0: exactly the Q and K rows", 0, "qk"),
            ("qk + ov, default merge gap (4 MiB)", FetchSettings().range_merge_gap, "qk,ov"),
            ("qk + ov, merge gap 0: exactly the QKV and dense tensors", 0, "qk,ov"),
        ):
            meter = Meter()
            http = HubHttp(FetchSettings(range_merge_gap=gap), meter)
            sent_before = hub.sent
            t0 = time.perf_counter()
            get = functools.partial(http.get_range, url, what="bench")
            meta = HfApi(endpoint=hub.url, token=False).parse_safetensors_file_metadata(
                REPO_ID, "model.safetensors", revision=commits[0]
            )  # the header, read by huggingface_hub
            header = header_from_metadata(meta, file_size=size, where="bench")
            header_fetched, header_requests = header_read_cost(header.header_bytes, size)
            meter.add_fetched(header_fetched)
            for _ in range(header_requests):
                meter.add_request()
            wanted = tuple(matrices.split(","))
            masks = element_masks(shape, {n: s.shape for n, s in header.tensors.items()}, matrices=wanted)
            tensors = read_tensors(get, header, masks, merge_gap=gap, concurrency=4, where="bench")
            seconds = time.perf_counter() - t0
            for matrix, pair in extract_heads(shape, tensors, matrices=wanted).items():
                assert all(torch.equal(a, b) for a, b in zip(pair, reference[matrix], strict=True)), f"{matrix} over HTTP differs"
            served = hub.sent - sent_before
            assert served == meter.fetched
            rows.append((label, meter.fetched, meter.requests, seconds, needed[matrices]))
            del tensors

        print("(a) range reader, one checkpoint, loopback HTTP")
        print(
            "\n| fetch | bytes fetched | / file | / fused QKV tensors | / Q and K rows | / what the matrices need "
            "| requests | seconds |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for label, n, req, sec, need in rows:
            print(
                f"| {label} | {n:,} | {n / size:.3f} | {n / fused:.3f} | {n / qk_rows:.3f} | {n / need:.3f} | {req} | {sec:.2f} |"
            )

        # (c) the same byte ranges through huggingface_hub's HfFileSystem.cat_ranges, as
        # configured by default and with cache_type="none" (block_size=0 cannot seek)
        from huggingface_hub import HfFileSystem

        from headwatch.precompute.sources.ranges import needed_spans, plan_ranges

        masks = element_masks(shape, {n: s.shape for n, s in header.tensors.items()}, matrices=("qk",))
        gap = FetchSettings().range_merge_gap
        plan = plan_ranges([r for n, m in masks.items() for r in needed_spans(header.tensors[n], m)], merge_gap=gap)
        asked = sum(b - a for a, b in plan)
        fs_rows = []
        for label, kw in (
            ("HfFileSystem.cat_ranges, defaults", {}),
            ('HfFileSystem.cat_ranges, cache_type="none"', {"cache_type": "none"}),
        ):
            fs = HfFileSystem(endpoint=hub.url, token=False, skip_instance_cache=True)
            sent_before, logged_before = hub.sent, len(hub.log)
            t0 = time.perf_counter()
            blobs = fs.cat_ranges(
                [f"{REPO_ID}@{commits[0]}/model.safetensors"] * len(plan), [a for a, _ in plan], [b for _, b in plan], **kw
            )
            seconds = time.perf_counter() - t0
            assert [len(x) for x in blobs] == [b - a for a, b in plan]
            fs_rows.append((label, hub.sent - sent_before, len(hub.log) - logged_before, seconds))
            del blobs
        print(f"\n(c) the qk ranges of (a) (default merge gap: {len(plan)} ranges, {asked:,} B) through HfFileSystem")
        print("\n| fetch | bytes served | / bytes asked | requests (API + ranges) | seconds |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for label, n, req, sec in fs_rows:
            print(f"| {label} | {n:,} | {n / asked:.3f} | {req} | {sec:.2f} |")
        if args.no_job:
            return

        # compute alone, one checkpoint, from tensors in memory
        job_matrices = tuple(args.matrices.split(","))
        t0 = time.perf_counter()
        for left, right in extract_heads(shape, local, matrices=job_matrices).values():
            checkpoint_statistics(left, right, device="cpu")
        t_compute = time.perf_counter() - t0

        # (b) the whole job over N revisions
        out = work / "store"
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        report = run_precompute(
            REPO_ID,
            out,
            RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, matrices=job_matrices),
        )
        t_total = time.perf_counter() - t0
        assert report.computed == [1000 * (i + 1) for i in range(args.revisions)], report
    n = args.revisions
    print(f"\n(b) whole job, {n} checkpoints (python -m headwatch.precompute --source {REPO_ID} --matrices {args.matrices}), CPU")
    print("\n| measurement | value |\n| --- | ---: |")
    print(f"| seconds per checkpoint, end to end (fetch overlapped with compute) | {t_total / n:.1f} |")
    print(f"| seconds per checkpoint, compute alone (extract + every statistic) | {t_compute:.1f} |")
    print(f"| bytes fetched per checkpoint | {report.bytes_fetched // n:,} ({human_bytes(report.bytes_fetched / n)}) |")
    print(f"| HTTP GETs per checkpoint (config.json, header, ranges; plus one model_info API call) | {report.requests / n:.0f} |")
    print(f"| peak scratch disk | {report.peak_disk:,} B |")
    best = min(r[1] for r in rows)
    print(
        f"\ntarget fetched <= 1.2 x Q/K: default gap vs fused QKV tensors {rows[0][1] / fused:.3f}; "
        f"gap 0 vs Q and K rows {best / qk_rows:.3f}"
    )


if __name__ == "__main__":
    main()
