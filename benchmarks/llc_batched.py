"""The batched refined-LLC sampler against devinterp: equal answers, and the CPU-seconds each takes.

At each of ``--steps`` (checkpoints of a store's run, e.g. before, inside and after the induction
head's emergence), under the store's own sampler settings and sequences, three estimates of every head
and of the whole model, each in its own process (so its CPU-seconds and peak memory are its own):

- ``devinterp`` seed s: devinterp's path (`precompute.lenses.llc.estimate_llc`, one devinterp ``llc`` per
  head, samples in a scratch zarr folder), with the store's seed;
- ``devinterp`` seed s + 1000: an independent devinterp run (other noise, other batch order; devinterp's
  chain c uses seed + c, so seeds s and s + 1 would share three of four chains' noise), the yardstick for
  how far two runs of the same estimator fall from each other;
- ``batched`` seed s: the batched sampler (`precompute.lenses.llc_sampler`), every head of a layer and
  every chain in one computation.

Every estimate is appended to ``--out`` (CSV; a rerun skips (step, path, seed) already there). The summary
(``--summary``, also printed at the end) gives per checkpoint: Spearman's rank correlation of the heads'
estimates, batched vs devinterp and devinterp vs devinterp; the median of their ratio, its 10th and 90th
percentiles and the standard deviation of its logarithm (the spread); the whole-model estimates; and each
path's CPU-seconds and peak resident memory per checkpoint and their ratio. Run it at one thread, niced, on a shared machine:

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.llc_batched --store data/induction-d128 \\
        --source runs/ih-d128-s1234 --steps 800,1400,2500 --out docs/data/llc-batched-induction-d128.csv

``--data NAME`` takes the SGLD loss on another distribution than the store's evaluation sequences (``train``, the
run's training batches; ``repeats``; ``code``; as ``--llc-data`` builds them, `precompute.llc_data`): give it its
own ``--out``.

``--replicates K`` runs K seeds of each path (s, s + 1000, ..., s + 1000 (K - 1)) instead of the three above, and
the summary then adds every pair of runs (devinterp with devinterp, batched with batched, batched with devinterp)
and an exact permutation test of whether the batched sampler's estimates of the heads differ from devinterp's
beyond what its runs differ from each other; ``--jobs J`` runs J processes at a time.

``--shape pythia-160m`` instead times one head of the first layer, one of the last and the whole model of a
randomly initialised Pythia-160M-shaped GPT-NeoX on random ids (``--chains``/``--burnin``/``--draws``, both
paths alike), and prints the implied seconds per checkpoint (144 heads at the mean of the two, plus the
whole model); with ``--count-flops`` it counts instead (torch's ``FlopCounterMode``) the floating-point operations
of one SGLD step of each path for a head of the first and of the last layer, which bound the ratio the batched
sampler can reach at an equal rate of arithmetic.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from benchmarks.shapes import pythia_160m_config

if TYPE_CHECKING:
    from headwatch.analysis.store.lenses.llc import SamplerSettings

FIELDS = (
    "step", "path", "seed", "layer", "head", "llc", "llc_std", "init_loss", "per_chain", "cpu_s", "peak_rss_mb", "wall_s",
    "gpu_peak_mb",
)  # fmt: skip
# (path, seed offset): the second devinterp run's seed is far from the first's, since devinterp's chain c uses
# seed + c: seeds 0 and 1 would share three of their four chains' noise.
INDEPENDENT = 1000
PATHS = (("devinterp", 0), ("devinterp", INDEPENDENT), ("batched", 0))
# A third path: the batched sampler driven by devinterp's noise layout (`benchmarks.llc_noise.DevinterpNoise`)
# seeded seed + NOISE_OFFSET (independent of devinterp's own runs), on the batches of the seed.
DEVINTERP_NOISE = "batched-devinterp-noise"
NOISE_OFFSET = 100_000


def sampler_tokens(
    store: Path, source: Path, sampler: SamplerSettings, saved: Path | None = None, distribution: str = "text"
) -> np.ndarray:
    """The store's sampler sequences, rebuilt as the stage built them and checked against meta.json (the
    run's ``run.json``, or the store's own ``training`` record when the run folder has none yet), or read from
    ``saved`` (a ``.npy`` written by ``--save-tokens``: no corpus archive needed, as on the device machine).
    ``distribution`` other than ``text``: the sequences of that distribution (``--llc-data``, `precompute.llc_data`) built
    from the run as the lens builds them, beside the store's evaluation sequences."""
    from headwatch.analysis.store import open_store
    from headwatch.precompute.evalset import BYTE_TOKENIZER, held_out_bytes, make_eval_set, sha256_bytes
    from headwatch.precompute.lenses.llc import sampler_sequences

    meta = open_store(store).meta
    assert meta.llc is not None, f"{store} has no refined LLCs"
    ev = meta.llc["evaluation"]
    if saved is not None:
        tokens = np.load(saved)
        if distribution != "text":
            return tokens
        if sha256_bytes(np.ascontiguousarray(tokens, dtype="<i8").tobytes()) != ev["tokens_sha256"]:
            raise SystemExit(f"{saved} does not hold {store}'s sampler sequences (sha256 differs); write it with --save-tokens")
        return tokens
    run_json = source / "run.json"
    info = json.loads(run_json.read_text()) if run_json.exists() else json.loads((store / "meta.json").read_text())["training"]
    data, name = held_out_bytes(info, source)
    es = make_eval_set(
        np.frombuffer(data, np.uint8).astype(np.int64),
        n=ev["n_sequences"],
        t=ev["seq_len"],
        vocab_size=256,
        text=name,
        text_sha256="",
        tokenizer=BYTE_TOKENIZER,
        seed=ev["seed"],
    )
    tokens = sampler_sequences(es, sampler)
    assert sha256_bytes(np.ascontiguousarray(tokens, dtype="<i8").tobytes()) == ev["tokens_sha256"], "other sequences"
    if distribution == "text":
        return tokens
    from headwatch.analysis.store.lenses.llc import LlcOptions
    from headwatch.precompute.llc_data import resolve_llc_data

    options = LlcOptions(sampler=sampler, data=distribution)
    got = resolve_llc_data(
        options, eval_set=es, text_tokens=tokens, run_info=info, run_folder=source, tokenizer_at=(str(source), {}), vocab_size=256
    )
    return got[0].tokens


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(args: argparse.Namespace) -> int:
    """One path at one checkpoint: every head and the whole model; prints one JSON line per estimate."""
    import torch

    from headwatch.analysis.store import open_store
    from headwatch.analysis.store.lenses.llc import SamplerSettings
    from headwatch.precompute.lenses.attention import load_model
    from headwatch.precompute.lenses.llc import LLC_MODEL, estimate_llc, estimates_from_traces, head_masks
    from headwatch.precompute.lenses.llc_sampler import checkpoint_traces

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    store = open_store(args.store)
    meta = store.meta
    assert meta.llc is not None
    sampler = SamplerSettings(**{**meta.llc["sampler"], "seed": args.seed})
    tokens = sampler_tokens(args.store, args.source, SamplerSettings(**meta.llc["sampler"]), args.tokens, args.data)
    model = load_model(args.source / f"step{args.step}", device=args.device, attn_implementation="sdpa")
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    c0, t0 = time.process_time(), time.perf_counter()
    rows = []
    if args.worker == "devinterp":
        with tempfile.TemporaryDirectory(prefix="llc-batched-") as scratch:
            targets = [(LLC_MODEL, LLC_MODEL)] + [(layer, h) for layer in range(store.n_layers) for h in range(store.n_heads)]
            for layer, head in targets:
                masks = None if layer == LLC_MODEL else head_masks(model, layer, head)
                rows.append((layer, head, estimate_llc(model, tokens, masks, sampler, scratch=Path(scratch), device=args.device)))
    else:
        noise = None
        if args.worker == DEVINTERP_NOISE:
            from benchmarks.llc_noise import DevinterpNoise

            noise = DevinterpNoise(model, args.seed + NOISE_OFFSET)
        rows = estimates_from_traces(checkpoint_traces(model, tokens, sampler, device=args.device, noise=noise), sampler)
    if cuda:
        torch.cuda.synchronize()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    gpu_peak = round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else ""
    for layer, head, est in rows:
        print(
            json.dumps(
                {
                    "layer": layer,
                    "head": head,
                    "llc": est.llc,
                    "llc_std": est.llc_std,
                    "init_loss": est.init_loss,
                    "per_chain": " ".join(f"{v:.6g}" for v in est.per_chain),
                    "cpu_s": round(cpu, 2),
                    "peak_rss_mb": round(peak_rss_mb(), 1),
                    "wall_s": round(wall, 2),
                    "gpu_peak_mb": gpu_peak,
                }
            ),
            flush=True,
        )
    return 0


