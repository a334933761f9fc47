"""Do the refined LLC's short default chains rank heads as the paper's long chains do?

For a store with ``llc.parquet`` and the checkpoints it was made from, re-estimates a fixed set of
heads at a few checkpoints with long chains (by default the paper's 4 chains x 200 draws,
appendix F.2 of ``paper-refined-llc-heads``), every other sampler setting the store's own (step
size, n beta, localization, sequences, batch size, seed), and compares them with the store's
estimates at the same (checkpoint, head):

- per checkpoint, Spearman's rank correlation across the heads (`scipy.stats.spearmanr`) and
  Pearson's;
- the ratio short / long per head: its median, its 10th and 90th percentiles and their ratio
  (1 would be the README's old claim: "lower than long chains' by a factor shared by every
  head");
- each long estimate's flag by the store's own rule (`analysis.llc.diagnostics.flag`) and the
  seconds it took.

The heads are drawn once, ``--per-layer`` per layer by ``numpy.random.default_rng(--seed)`` (not
picked by their estimates, which would widen the spread and flatter the correlation). Each long
estimate is appended to ``--out`` (CSV) as soon as it is made, and a rerun skips those already
there, so a killed run resumes. Run it at one thread on a shared machine:

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.llc_agreement \\
        --store data/shakespeare-pythia-6x8 --source runs/shakespeare-pythia-6x8 \\
        --steps 16,128,1536 --out docs/data/llc-agreement.csv

``--summary`` prints the comparison from the CSV alone (no sampling).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from headwatch.analysis.llc.diagnostics import chain_diagnostics, flag
from headwatch.analysis.store import open_store, read_table
from headwatch.analysis.store.lenses.llc import LLC

FIELDS = (
    "step",
    "layer",
    "head",
    "chains",
    "draws",
    "llc_long",
    "llc_long_std",
    "per_chain",
    "flag",
    "params",
    "seconds",
    "init_loss",
)
TRACE_FIELDS = ("step", "layer", "head", "chain", "trace")


def pick_heads(n_layers: int, n_heads: int, per_layer: int, seed: int) -> list[tuple[int, int]]:
    """``per_layer`` distinct heads of every layer, drawn uniformly by ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return [(layer, int(h)) for layer in range(n_layers) for h in sorted(rng.choice(n_heads, per_layer, replace=False))]


def traces_path(out: Path) -> Path:
    """Where the long chains' loss traces go: beside ``out``, one row per chain."""
    return out.with_name(out.stem + "-traces.csv")


def done_rows(out: Path) -> list[dict[str, str]]:
    if not out.exists():
        return []
    with out.open(newline="") as fh:
        return list(csv.DictReader(fh))


# (chains, burn-in, draws) read off the long chains; burn-in and draws multiples of the 8 sequences, so that every
# batch weighs the same in the mean and in the initial loss
SHORTER = (
    (2, 0, 8),
    (2, 0, 24),
    (4, 0, 24),
    (2, 0, 48),
    (4, 0, 48),
    (4, 0, 96),
    (2, 0, 200),
    (2, 48, 48),
    (4, 48, 48),
    (2, 48, 96),
    (4, 48, 96),
)


def load_traces(out: Path) -> dict[tuple[int, int, int], np.ndarray]:
    """The long chains' loss traces in ``out``'s traces file: ``(step, layer, head) -> (chains, draws)``."""
    chains: dict[tuple[int, int, int], dict[int, np.ndarray]] = {}
    path = traces_path(out)
    if path.exists():
        with path.open(newline="") as fh:
            for r in csv.DictReader(fh):
                key = (int(r["step"]), int(r["layer"]), int(r["head"]))
                chains.setdefault(key, {})[int(r["chain"])] = np.array(r["trace"].split(), dtype=np.float64)
    return {key: np.stack([c[i] for i in sorted(c)]) for key, c in chains.items()}


def truncated(trace: np.ndarray, init_loss: float, n_beta: float, chains: int, draws: int, burnin: int = 0) -> float:
    """The estimate a run with ``chains`` x (``burnin`` + ``draws``) would have made: its chains are the first
    ``chains`` of the long run (devinterp seeds chain c with init_seed + c) and its steps their first ``burnin +
    draws`` (the batches come in the same order), of which `estimate_llc` averages the last ``draws``."""
    return float(n_beta * (trace[:chains, burnin : burnin + draws].mean(axis=1) - init_loss).mean())


@dataclass(frozen=True)
class LongEstimate:
    """One long estimate of ``--out`` with its chains' loss traces and the store's own estimate of the same head
    at the same checkpoint (NaN for a store without refined LLCs)."""

    llc_long: float
    init_loss: float
    params: int
    seconds: float
    trace: np.ndarray  # (chains, draws)
    stored: float


def passes_flag(row: LongEstimate, n_beta: float, batches: int = 8) -> str:
    """The flag of a long estimate by `analysis.llc.diagnostics` today, from its stored traces (the CSV's own
    ``flag`` column is the rule of the day the row was made)."""
    d = chain_diagnostics(row.trace, batches=batches)
    per_chain = n_beta * (row.trace.mean(axis=1) - row.init_loss)
    return flag(per_chain, d.first_half, d.second_half, d.half_se, row.params)


