"""``headwatch llc-calibrate``: sweep the refined LLC's sampler settings on one checkpoint and read the traces.

devinterp's guidance is to choose the SGLD step size and n beta by looking at the chains' loss
traces before trusting an estimate: they must rise from the loss at w* and flatten, neither keep
climbing nor run away. This command estimates one head's refined LLC (or the whole model's) at
one checkpoint of a source under every combination of ``--lr``, ``--nbeta`` and
``--localization``, flags each by the rule of `analysis.llc.diagnostics`, and writes:

- ``calibration.csv``: one row per setting: the estimate, the chains' spread, the flag, the rise
  between the halves in standard errors, seconds;
- ``traces.csv``: every chain's sampled loss at every SGLD step, tidy;
- ``calibration.png`` and ``calibration.svg``: the traces, one panel per setting (rows n beta,
  columns step size), the loss at w* dashed;

and prints the recommendation: among the settings flagged ``converged`` with a positive estimate,
the one whose chains agree best (smallest spread relative to the estimate); on a tie, the larger
step size (it mixes faster). The evaluation sequences are the precompute job's
(`precompute.evalset`; ``--eval-text`` for a model not trained here), or ``--llc-data``'s one distribution
(train, repeats, code, a file) built as the lens builds it, so a recommended setting can be passed to
``python -m headwatch.precompute --lenses llc`` with the same ``--llc-data`` as it is.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.llc.diagnostics import chain_diagnostics, flag, rise_z
from headwatch.analysis.store.lenses.llc import SamplerSettings
from headwatch.precompute import evalset
from headwatch.precompute.lenses.attention import load_model
from headwatch.precompute.lenses.llc import (
    LLC_MODEL,
    check_family,
    estimate_llc,
    head_masks,
    masked_parameters,
    sampler_sequences,
)
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.fetch import Meter

log = logging.getLogger("precompute")
EXIT_OK, EXIT_USAGE = 0, 2
DEFAULT_LRS = (1e-4, 3e-4, 1e-3, 3e-3)
DEFAULT_NBETAS = (10.0, 30.0, 100.0)


@dataclass(frozen=True)
class Trial:
    """One setting's estimate and its diagnostics."""

    sampler: SamplerSettings
    llc: float
    llc_std: float
    init_loss: float
    flag: str
    z: float
    trace: np.ndarray  # (chains, burnin + draws)
    seconds: float


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def _head(text: str) -> tuple[int, int]:
    try:
        layer, head = (int(v) for v in text.split("."))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--head takes LAYER.HEAD (2.3), got {text!r}") from None
    return layer, head


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    sampler = SamplerSettings()
    p = argparse.ArgumentParser(prog="headwatch llc-calibrate", description=__doc__.splitlines()[0])
    p.add_argument("source", help="a folder of step<N>/ checkpoint folders, or a Hub model id")
    p.add_argument("--step", type=int, required=True, help="the checkpoint to calibrate on")
    p.add_argument(
        "--head", type=_head, default=None, metavar="L.H", help="the head whose refined LLC is sampled (default: the whole model)"
    )
    p.add_argument("--out", required=True, help="folder for calibration.csv, traces.csv and the figure")
    p.add_argument(
        "--lr",
        type=_floats,
        default=DEFAULT_LRS,
        metavar="LIST",
        help=f"SGLD step sizes (default {','.join(map(str, DEFAULT_LRS))})",
    )
    p.add_argument(
        "--nbeta",
        type=_floats,
        default=DEFAULT_NBETAS,
        metavar="LIST",
        help=f"n beta values (default {','.join(f'{v:g}' for v in DEFAULT_NBETAS)})",
    )
    p.add_argument(
        "--localization",
        type=_floats,
        default=(sampler.localization,),
        metavar="LIST",
        help=f"localization strengths gamma (default {sampler.localization:g})",
    )
    p.add_argument("--chains", type=int, default=4, help="chains per setting (4)")
    p.add_argument("--draws", type=int, default=200, help="draws per chain (200, the refined-LLC paper's)")
    p.add_argument("--burnin", type=int, default=0, help="burn-in steps per chain (0)")
    p.add_argument("--batch-size", type=int, default=sampler.batch_size, help=f"sequences per SGLD step ({sampler.batch_size})")
    p.add_argument(
        "--sequences", type=int, default=sampler.sequences, help=f"evaluation sequences the sampler uses ({sampler.sequences})"
    )
    p.add_argument("--seed", type=int, default=sampler.seed, help=f"sampler seed ({sampler.seed})")
    p.add_argument(
        "--llc-data",
        default="text",
        metavar="DATA",
        help="the one distribution the SGLD loss is taken on, as the lens's --llc-data names it: train, text, repeats, "
        "code, FILE or NAME=FILE (default: text, the store's evaluation sequences)",
    )
    evalset.add_arguments(p)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    return p.parse_args(argv)