def save_tokens(args: argparse.Namespace) -> int:
    """Write the store's sampler sequences (rebuilt from the run's corpus and checked) for ``--tokens``."""
    from headwatch.analysis.store import open_store
    from headwatch.analysis.store.lenses.llc import SamplerSettings

    meta = open_store(args.store).meta
    assert meta.llc is not None, f"{args.store} has no refined LLCs"
    tokens = sampler_tokens(args.store, args.source, SamplerSettings(**meta.llc["sampler"]), distribution=args.data)
    np.save(args.save_tokens, tokens)
    print(f"{args.save_tokens}: {tokens.shape[0]} sequences of {tokens.shape[1]} tokens")
    return 0


def run_paths(args: argparse.Namespace) -> None:
    """Every (step, path, seed) not yet in ``--out``, each in its own process, ``--jobs`` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = {(r["step"], r["path"], r["seed"]) for r in read_rows(args.out)}
    new_file = not args.out.exists()
    if args.paths is not None:
        paths = [(p.split(":")[0], int(p.split(":")[1])) for p in args.paths.split(",")]
    elif args.replicates:
        paths = [(path, INDEPENDENT * r) for path in ("devinterp", "batched") for r in range(args.replicates)]
    else:
        paths = list(PATHS)
    todo = [
        (step, path, args.seed + offset)
        for step in args.steps.split(",")
        for path, offset in paths
        if (step, path, str(args.seed + offset)) not in done
    ]

    def one(job: tuple[str, str, int]) -> tuple[tuple[str, str, int], list[dict], float]:
        step, path, seed = job
        cmd = [sys.executable, "-m", "benchmarks.llc_batched", "--worker", path, "--seed", str(seed), "--step", step]
        cmd += ["--store", str(args.store), "--source", str(args.source), "--device", args.device]
        cmd += ["--tokens", str(args.tokens)] if args.tokens else []
        cmd += ["--data", args.data]
        started = time.monotonic()
        done_proc = subprocess.run(cmd, capture_output=True, text=True)
        if done_proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done_proc.stderr[-3000:]}")
        got = [json.loads(line) for line in done_proc.stdout.splitlines() if line.startswith("{")]
        return job, got, time.monotonic() - started

    # a file begun before a column was added keeps its own columns (the new ones are left out of its rows)
    fields: tuple[str, ...] = FIELDS
    if not new_file:
        with args.out.open(newline="") as old:
            fields = tuple(next(csv.reader(old)))
    with args.out.open("a", newline="") as fh, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if new_file:
            writer.writeheader()
        for (step, path, seed), got, wall in pool.map(one, todo):
            for r in got:
                writer.writerow({"step": step, "path": path, "seed": seed, **r})
            fh.flush()
            gpu = f", {got[0]['gpu_peak_mb']} MB GPU peak" if got[0]["gpu_peak_mb"] != "" else ""
            print(
                f"step {step} {path} seed {seed}: {got[0]['cpu_s']} CPU s, {got[0]['wall_s']} s wall, "
                f"{got[0]['peak_rss_mb']} MB peak RSS{gpu} ({wall:.0f} s with the process's start)",
                flush=True,
            )


def exact_permutation_test(
    statistic: Callable[[np.ndarray, np.ndarray], float], first: int, runs: int, kind: Literal["independent", "samples"]
) -> tuple[float, float]:
    """scipy's exact permutation test of ``statistic`` over run indices: runs ``0 .. first - 1`` against ``first ..
    runs - 1``, every split (``independent``) or every swap within pairs (``samples``); larger is more extreme."""
    from scipy.stats import permutation_test

    res = permutation_test(
        (np.arange(first), np.arange(first, runs)),
        statistic,
        permutation_type=kind,
        n_resamples=np.inf,
        alternative="greater",
        vectorized=False,
    )
    return float(res.statistic), float(res.pvalue)


def heads_differ(devinterp: np.ndarray, batched: np.ndarray) -> tuple[float, float]:
    """Whether two samplers' estimates of the same heads differ beyond what runs of each differ by.

    ``devinterp`` ``(runs, heads)`` and ``batched`` ``(runs, heads)``: log estimates, one row per independent run.
    The statistic is the sum over heads of the squared difference of the two samplers' mean log estimate,
    each divided by the head's pooled variance between runs of one sampler (so a head whose chains scatter
    widely weighs less); its p-value is over every split of the runs into two groups of these sizes, exact when
    the runs are exchangeable (both samplers draw from one distribution per head, and no two runs share anything;
    runs of the two paths with the same seed share their batches, which `heads_differ_paired` respects).

    Returns:
        The statistic and its p-value (at least 1 / the number of splits).
    """
    runs = np.concatenate([devinterp, batched])
    n_d = len(devinterp)

    def statistic(first: np.ndarray, second: np.ndarray) -> float:
        a, b = runs[first.astype(int)], runs[second.astype(int)]
        pooled = ((len(a) - 1) * a.var(axis=0, ddof=1) + (len(b) - 1) * b.var(axis=0, ddof=1)) / (len(a) + len(b) - 2)
        return float((((b.mean(axis=0) - a.mean(axis=0)) ** 2) / pooled).sum())

    return exact_permutation_test(statistic, n_d, len(runs), "independent")


def heads_differ_paired(devinterp: np.ndarray, batched: np.ndarray) -> tuple[float, float]:
    """`heads_differ` for runs paired by seed: row i of both made with the same seed, so the same batches in the
    same order (devinterp's order from the seed, which the batched sampler replays) and independent noise.

    The statistic is the sum over heads of the squared t statistic of the paired differences of log estimates
    (their mean over the pairs divided by its standard error); its p-value is exact, over every way of swapping
    the two runs of a pair (exchangeable when, given the batches, both samplers draw from one distribution).
    Valid whatever the shared batches do to a pair; with few pairs it has fewer swaps, so less power, than
    `heads_differ` has splits.

    Returns:
        The statistic and its p-value (at least 2 / 2 ** pairs).
    """
    runs = np.concatenate([devinterp, batched])
    n = len(devinterp)

    def statistic(first: np.ndarray, second: np.ndarray) -> float:
        d = runs[second.astype(int)] - runs[first.astype(int)]
        return float((d.mean(axis=0) ** 2 / (d.var(axis=0, ddof=1) / len(d))).sum())

    return exact_permutation_test(statistic, n, 2 * n, "samples")


Runs = dict[tuple[str, str, str], dict[tuple[int, int], dict[str, str]]]


def estimates_by_run(
    by: Runs, step: str, paths: tuple[str, str] = ("devinterp", "batched")
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, list[int]]] | None:
    """Per path of ``paths``, the heads' estimates ``(runs, heads)``, the whole model's ``(runs,)`` and the runs'
    seeds at ``step``, runs in seed order; None unless both paths have at least two runs there."""
    keys = sorted((k for k in by if k[0] == step), key=lambda k: int(k[2]))
    seeds = {path: [int(k[2]) for k in keys if k[1] == path] for path in paths}
    if min(len(v) for v in seeds.values()) < 2:
        return None
    runs = {path: [by[(step, path, str(seed))] for seed in seeds[path]] for path in seeds}
    heads = sorted(k for k in runs[paths[0]][0] if k[0] >= 0)
    llc = {path: np.array([[float(r[k]["llc"]) for k in heads] for r in rs]) for path, rs in runs.items()}
    whole = {path: np.array([float(r[(-1, -1)]["llc"]) for r in rs]) for path, rs in runs.items()}
    return llc, whole, seeds


def replicates(by: Runs, steps: list[str]) -> None:
    """With at least two runs of each path at a step: every pair of runs, and `heads_differ`."""
    from itertools import combinations, product

    from scipy.stats import spearmanr

    got = {step: e for step in steps if (e := estimates_by_run(by, step)) is not None}
    if not got:
        return
    print(
        "\nEvery pair of runs (numerator / denominator), over the heads: mean (min .. max) over the pairs\n\n"
        "| step | pair | pairs | Spearman | median ratio | sd of log ratio |\n| ---: | --- | ---: | --- | --- | --- |"
    )
    for step, (llc, _, _) in got.items():
        kinds = {
            "devinterp / devinterp": list(combinations(llc["devinterp"], 2)),
            "batched / batched": list(combinations(llc["batched"], 2)),
            "batched / devinterp": list(product(llc["batched"], llc["devinterp"])),
        }
        for label, pairs in kinds.items():
            cols = [
                np.array([spearmanr(a, b).statistic for a, b in pairs]),
                np.array([np.median(a / b) for a, b in pairs]),
                np.array([np.log(a / b).std(ddof=1) for a, b in pairs]),
            ]
            cells = " | ".join(f"{c.mean():.3f} ({c.min():.3f} .. {c.max():.3f})" for c in cols)
            print(f"| {step} | {label} | {len(pairs)} | {cells} |")
    print(
        "\nEach path's mean estimate of each head over its runs; `heads_differ`'s permutation test and, where both "
        "paths ran the same seeds, `heads_differ_paired`'s\n\n"
        "| step | paths (a / b) | runs | Spearman of the means | median ratio of the means (b / a) | statistic, p |"
        " paired: statistic, p | whole model, a / b (mean +- sd over runs) |\n"
        "| ---: | --- | --- | ---: | ---: | --- | --- | --- |"
    )
    pairs_of_paths = [("devinterp", "batched"), ("devinterp", DEVINTERP_NOISE), ("batched", DEVINTERP_NOISE)]
    for step in got:
        for a, b in pairs_of_paths:
            e = estimates_by_run(by, step, (a, b))
            if e is None:
                continue
            llc, whole, seeds = e
            log_a, log_b = np.log(llc[a]), np.log(llc[b])
            stat, p = heads_differ(log_a, log_b)
            paired = "{:.1f}, {:.3f}".format(*heads_differ_paired(log_a, log_b)) if seeds[a] == seeds[b] else "not paired"
            mean_a, mean_b = llc[a].mean(axis=0), llc[b].mean(axis=0)
            wa, wb = whole[a], whole[b]
            print(
                f"| {step} | {a} / {b} | {len(wa)}, {len(wb)} | {spearmanr(mean_b, mean_a).statistic:.3f} | "
                f"{np.median(mean_b / mean_a):.3f} | {stat:.1f}, {p:.3f} | {paired} | "
                f"{wa.mean():.2f} +- {wa.std(ddof=1):.2f} / {wb.mean():.2f} +- {wb.std(ddof=1):.2f} |"
            )


def read_rows(out: Path) -> list[dict[str, str]]:
    if not out.exists():
        return []
    with out.open(newline="") as fh:
        return list(csv.DictReader(fh))


def summarize(out: Path) -> int:
    """Print the agreement and the cost per checkpoint from ``out``."""
    from scipy.stats import spearmanr

    rows = read_rows(out)
    by: Runs = {}
    for r in rows:
        by.setdefault((r["step"], r["path"], r["seed"]), {})[(int(r["layer"]), int(r["head"]))] = r
    steps = sorted({r["step"] for r in rows}, key=int)
    seeds = sorted({int(r["seed"]) for r in rows})
    s0 = str(seeds[0])
    s1 = str(seeds[0] + INDEPENDENT)
    print("| step | pair | Spearman (heads) | median ratio | ratio p10 .. p90 | sd of log ratio | whole model (first / second) |")
    print("| ---: | --- | ---: | ---: | --- | ---: | --- |")
    for step in steps:
        ref = by.get((step, "devinterp", s0))
        if ref is None:
            continue
        for label, other in (
            ("batched / devinterp", by.get((step, "batched", s0))),
            ("devinterp other seed / devinterp", by.get((step, "devinterp", s1))),
        ):
            if other is None:
                continue
            heads = sorted(k for k in ref if k[0] >= 0)
            a = np.array([float(other[k]["llc"]) for k in heads])
            b = np.array([float(ref[k]["llc"]) for k in heads])
            ratio = a / b
            rho = spearmanr(a, b).statistic
            whole = f"{float(other[(-1, -1)]['llc']):.3f} / {float(ref[(-1, -1)]['llc']):.3f}"
            print(
                f"| {step} | {label} | {rho:.3f} | {np.median(ratio):.3f} | {np.percentile(ratio, 10):.3f} .. "
                f"{np.percentile(ratio, 90):.3f} | {np.log(ratio).std(ddof=1):.3f} | {whole} |"
            )
    replicates(by, steps)
    # rows written before the wall time and the GPU's memory were recorded have neither column
    timed = all(r.get("wall_s") not in (None, "") for r in rows)
    on_gpu = timed and all(r.get("gpu_peak_mb") not in (None, "") for r in rows)
    print(
        "\n| step | path | seed | CPU s per checkpoint |"
        + (" wall s per checkpoint |" if timed else "")
        + " peak RSS (MB) |"
        + (" peak GPU memory (MB, allocated by torch) |" if on_gpu else "")
    )
    print("| ---: | --- | ---: | ---: |" + (" ---: |" if timed else "") + " ---: |" + (" ---: |" if on_gpu else ""))
    cost: dict[tuple[str, str, str], list[float]] = {}
    for (step, path, seed), est in sorted(by.items(), key=lambda kv: (int(kv[0][0]), kv[0][1], kv[0][2])):
        first = next(iter(est.values()))
        cells = [step, path, seed, f"{float(first['cpu_s']):.1f}"]
        cost.setdefault(("CPU s", path, seed), []).append(float(first["cpu_s"]))
        if timed:
            cells.append(f"{float(first['wall_s']):.1f}")
            cost.setdefault(("wall s", path, seed), []).append(float(first["wall_s"]))
        cells.append(f"{float(first['peak_rss_mb']):.0f}")
        if on_gpu:
            cells.append(f"{float(first['gpu_peak_mb']):.0f}")
        print("| " + " | ".join(cells) + " |")
    for unit in ("CPU s", "wall s"):
        if (unit, "devinterp", s0) in cost and (unit, "batched", s0) in cost:
            d, n = np.mean(cost[(unit, "devinterp", s0)]), np.mean(cost[(unit, "batched", s0)])
            print(f"\nmean {unit} per checkpoint: devinterp {d:.1f}, batched {n:.1f}: {d / n:.1f}x fewer")
    return 0


def shape_160m(args: argparse.Namespace) -> int:
    """Time both paths on a Pythia-160M-shaped model: a first-layer head, a last-layer head, the whole model."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from headwatch.analysis.store.lenses.llc import SamplerSettings
    from headwatch.families.forward import architecture, parameters
    from headwatch.precompute.lenses.llc import estimate_llc, head_masks
    from headwatch.precompute.lenses.llc_sampler import LaneNoise, frozen_layers, sample_layer_heads, sample_whole_model

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    sampler = SamplerSettings(chains=args.chains, burnin=args.burnin, draws=args.draws, sequences=8, batch_size=1)
    config = pythia_160m_config()
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(config).to(args.device).eval()
    ids = np.random.default_rng(0).integers(0, 50304, size=(8, args.length))
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
        f"sampler {sampler.as_meta()}, T {args.length}",
        flush=True,
    )
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def start() -> tuple[float, float]:
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        return time.process_time(), time.perf_counter()

    def took(started: tuple[float, float]) -> tuple[float, str]:
        """Seconds since ``started`` (CPU-seconds on the CPU, wall seconds on a GPU) and the peak memory."""
        sync()
        c0, t0 = started
        gpu = f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MB" if cuda else ""
        return (time.process_time() - c0) if not cuda else time.perf_counter() - t0, f"peak RSS {peak_rss_mb():.0f} MB{gpu}"

    times: dict[tuple[str, str], float] = {}
    which = [("first-layer head", 0), ("last-layer head", 11)] + ([] if args.no_whole_model else [("whole model", -1)])
    if args.whole_model_only:
        which = [("whole model", -1)]
    wanted = {q.split(":")[0] for q in args.paths.split(",")} if args.paths else {"devinterp", "batched"}
    with tempfile.TemporaryDirectory(prefix="llc-160m-") as scratch:
        for name, layer in which if "devinterp" in wanted else []:
            masks = None if layer < 0 else head_masks(model, layer, 0)
            started = start()
            est = estimate_llc(model, ids, masks, sampler, scratch=Path(scratch), device=args.device)
            times[("devinterp", name)], peak = took(started)
            print(f"devinterp {name}: {times[('devinterp', name)]:.1f} s, llc {est.llc:.4g}, {peak}", flush=True)
    arch, params = architecture(model), {k: v.to(args.device) for k, v in parameters(model).items()}
    tokens = torch.as_tensor(ids, device=args.device)
    started = start()
    frozen, _ = frozen_layers(arch, params, tokens)
    shared, _ = took(started)
    print(f"batched: every layer's frozen inputs: {shared:.1f} s (once per checkpoint)", flush=True)
    for name, layer in which:
        noise = LaneNoise(sampler.seed, args.device)
        started = start()
        if layer < 0:
            sample_whole_model(arch, params, tokens, sampler, noise=noise)
        else:
            sample_layer_heads(arch, params, frozen[layer], layer, tokens, sampler, heads=[0], noise=noise)
        times[("batched", name)], peak = took(started)
        print(f"batched {name}: {times[('batched', name)]:.1f} s, {peak}", flush=True)
    if args.all_heads:
        # every head of the first and the last layer as lanes of one computation, as the lens samples them
        for name, layer in (("first layer, 12 heads", 0), ("last layer, 12 heads", 11)):
            noise = LaneNoise(sampler.seed, args.device)
            started = start()
            sample_layer_heads(arch, params, frozen[layer], layer, tokens, sampler, noise=noise)
            times[("batched", name)], peak = took(started)
            print(f"batched {name}: {times[('batched', name)]:.1f} s, {peak}", flush=True)
        layers = 12 * (times[("batched", "first layer, 12 heads")] + times[("batched", "last layer, 12 heads")]) / 2
        whole_s = times.get(("batched", "whole model"), 0.0)
        implied_s = layers + whole_s + shared
        print(f"batched, every head of a layer together: implied checkpoint {implied_s:.0f} s (12 layers + whole model)")
    if args.whole_model_only:
        return 0  # each path's time printed above
    unit = "CPU s" if args.device == "cpu" else "s (GPU wall)"
    print(
        f"\n| path | first-layer head ({unit}) | last-layer head | whole model | implied checkpoint (144 heads + whole model) |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    implied = {}
    for path in [q for q in ("devinterp", "batched") if q in wanted]:
        first, last = times[(path, "first-layer head")], times[(path, "last-layer head")]
        w = times.get((path, "whole model"))
        implied[path] = 144 * (first + last) / 2 + (w or 0.0) + (shared if path == "batched" else 0.0)
        whole = "not timed" if w is None else f"{w:.1f}"
        print(f"| {path} | {first:.1f} | {last:.1f} | {whole} | {implied[path]:.0f}{'' if w else ' (heads only)'} |")
    if len(implied) == 2:
        print(f"\nimplied checkpoint: {implied['devinterp'] / implied['batched']:.2f}x fewer with the batched sampler")
    return 0


def count_flops(args: argparse.Namespace) -> int:
    """Floating-point operations of one SGLD step of each path on the Pythia-160M shape (torch's
    ``FlopCounterMode``), for a head of the first and of the last layer, and the ratio they bound.

    devinterp's step is the model's own forward pass on one sequence and a backward pass with every weight
    outside the head's mask frozen (devinterp sets ``requires_grad`` on the mask's tensors only); the batched
    sampler's is one lane's step (counted on two lanes and halved). Per estimate devinterp adds chains x
    ``--llc-sequences`` forward passes for the initial loss, which the batched sampler pays once per checkpoint.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import GPTNeoXForCausalLM

    from headwatch.analysis.store.lenses.llc import SamplerSettings
    from headwatch.families.forward import architecture, parameters
    from headwatch.precompute.lenses.llc import head_masks
    from headwatch.precompute.lenses.llc_sampler import LaneNoise, frozen_layers, sample_layer_heads

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(pythia_160m_config()).eval()
    ids = torch.as_tensor(np.random.default_rng(0).integers(0, 50304, size=(8, args.length)))
    arch, params = architecture(model), dict(parameters(model))
    frozen, _ = frozen_layers(arch, params, ids)
    one_step = SamplerSettings(chains=2, burnin=0, draws=1, sequences=8, batch_size=1)
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(ids[:1])
    forward = fc.get_total_flops()
    steps = args.chains * (args.burnin + args.draws)
    init = args.chains * one_step.sequences * forward  # devinterp's initial loss: a pass of the sequences per chain
    print(f"one forward pass of one {args.length}-token sequence: {forward / 1e9:.1f} GFLOP")
    print("\n| head of layer | devinterp step (GFLOP) | batched lane-step (GFLOP) | ratio per step | ratio per estimate |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    per: dict[str, list[float]] = {"devinterp": [], "batched": []}
    for layer in (0, arch.n_layers - 1):
        moved = set(head_masks(model, layer, 0))
        for name, p in model.named_parameters():
            p.requires_grad_(name in moved)
        with FlopCounterMode(display=False) as fc:
            model(ids[:1], labels=ids[:1]).loss.backward()
        model.zero_grad(set_to_none=True)
        dev = fc.get_total_flops()
        with FlopCounterMode(display=False) as fc:
            sample_layer_heads(arch, params, frozen[layer], layer, ids, one_step, heads=[0], noise=LaneNoise(0, "cpu"))
        lane = fc.get_total_flops() / 2
        per["devinterp"].append(steps * dev + init)
        per["batched"].append(steps * lane)
        ratio = per["devinterp"][-1] / per["batched"][-1]
        print(f"| {layer} | {dev / 1e9:.1f} | {lane / 1e9:.1f} | {dev / lane:.2f} | {ratio:.2f} |")
    d, b = np.mean(per["devinterp"]), np.mean(per["batched"])
    print(
        f"\nper head estimate at the mean of the two ({args.chains} x ({args.burnin} + {args.draws}) steps): devinterp "
        f"{d / 1e12:.1f} TFLOP, batched {b / 1e12:.1f}: at an equal rate of arithmetic the batched sampler is {d / b:.2f}x "
        "cheaper per checkpoint's heads (the cost of a head is linear in its layer)"
    )
    return 0


def checkpoint_cost(args: argparse.Namespace) -> int:
    """The batched sampler's CPU-seconds for one checkpoint of a store's model (every head and the whole model)
    under the default sampler, and for every checkpoint the store holds: the model built from the store's
    ``meta.json`` config with random weights (the cost does not depend on their values), random ids of the store's
    evaluation length, timed at 2 and 6 steps per chain and extrapolated linearly to burn-in + draws."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from headwatch.analysis.store import open_store
    from headwatch.analysis.store.lenses.llc import SamplerSettings
    from headwatch.precompute.lenses.llc_sampler import checkpoint_traces

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    meta = open_store(args.cost_of).meta
    fields = {k: v for k, v in meta.model.config.items() if k != "architectures"}
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    length = meta.forward.seq_len if meta.forward is not None else args.length
    defaults = SamplerSettings()
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, size=(defaults.sequences, length))
    cpu = {}
    for steps in (2, 6):
        sampler = SamplerSettings(chains=defaults.chains, burnin=0, draws=steps)
        c0 = time.process_time()
        checkpoint_traces(model, tokens, sampler)
        cpu[steps] = time.process_time() - c0
        print(f"{defaults.chains} chains x {steps} steps, every head and the whole model: {cpu[steps]:.1f} CPU s", flush=True)
    full = defaults.burnin + defaults.draws
    per_step = (cpu[6] - cpu[2]) / 4
    one = cpu[2] + per_step * (full - 2)
    n = len(meta.checkpoints)
    print(
        f"{meta.model.id} ({meta.model.n_layers} x {meta.model.n_heads} heads, {length} tokens): {per_step:.1f} CPU s "
        f"per step of every chain; {defaults.chains} x ({defaults.burnin} + {defaults.draws}) steps: {one:.0f} CPU s per "
        f"checkpoint, {one * n / 3600:.1f} CPU hours for its {n} checkpoints"
    )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=Path("data/induction-d128"))
    p.add_argument("--source", type=Path, default=Path("runs/ih-d128-s1234"))
    p.add_argument("--steps", default="800,1400,2500")
    p.add_argument("--seed", type=int, default=0, help="the first seed (the store's is 0)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, default=Path("docs/data/llc-batched-induction-d128.csv"))
    p.add_argument("--summary", action="store_true", help="only print the comparison from --out")
    p.add_argument("--tokens", type=Path, help="the sampler sequences from this .npy (from --save-tokens): no corpus needed")
    p.add_argument("--save-tokens", type=Path, help="write the store's sampler sequences to this .npy and stop")
    p.add_argument(
        "--data",
        default="text",
        help="the distribution the SGLD loss is taken on (--llc-data: text, the store's sequences; train, repeats, code)",
    )
    p.add_argument("--paths", help="only these of PATH:SEED_OFFSET, comma-separated (default: all three)")
    p.add_argument("--replicates", type=int, help="K seeds of each path (s, s + 1000, ...) instead of the three")
    p.add_argument("--jobs", type=int, default=1, help="processes at a time (each at OMP_NUM_THREADS threads)")
    p.add_argument("--worker", choices=("devinterp", "batched", DEVINTERP_NOISE), help=argparse.SUPPRESS)
    p.add_argument("--step", help=argparse.SUPPRESS)
    p.add_argument("--shape", choices=("pythia-160m",), help="time a model of this shape instead")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--burnin", type=int, default=48)
    p.add_argument("--draws", type=int, default=96)
    p.add_argument("--length", type=int, default=256, help="tokens per sequence of --shape")
    p.add_argument("--cost-of", type=Path, help="a store: time the batched sampler on its model's shape and extrapolate")
    p.add_argument("--count-flops", action="store_true", help="--shape: count one step's operations instead of timing")
    p.add_argument("--no-whole-model", action="store_true", help="--shape: time the two heads only")
    p.add_argument("--whole-model-only", action="store_true", help="--shape: time the whole model only")
    p.add_argument("--all-heads", action="store_true", help="--shape: also every head of the first and last layer together")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if args.save_tokens:
        return save_tokens(args)
    if args.cost_of:
        return checkpoint_cost(args)
    if args.shape:
        return count_flops(args) if args.count_flops else shape_160m(args)
    if not args.summary:
        run_paths(args)
    return summarize(args.out)


if __name__ == "__main__":
    sys.exit(main())