def summarize(store_path: Path, out: Path) -> int:
    """Print, per checkpoint, how shorter chains (and the store's own estimates) rank the heads against the long chains."""
    from scipy.stats import spearmanr

    rows = done_rows(out)
    traces = load_traces(out)
    if not rows:
        print(f"{out}: no long-chain estimates yet")
        return 1
    from headwatch.analysis.store.lenses.llc import SamplerSettings

    meta = open_store(store_path).meta.llc
    if meta is None:  # a store without refined LLCs (the shipped plain-text stores): the long chains' rows alone
        print(f"{store_path} has no refined LLCs now: its row is left out; n beta is the defaults' ({SamplerSettings().n_beta})")
    sampler = meta["sampler"] if meta is not None else SamplerSettings().as_meta()
    n_beta = float(sampler["n_beta"])
    chains, burnin, draws = int(sampler["chains"]), int(sampler.get("burnin", 0)), int(sampler["draws"])
    store_label = f"store ({chains} x {draws}" if not burnin else f"store ({chains} x ({burnin} burn-in + {draws})"
    table = read_table(store_path, LLC) if meta is not None else None
    if meta is not None and table is None:
        raise SystemExit(f"{store_path} records refined LLCs but has no {LLC.file}")
    stored = table.to_pandas().set_index(["step", "layer", "head"])["llc"] if table is not None else None
    by_step: dict[int, list[LongEstimate]] = {}
    for r in rows:
        key = (int(r["step"]), int(r["layer"]), int(r["head"]))
        own = float(stored.loc[key]) if stored is not None else float("nan")
        estimate = LongEstimate(
            llc_long=float(r["llc_long"]),
            init_loss=float(r["init_loss"]),
            params=int(r["params"]),
            seconds=float(r["seconds"]),
            trace=traces[key],
            stored=own,
        )
        by_step.setdefault(key[0], []).append(estimate)
    print(
        "| step | heads | setting | forward-backward passes | Spearman with 4 x 200 | median ratio to 4 x 200 "
        "| 10th to 90th percentile of the ratio |"
    )
    print("| ---: | ---: | --- | ---: | ---: | ---: | --- |")
    for step in sorted(by_step):
        group = by_step[step]
        long = np.array([g.llc_long for g in group])
        settings: list[tuple[str, int, np.ndarray]] = [
            (
                f"{c} x {d}" if not b else f"{c} x ({b} burn-in + {d})",
                c * (b + d),
                np.array([truncated(g.trace, g.init_loss, n_beta, c, d, b) for g in group]),
            )
            for c, b, d in SHORTER
        ]
        if stored is not None:
            settings.append(
                (f"{store_label}, original checkpoints)", chains * (burnin + draws), np.array([g.stored for g in group]))
            )
        # the long chains' own reliability: chains 2-3 against chains 0-1, 200 draws each (not against all 4)
        halves = [
            np.array([n_beta * (g.trace[rows].mean(axis=1) - g.init_loss).mean() for g in group])
            for rows in (slice(0, 2), slice(2, 4))
        ]
        for name, cost, short in settings:
            ratio = short / long
            rho = spearmanr(short, long).statistic if len(long) > 2 else float("nan")
            lo, hi = np.percentile(ratio, [10, 90])
            print(f"| {step} | {len(long)} | {name} | {cost} | {rho:.3f} | {np.median(ratio):.3f} | {lo:.3f} to {hi:.3f} |")
        rho_half = spearmanr(halves[0], halves[1]).statistic if len(long) > 2 else float("nan")
        print(
            f"| {step} | {len(long)} | chains 0-1 against chains 2-3, 200 draws each (the long chains' own agreement) "
            f"| 400 + 400 | {rho_half:.3f} | {np.median(halves[0] / halves[1]):.3f} |  |"
        )
        flags = [passes_flag(g, n_beta) for g in group]  # by the rule as it stands, from the traces
        counts = ", ".join(f"{f} {flags.count(f)}" for f in sorted(set(flags)))
        seconds = np.mean([g.seconds for g in group])
        print(f"|  |  | (4 x 200 flags: {counts}; {seconds:.0f} s per estimate) |  |  |  |  |")
    return 0