def settings_grid(args: argparse.Namespace) -> list[SamplerSettings]:
    """Every combination of the swept settings, the others as given.

    Raises:
        ValueError: a combination `SamplerSettings` refuses.
    """
    return [
        SamplerSettings(
            lr=lr,
            n_beta=nb,
            localization=gamma,
            chains=args.chains,
            draws=args.draws,
            batch_size=args.batch_size,
            burnin=args.burnin,
            seed=args.seed,
            sequences=args.sequences,
        )
        for nb, lr, gamma in itertools.product(args.nbeta, args.lr, args.localization)
    ]


def calibrate(args: argparse.Namespace) -> tuple[list[Trial], str]:
    """Run every setting on the checkpoint; the trials and what was sampled (``L2 H3`` or ``whole model``).

    Raises:
        CheckpointNotFoundError: no such source or step.
        UnknownArchitectureError: no head mask for the model's family.
        ValueError, EvalTextError: bad options.
    """
    from headwatch.precompute.job.context import lens_device
    from headwatch.precompute.job.run import evaluation_set, make_plan

    grid = settings_grid(args)
    options = RunOptions(
        device=args.device,
        eval_text=args.eval_text,
        eval_sequences=args.eval_sequences,
        eval_length=args.eval_length,
        progress=False,
    )
    with tempfile.TemporaryDirectory(prefix="headwatch-calibrate-") as scratch:
        plan = make_plan(args.source, options, scratch=Path(scratch), meter=Meter())
        refs = [r for r in plan.todo if r.step == args.step]
        if not refs:
            steps = [r.step for r in plan.todo]
            listed = ", ".join(map(str, steps[:12])) + (", ..." if len(steps) > 12 else "")
            raise ValueError(f"{args.source!r} has no checkpoint at step {args.step} (its steps: {listed})")
        check_family(plan.model.config)
        layer, head = args.head if args.head is not None else (LLC_MODEL, LLC_MODEL)
        if args.head is not None and not (0 <= layer < plan.shape.n_layers and 0 <= head < plan.shape.n_heads):
            raise ValueError(f"--head {layer}.{head}: the model has {plan.shape.n_layers} layers x {plan.shape.n_heads} heads")
        eval_set = evaluation_set(plan, options, args.source)
        tokens = calibration_sequences(args, plan, eval_set, grid[0])
        device = lens_device(options)
        trials = []
        with plan.src.checkpoint_folder(refs[0]) as folder:
            model = load_model(folder, device=device, attn_implementation="sdpa")
            masks = None if args.head is None else head_masks(model, layer, head)
            params = masked_parameters(model, masks)
            for sampler in grid:
                started = time.monotonic()
                try:
                    est = estimate_llc(model, tokens, masks, sampler, scratch=Path(scratch) / "samples", device=device)
                except Exception as exc:  # a diverged chain is a result of the sweep, not a failure of it
                    log.warning("lr %g, n beta %g, gamma %g: %s", sampler.lr, sampler.n_beta, sampler.localization, exc)
                    trials.append(
                        Trial(
                            sampler,
                            float("nan"),
                            float("nan"),
                            float("nan"),
                            "diverged",
                            float("nan"),
                            np.full((sampler.chains, sampler.burnin + sampler.draws), np.nan),
                            time.monotonic() - started,
                        )
                    )
                    continue
                d = chain_diagnostics(est.trace, sampler.burnin, batches=sampler.batches)
                trials.append(
                    Trial(
                        sampler,
                        est.llc,
                        est.llc_std,
                        est.init_loss,
                        flag(est.per_chain, d.first_half, d.second_half, d.half_se, params),
                        rise_z(d.first_half, d.second_half, d.half_se),
                        est.trace,
                        time.monotonic() - started,
                    )
                )
                log.info(
                    "lr %g, n beta %g, gamma %g: %.4g +- %.2g (%s)",
                    sampler.lr,
                    sampler.n_beta,
                    sampler.localization,
                    est.llc,
                    est.llc_std,
                    trials[-1].flag,
                )
    return trials, ("whole model" if args.head is None else f"L{layer} H{head}") + f" on {args.llc_data}"


