"""The training loop: train, evaluate and save a checkpoint at every scheduled step.

Output layout (what ``python -m headwatch.precompute --source DIR`` reads)::

    DIR/step0/      config.json + model.safetensors (the initialisation, before any update)
    DIR/step1/ ...  one folder per step of `training.schedule.checkpoint_steps`
    DIR/run-started.json  written first: settings, seed, corpus, device (a follower reads it)
    DIR/run.json    written last: settings, seed, corpus, wall time, device, losses

A checkpoint folder appears only once it is complete (saved under a hidden name,
then renamed), and ``run.json`` only once the run has finished, so a killed run
never looks finished. At every checkpoint, train and validation loss are measured
on fixed batches (the same sequences every time), so the curves are comparable
from step to step; step 0 measures the untrained model. Those batches are plain text
even when a share of the training batches carries repeated spans (`training.repeats`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import PreTrainedModel

from headwatch.analysis.weights.heads import Device, resolve_device  # one device rule for training and precompute
from headwatch.training.corpus import Corpus
from headwatch.training.markers import RUN_FILE, RUN_STARTED_FILE
from headwatch.training.model import VOCAB_SIZE, build_model
from headwatch.training.repeats import insert_repeats
from headwatch.training.schedule import checkpoint_steps, learning_rate
from headwatch.training.settings import RunSettings

log = logging.getLogger(__name__)

LOG_EVERY = 50  # updates between progress lines (batch loss, throughput)


def describe_device(device: torch.device) -> str:
    """Human-readable device, e.g. ``cpu (AMD EPYC ..., 2 torch threads)`` or ``cuda (NVIDIA H100 ...)``."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu ({cpu}, {torch.get_num_threads()} torch threads)"