def check_truncation(store_path: Path, source: Path, out: Path) -> int:
    """Rerun the store's sampler (its chains x draws) at the (checkpoint, head) pairs in ``out`` and compare with
    `truncated` on the long chains: the shorter settings of `summarize` are only valid if these agree."""
    from benchmarks.llc_regime import sampler_tokens, stored_llc
    from headwatch.analysis.store.lenses.llc import SamplerSettings
    from headwatch.precompute.lenses.attention import load_model
    from headwatch.precompute.lenses.llc import estimate_llc, head_masks

    stored = SamplerSettings(**stored_llc(open_store(store_path).meta, store_path)["sampler"])
    tokens = sampler_tokens(store_path, source, stored)
    traces = load_traces(out)
    rows = done_rows(out)
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="llc-agreement-") as scratch:
        for step in sorted({int(r["step"]) for r in rows}):
            model = load_model(source / f"step{step}", device="cpu", attn_implementation="sdpa")
            for r in (r for r in rows if int(r["step"]) == step):
                layer, head = int(r["layer"]), int(r["head"])
                est = estimate_llc(model, tokens, head_masks(model, layer, head), stored, scratch=Path(scratch))
                cut = truncated(traces[(step, layer, head)], est.init_loss, stored.n_beta, stored.chains, stored.draws)
                worst = max(worst, abs(est.llc - cut))
                print(
                    f"step {step} L{layer} H{head}: {stored.chains}x{stored.draws}: {est.llc:.6f}, from the long chains {cut:.6f}"
                )
            del model
    print(f"largest difference: {worst:.3g}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=Path("data/shakespeare-pythia-6x8"))
    p.add_argument("--source", type=Path, default=Path("runs/shakespeare-pythia-6x8"))
    p.add_argument("--steps", default="16,128,1536", help="checkpoints (each must have the store's estimates)")
    p.add_argument("--per-layer", type=int, default=2, help="heads drawn per layer")
    p.add_argument("--seed", type=int, default=0, help="seed of the head draw")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("docs/data/llc-agreement.csv"))
    p.add_argument("--summary", action="store_true", help="only print the comparison from --out")
    p.add_argument(
        "--check-truncation",
        action="store_true",
        help="rerun the store's own sampler settings on the heads in --out and compare with the long chains' first draws",
    )
    args = p.parse_args()
    if args.summary:
        return summarize(args.store, args.out)
    if args.check_truncation:
        return check_truncation(args.store, args.source, args.out)

    from benchmarks.llc_regime import sampler_tokens, stored_llc
    from headwatch.analysis.store.lenses.llc import SamplerSettings
    from headwatch.precompute.lenses.attention import load_model
    from headwatch.precompute.lenses.llc import estimate_llc, head_masks, masked_parameters

    store = open_store(args.store)
    llc = stored_llc(store.meta, args.store)
    stored = SamplerSettings(**llc["sampler"])
    long = SamplerSettings(**{**stored.as_meta(), "chains": args.chains, "draws": args.draws, "burnin": 0})
    tokens = sampler_tokens(args.store, args.source, stored)
    steps = [int(s) for s in args.steps.split(",")]
    missing = sorted(set(steps) - set(llc["steps"]))
    if missing:
        print(f"the store has no refined LLC at steps {missing}; pick from {llc['steps']}", file=sys.stderr)
        return 2
    heads = pick_heads(store.n_layers, store.n_heads, args.per_layer, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    have = {(int(r["step"]), int(r["layer"]), int(r["head"])) for r in done_rows(args.out)}
    new_file = not args.out.exists()
    trace_path = traces_path(args.out)
    with (
        args.out.open("a", newline="") as fh,
        trace_path.open("a", newline="") as tfh,
        tempfile.TemporaryDirectory(prefix="llc-agreement-") as scratch,
    ):
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        traces = csv.DictWriter(tfh, fieldnames=TRACE_FIELDS)
        if new_file:
            writer.writeheader()
            traces.writeheader()
        for step in steps:
            todo = [(layer, head) for layer, head in heads if (step, layer, head) not in have]
            if not todo:
                continue
            model = load_model(args.source / f"step{step}", device="cpu", attn_implementation="sdpa")
            for layer, head in todo:
                masks = head_masks(model, layer, head)
                started = time.monotonic()
                est = estimate_llc(model, tokens, masks, long, scratch=Path(scratch))
                seconds = time.monotonic() - started
                diag = chain_diagnostics(est.trace, batches=long.batches)
                params = masked_parameters(model, masks)
                row = {
                    "step": step,
                    "layer": layer,
                    "head": head,
                    "chains": long.chains,
                    "draws": long.draws,
                    "llc_long": f"{est.llc:.6g}",
                    "llc_long_std": f"{est.llc_std:.6g}",
                    "per_chain": " ".join(f"{v:.6g}" for v in est.per_chain),
                    "flag": flag(est.per_chain, diag.first_half, diag.second_half, diag.half_se, params),
                    "params": params,
                    "seconds": f"{seconds:.1f}",
                    "init_loss": repr(est.init_loss),
                }
                writer.writerow(row)
                fh.flush()
                for chain, trace in enumerate(est.trace):
                    traces.writerow(
                        {"step": step, "layer": layer, "head": head, "chain": chain, "trace": " ".join(map(repr, trace.tolist()))}
                    )
                tfh.flush()
                print(
                    f"step {step} L{layer} H{head}: {row['llc_long']} +- {row['llc_long_std']} ({row['flag']}, {seconds:.0f} s)",
                    flush=True,
                )
            del model
    return summarize(args.store, args.out)


if __name__ == "__main__":
    sys.exit(main())