def calibration_sequences(args: argparse.Namespace, plan: Any, eval_set: Any, sampler: SamplerSettings) -> np.ndarray:
    """The sequences the sweep samples on: ``--llc-data``'s one distribution, built as the lens builds it
    (`precompute.llc_data.resolve_llc_data`; ``text``: the sampler's share of the evaluation sequences).

    Raises:
        ValueError: not exactly one distribution, or one that cannot be built here (`LlcDataError`, which says what
            to pass instead).
    """
    from headwatch.analysis.store.lenses.llc import LlcOptions
    from headwatch.families.registry import language_config
    from headwatch.precompute.llc_data import resolve_llc_data

    options = LlcOptions(sampler=sampler, data=args.llc_data)
    if len(options.data_specs) != 1:
        raise ValueError(f"--llc-data {args.llc_data!r}: llc-calibrate samples on one distribution; name one")
    local = Path(args.source) if Path(args.source).is_dir() else None
    (data,) = resolve_llc_data(
        options,
        eval_set=eval_set,
        text_tokens=sampler_sequences(eval_set, sampler),
        run_info=plan.src.run_info(),
        run_folder=local,
        tokenizer_at=plan.src.tokenizer_location(plan.todo[0]) if plan.todo else (plan.src.name, {}),
        vocab_size=int(language_config(plan.model.config).get("vocab_size") or 0),
    )
    return data.tokens


def recommend(trials: list[Trial]) -> Trial | None:
    """The setting to use (module docstring): converged (so not negative, `analysis.llc.diagnostics.flag`) and above
    zero, the chains in closest agreement; on a tie, the larger step size. None when no setting qualifies."""
    good = [t for t in trials if t.flag == "converged" and t.llc > 0]  # > 0: the spread is read relative to it
    if not good:
        return None
    return min(good, key=lambda t: (round(t.llc_std / t.llc, 3), -t.sampler.lr))


def summary(trials: list[Trial]) -> pd.DataFrame:
    """One row per setting."""
    return pd.DataFrame(
        [
            {
                "lr": t.sampler.lr,
                "n_beta": t.sampler.n_beta,
                "localization": t.sampler.localization,
                "chains": t.sampler.chains,
                "draws": t.sampler.draws,
                "burnin": t.sampler.burnin,
                "llc": t.llc,
                "llc_std": t.llc_std,
                "init_loss": t.init_loss,
                "flag": t.flag,
                "rise_z": t.z,
                "seconds": round(t.seconds, 2),
            }
            for t in trials
        ]
    )


def tidy_traces(trials: list[Trial]) -> pd.DataFrame:
    """Every chain's sampled loss at every SGLD step."""
    rows = []
    for t in trials:
        for c, trace in enumerate(t.trace):
            rows += [
                {
                    "lr": t.sampler.lr,
                    "n_beta": t.sampler.n_beta,
                    "localization": t.sampler.localization,
                    "chain": c,
                    "sgld_step": k,
                    "loss": float(v),
                }
                for k, v in enumerate(trace)
            ]
    return pd.DataFrame(rows)