def sample_batch(tokens: torch.Tensor, *, batch_size: int, context: int, generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` random windows of ``context + 1`` consecutive tokens: ``(batch_size, context + 1)`` int64."""
    starts = torch.randint(0, len(tokens) - context, (batch_size,), generator=generator)
    return torch.stack([tokens[s : s + context + 1] for s in starts.tolist()]).long()


def training_batches(settings: RunSettings, train_tokens: torch.Tensor) -> Iterator[torch.Tensor]:
    """A run's training batches in the order its updates take them: ``(batch_size, context + 1)`` int64 windows
    (`sample_batch`, one generator seeded ``seed + 1``) with their repeated spans (`training.repeats`, one
    generator seeded ``seed + 2``). `train` takes one per update; the refined LLC's training distribution takes
    the first ones again (`precompute.llc_data`)."""
    data_gen = torch.Generator(device="cpu").manual_seed(settings.seed + 1)  # batch order
    repeat_gen = torch.Generator(device="cpu").manual_seed(settings.seed + 2)  # repeated spans (none by default)
    while True:
        windows = sample_batch(
            train_tokens, batch_size=settings.optim.batch_size, context=settings.model.context, generator=data_gen
        )
        yield insert_repeats(windows, settings.repeats, generator=repeat_gen)


def fixed_batches(tokens: torch.Tensor, *, n_batches: int, batch_size: int, context: int) -> list[torch.Tensor]:
    """Evaluation batches: ``n_batches * batch_size`` windows at evenly spaced, fixed offsets.

    Raises:
        ValueError: the split is shorter than one window.
    """
    if len(tokens) < context + 1:
        raise ValueError(f"a split of {len(tokens)} tokens is shorter than one window of {context + 1}")
    starts = np.linspace(0, len(tokens) - context - 1, n_batches * batch_size).round().astype(int)
    windows = torch.stack([tokens[s : s + context + 1] for s in starts.tolist()]).long()
    return list(windows.split(batch_size))  # n_batches x (batch_size, context + 1)


def next_token_loss(model: PreTrainedModel, windows: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats) of predicting ``windows[:, 1:]`` from ``windows[:, :-1]``."""
    logits = model(input_ids=windows[:, :-1]).logits  # (B, T, vocab)
    return F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), windows[:, 1:].reshape(-1))


@torch.no_grad()
def mean_loss(model: PreTrainedModel, batches: list[torch.Tensor], device: torch.device) -> float:
    """Average of `next_token_loss` over equally sized batches, in eval mode."""
    was_training = model.training
    model.eval()
    total = sum(float(next_token_loss(model, b.to(device))) for b in batches)
    model.train(was_training)
    return total / len(batches)


def adamw(model: PreTrainedModel, settings: RunSettings) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and embeddings only (not biases, not LayerNorms)."""
    opt = settings.optim
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=opt.max_lr,
        betas=(opt.beta1, opt.beta2),
        eps=opt.eps,
    )


def save_checkpoint(model: PreTrainedModel, out: Path, step: int) -> Path:
    """Write ``out/step<step>`` in save_pretrained (safetensors) format, atomically."""
    final = out / f"step{step}"
    partial = out / f".step{step}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    os.replace(partial, final)
    return final


def write_json_atomic(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


def train(
    settings: RunSettings,
    corpus: Corpus,
    out: str | Path,
    *,
    device: Device = "auto",
    on_start: Callable[[], None] | None = None,
    on_save: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train one run and write its checkpoints and ``run.json`` under ``out``.

    Args:
        settings: every hyperparameter (`RunSettings`).
        corpus: the byte tokens and their provenance (`training.corpus.build_corpus`).
        out: an empty or missing directory.
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
        on_start: called once ``run-started.json`` is written, before the first checkpoint (``--watch``
            starts its follower there).
        on_save: called with the step after each checkpoint is saved (``--watch`` checks its follower there, so a
            follower that failed is reported while training goes on).

    Returns:
        The record written to ``run.json``.

    Raises:
        FileExistsError: ``out`` exists and is not empty.
        ValueError: an unusable device, or a split too short for one window.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{str(out)!r} is not empty; pick a new --out or delete it to retrain")
    out.mkdir(parents=True, exist_ok=True)
    dev = resolve_device(device)
    model_s, opt_s = settings.model, settings.optim
    steps = checkpoint_steps(
        opt_s.steps,
        every=settings.checkpoint_every,
        dense_from=settings.dense_from,
        dense_to=settings.dense_to,
        dense_every=settings.dense_every,
    )
    to_save = set(steps)
    torch.manual_seed(settings.seed)
    model = build_model(model_s, seed=settings.seed).to(dev)
    model.train()
    optimizer = adamw(model, settings)
    train_tokens = torch.from_numpy(corpus.train)
    batches = training_batches(settings, train_tokens)
    eval_sets = {
        split: fixed_batches(tokens, n_batches=settings.eval_batches, batch_size=opt_s.batch_size, context=model_s.context)
        for split, tokens in (("train", train_tokens), ("val", torch.from_numpy(corpus.val)))
    }
    log.info("training %d steps on %s; checkpoints at %d steps", opt_s.steps, describe_device(dev), len(steps))
    started = started_record(settings, corpus, model, steps, dev)
    write_json_atomic(out / RUN_STARTED_FILE, started)
    if on_start is not None:
        on_start()

    losses: list[dict[str, float | int]] = []

    def checkpoint(step: int) -> None:
        row = {"step": step, **{f"{split}_loss": mean_loss(model, b, dev) for split, b in eval_sets.items()}}
        losses.append(row)
        save_checkpoint(model, out, step)
        if on_save is not None:
            on_save(step)
        log.info(
            "step %5d  train %.4f  val %.4f  (%.0f s)", step, row["train_loss"], row["val_loss"], time.perf_counter() - start
        )

    start = time.perf_counter()
    checkpoint(0)
    train_time = 0.0
    for update in range(1, opt_s.steps + 1):
        tick = time.perf_counter()
        lr = learning_rate(
            update, max_lr=opt_s.max_lr, min_lr=opt_s.max_lr * opt_s.min_lr_ratio, warmup=opt_s.warmup, total_steps=opt_s.steps
        )
        for group in optimizer.param_groups:
            group["lr"] = lr
        windows = next(batches)
        loss = next_token_loss(model, windows.to(dev))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        loss = loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opt_s.grad_clip)
        optimizer.step()
        train_time += time.perf_counter() - tick
        if update % LOG_EVERY == 0:
            log.info(
                "update %5d  lr %.2e  batch loss %.4f  %.0f tokens/s",
                update,
                lr,
                loss.item(),
                update * settings.tokens_per_step / train_time,
            )
        if update in to_save:
            checkpoint(update)
    wall = time.perf_counter() - start
    log.info(
        "done in %.1f s (%.1f s in updates, %.0f tokens/s)", wall, train_time, opt_s.steps * settings.tokens_per_step / train_time
    )

    fields = ("tokens_per_step", "config", "seed", "corpus")
    record = {**{k: started[k] for k in fields}, "wall_time_s": round(wall, 3), "device": started["device"], "losses": losses}
    write_json_atomic(out / RUN_FILE, record)
    return record


def started_record(
    settings: RunSettings, corpus: Corpus, model: PreTrainedModel, steps: list[int], dev: torch.device
) -> dict[str, Any]:
    """What ``run.json`` says of a run that is known when it starts (all but wall time and losses), in
    ``run.json``'s key order; written as ``run-started.json`` so that a store can follow the run."""
    config = settings.as_record()
    config["checkpoint_steps"] = steps
    config["software"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    config["transformers_config"] = model.config.to_diff_dict()
    return {
        "tokens_per_step": settings.tokens_per_step,
        "config": config,
        "seed": settings.seed,
        "corpus": corpus.record,
        "device": describe_device(dev),
    }