def figure(trials: list[Trial], label: str, step: int, out: Path) -> list[Path]:
    """The traces, one panel per (n beta, step size) per localization, saved as PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nbetas = sorted({t.sampler.n_beta for t in trials})
    lrs = sorted({t.sampler.lr for t in trials})
    gammas = sorted({t.sampler.localization for t in trials})
    fig, axes = plt.subplots(
        len(nbetas) * len(gammas), len(lrs), squeeze=False, sharex=True, figsize=(3.2 * len(lrs), 2.4 * len(nbetas) * len(gammas))
    )
    for t in trials:
        row = gammas.index(t.sampler.localization) * len(nbetas) + nbetas.index(t.sampler.n_beta)
        ax = axes[row][lrs.index(t.sampler.lr)]
        # the mean of each pass over the sampler's sequences, drawn at the pass's last step: the raw draws swing with
        # which sequence they hold far more than they rise (the flag rule reads passes too, analysis.llc.diagnostics)
        batches = t.sampler.batches
        passes = t.trace.shape[1] // batches
        ends = batches * np.arange(1, passes + 1) - 1
        for trace in t.trace:
            ax.plot(ends, trace[: passes * batches].reshape(passes, batches).mean(axis=1), lw=0.9, marker=".", ms=2)
        if np.isfinite(t.init_loss):
            ax.axhline(t.init_loss, color="k", ls="--", lw=0.8)
        if t.sampler.burnin:
            ax.axvspan(0, t.sampler.burnin, color="0.9")
        ax.set_title(
            f"lr {t.sampler.lr:g}, nβ {t.sampler.n_beta:g}, γ {t.sampler.localization:g}\n"
            f"{t.llc:.3g} ± {t.llc_std:.2g}: {t.flag}",
            fontsize=8,
        )
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("SGLD step", fontsize=8)
    for row in axes:
        row[0].set_ylabel("mean sampled loss per pass\n(nats/token)", fontsize=8)
    fig.suptitle(
        f"Refined-LLC calibration: {label} at step {step:,}; each chain's mean loss per pass over the sampler's "
        "sequences; dashed: the loss at w*",
        fontsize=10,
    )
    fig.tight_layout()
    paths = [out / "calibration.png", out / "calibration.svg"]
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> int:
    from headwatch.analysis.errors import CheckpointError, CheckpointNotFoundError, UnknownArchitectureError
    from headwatch.analysis.store.outputs import check_files_folder

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    logging.getLogger("devinterp").setLevel(logging.WARNING)
    try:
        check_files_folder(args.out, what="the calibration's tables and figure")  # before the chains run
        trials, label = calibrate(args)
    except (CheckpointNotFoundError, CheckpointError, UnknownArchitectureError, ValueError) as exc:
        print(f"headwatch llc-calibrate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = summary(trials)
    table.to_csv(out / "calibration.csv", index=False)
    tidy_traces(trials).to_csv(out / "traces.csv", index=False)
    figure(trials, label, args.step, out)
    print(table.to_string(index=False))
    best = recommend(trials)
    if best is None:
        print(
            "no setting converged with a positive estimate: lower --lr for diverged chains, raise --draws (or "
            "add --burnin) for chains still rising; a negative estimate (flag negative) is a sampler that left the "
            "basin of w* (lower --lr, raise --localization, add --burnin) or a checkpoint that is not a local minimum "
            "(negative under every setting)"
        )
    else:
        s = best.sampler
        print(
            f"recommended: --llc-lr {s.lr:g} --llc-nbeta {s.n_beta:g} --llc-localization {s.localization:g} "
            f"--llc-chains {s.chains} --llc-draws {s.draws} --llc-burnin {s.burnin} "
            f"({label}: {best.llc:.4g} ± {best.llc_std:.2g}, converged)"
        )
    print(f"wrote {out / 'calibration.csv'}, {out / 'traces.csv'}, {out / 'calibration.png'}, {out / 'calibration.svg'}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
