"""The forward-pass computation: load one whole checkpoint with transformers and measure its attention.

`check_loadable` refuses, before anything is written, an architecture transformers has
no causal-LM class for. `forward_lens` loads a checkpoint folder with
``AutoModelForCausalLM`` (``attn_implementation="eager"``, so the attention
probabilities are returned), float32 on CPU or the checkpoint's own dtype on CUDA,
runs the evaluation sequences through it a batch at a time and returns the
checkpoint's rows of the three forward tables (`analysis.store.format.ATTENTION_TABLES`):
the loss, the per-head statistics of `analysis.attention.patterns` (plus the induction score on
the repeated random tokens, and the loss on their second copy) and the layer-pair divergences. One model is held at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F

from headwatch.analysis.attention.patterns import AttentionSums, induction_scores, js_divergence
from headwatch.analysis.errors import CheckpointError, StoreError, UnknownArchitectureError
from headwatch.analysis.store import Meta
from headwatch.analysis.store.lenses.attention import ATTENTION, ATTENTION_LENS, ATTENTION_STATISTICS, EVAL_LOSS, LAYER_DIVERGENCE
from headwatch.families.family import ModelShape
from headwatch.precompute.evalset import EvalSet
from headwatch.precompute.job.context import (
    BaseComputation,
    ComputationSetup,
    RunContext,
    fill_missing,
    lens_device,
    tensor_of,
)
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched

log = logging.getLogger("precompute")

BATCH_SEQUENCES = 8  # sequences per forward pass: bounds the attention tensors held at once


@dataclass(frozen=True)
class AttentionJob:
    """What the forward computation needs besides the checkpoint (the same for every checkpoint of a run);
    its share of the pass over each checkpoint (`precompute.job.context.PassJob`)."""

    eval_set: EvalSet
    device: str = "cpu"
    batch: int = BATCH_SEQUENCES

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        assert src is not None, "the forward lens needs the source"
        return forward_work(src, fetched.ref, shape, self)


def check_loadable(config: dict[str, Any]) -> None:
    """Refuse a config transformers cannot build a causal LM from.

    Raises:
        UnknownArchitectureError: its ``model_type`` has no causal-LM class in transformers.
    """
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = config.get("model_type")
    try:
        if not isinstance(model_type, str):
            raise KeyError(model_type)  # a config.json without a model_type names no architecture
        AutoConfig.for_model(model_type)
    except (ValueError, KeyError) as exc:
        raise UnknownArchitectureError(
            f"transformers {_version()} cannot load model_type {model_type!r} for the forward lens; "
            "upgrade transformers or run without --lenses"
        ) from exc
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise UnknownArchitectureError(
            f"transformers {_version()} has no causal-LM class for model_type {model_type!r}; run without --lenses"
        )


def _version() -> str:
    import transformers

    return transformers.__version__


def load_model(folder: Path, *, device: str, attn_implementation: str = "eager") -> torch.nn.Module:
    """The checkpoint as a causal LM in eval mode: float32 on CPU, its own dtype on CUDA; ``eager``
    attention returns the attention probabilities (the refined-LLC computation, which needs none, asks for ``sdpa``).

    Raises:
        CheckpointError: transformers cannot load it.
    """
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per checkpoint is noise in the job's log
    dtype = torch.float32 if device == "cpu" else "auto"
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=attn_implementation, dtype=dtype)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"transformers cannot load {str(folder)!r} as a causal LM: {str(exc).splitlines()[0]}") from exc
    return model.to(device).eval()


@torch.no_grad()
def forward_statistics(model: torch.nn.Module, job: AttentionJob, *, n_layers: int, n_heads: int) -> dict[str, Any]:
    """Loss, per-head statistics and layer divergences of one model on the job's sequences.

    Returns:
        ``loss`` (float, nats/token), ``tokens`` (int), ``probe_copy_loss`` (float, nats/token: the
        mean cross-entropy of the probe's tokens R+1..2R-1, 0-based, `probe_copy_loss`), every `ATTENTION_STATISTICS` name ->
        ``(n_layers, n_heads)`` float64 array, ``jsd`` ``(n_layers, n_layers)`` float64.

    Raises:
        CheckpointError: the model returns another number of layers or heads than the run's.
    """
    device = job.device
    tokens = tensor_of(job.eval_set.tokens)
    n, t = tokens.shape
    sums = AttentionSums(n_layers, n_heads, t)
    loss_sum, count = 0.0, 0
    for start in range(0, n, job.batch):
        ids = tokens[start : start + job.batch].to(device)
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
        _check_attentions(out.attentions, n_layers, n_heads)
        logits = out.logits[:, :-1].float()  # (B, T-1, V)
        loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"))
        count += ids.shape[0] * (t - 1)
        for layer, alpha in enumerate(out.attentions):  # (B, H, T, T) each
            sums.add(layer, alpha)
        sums.next_batch(ids.shape[0])
    stats: dict[str, Any] = {k: v.numpy() for k, v in sums.head_statistics().items()}
    probe = tensor_of(job.eval_set.induction).to(device)
    repeat = job.eval_set.info.induction_repeat
    induction = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    copy_sum = 0.0
    for start in range(0, len(probe), job.batch):
        ids = probe[start : start + job.batch]
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
        _check_attentions(out.attentions, n_layers, n_heads)
        for layer, alpha in enumerate(out.attentions):
            induction[layer] += induction_scores(alpha, repeat) * ids.shape[0]
        copy_sum += probe_copy_loss(out.logits, ids, repeat) * ids.shape[0]
    stats["induction"] = (induction / len(probe)).numpy()
    stats["probe_copy_loss"] = copy_sum / len(probe)
    stats["jsd"] = js_divergence(sums.offset_distributions()).numpy()
    stats["loss"] = loss_sum / count
    stats["tokens"] = count
    return stats


def probe_copy_loss(logits: torch.Tensor, ids: torch.Tensor, repeat: int) -> float:
    """Mean next-token cross-entropy (nats) on the second copy of R tokens repeated twice.

    The targets are the tokens at positions R+1 .. 2R-1 (0-based), predicted from positions
    R .. 2R-2: every token of the second copy whose predecessor is in the second copy too, so
    that copying the token that followed the predecessor's first occurrence predicts it. (Token
    R, the second copy's first, follows the end of the first copy and is not predictable.)

    Args:
        logits: ``(B, 2R, V)``.
        ids: ``(B, 2R)`` the probe sequences.
        repeat: R.
    """
    second = logits[:, repeat:-1].float()  # (B, R - 1, V)
    return float(F.cross_entropy(second.reshape(-1, second.shape[-1]), ids[:, repeat + 1 :].reshape(-1)))


def _check_attentions(attentions: Any, n_layers: int, n_heads: int) -> None:
    if attentions is None or len(attentions) != n_layers or any(a is None or a.shape[1] != n_heads for a in attentions):
        got = "none" if attentions is None else [None if a is None else tuple(a.shape) for a in attentions]
        raise CheckpointError(
            f"the model returned attention weights {got}, expected {n_layers} layers of {n_heads} "
            "heads; is attn_implementation='eager' supported for it?"
        )


def attention_rows(step: int, stats: dict[str, Any]) -> dict[str, pa.Table]:
    """One checkpoint's rows of the forward tables, by table name, each in its sort order."""
    n_layers, n_heads = stats["entropy"].shape
    n = n_layers * n_heads
    attention = {
        "step": pa.array(np.full(n, step, dtype=np.int64)),
        "layer": pa.array(np.repeat(np.arange(n_layers, dtype=np.int32), n_heads)),
        "head": pa.array(np.tile(np.arange(n_heads, dtype=np.int32), n_layers)),
    } | {c: pa.array(np.asarray(stats[c], dtype=np.float64).reshape(n)) for c in ATTENTION_STATISTICS}
    pairs = n_layers * n_layers
    divergence = {
        "step": pa.array(np.full(pairs, step, dtype=np.int64)),
        "layer_a": pa.array(np.repeat(np.arange(n_layers, dtype=np.int32), n_layers)),
        "layer_b": pa.array(np.tile(np.arange(n_layers, dtype=np.int32), n_layers)),
        "jsd": pa.array(np.asarray(stats["jsd"], dtype=np.float64).reshape(pairs)),
    }
    loss = {
        "step": pa.array([step], pa.int64()),
        "loss": pa.array([float(stats["loss"])], pa.float64()),
        "tokens": pa.array([int(stats["tokens"])], pa.int64()),
        "probe_copy_loss": pa.array([float(stats["probe_copy_loss"])], pa.float64()),
    }
    return {
        ATTENTION.name: pa.table(attention, schema=ATTENTION.schema),
        LAYER_DIVERGENCE.name: pa.table(divergence, schema=LAYER_DIVERGENCE.schema),
        EVAL_LOSS.name: pa.table(loss, schema=EVAL_LOSS.schema),
    }


def forward_lens(folder: Path, step: int, job: AttentionJob, *, n_layers: int, n_heads: int) -> dict[str, pa.Table]:
    """Load the checkpoint in ``folder``, evaluate it, and return its forward-table rows.

    Raises:
        CheckpointError: it cannot be loaded, returns no attention weights of the run's shape,
            or gives a non-finite loss.
    """
    model = load_model(folder, device=job.device)
    try:
        stats = forward_statistics(model, job, n_layers=n_layers, n_heads=n_heads)
    finally:
        del model
    if not np.isfinite(stats["loss"]):
        raise CheckpointError(f"the loss on the evaluation sequences is {stats['loss']}; the checkpoint diverged")
    return attention_rows(step, stats)


def forward_work(src: CheckpointSource, ref: CheckpointRef, shape: ModelShape, job: AttentionJob) -> dict[str, pa.Table]:
    """One checkpoint's forward-table rows: the whole checkpoint, held only while it is evaluated.

    Raises:
        CheckpointError: it cannot be loaded or evaluated.
    """
    with src.checkpoint_folder(ref) as folder:
        return forward_lens(folder, ref.step, job, n_layers=shape.n_layers, n_heads=shape.n_heads)


class AttentionComputation(BaseComputation):
    """The forward lens: computed in the pass over each new checkpoint, and afterwards for the store's
    checkpoints computed without it. Refuses a model transformers cannot load, and a store whose
    forward tables were made on other sequences."""

    lens = ATTENTION_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        super().__init__(setup)
        assert setup.eval_set is not None, "the forward lens needs the evaluation sequences"
        self.pass_job = self.job = AttentionJob(setup.eval_set, device=lens_device(setup.options))

    def check_store(self, out: Path, stored: Meta | None) -> None:
        if stored is None or stored.forward is None or stored.forward.same_evaluation(self.job.eval_set.info):
            return
        was, now = stored.forward, self.job.eval_set.info
        raise StoreError(
            f"store {str(out)!r} has forward lenses on {was.n_sequences} x {was.seq_len} tokens of {was.text!r} "
            f"(sha256 {was.text_sha256[:12]}, tokenizer {was.tokenizer!r}), not {now.n_sequences} x {now.seq_len} of "
            f"{now.text!r} (sha256 {now.text_sha256[:12]}, {now.tokenizer!r}); pass the same --eval-text and sizes, "
            "or write to a new --out"
        )

    def begin(self, run: RunContext) -> None:
        run.state.meta.forward = self.job.eval_set.info

    def fill(self, run: RunContext) -> None:
        """The forward rows of checkpoints whose weight statistics were computed without the lens, one
        commit each."""
        plan = run.plan
        fill_missing(
            run,
            self.lens,
            lambda ref: forward_work(plan.src, ref, plan.shape, self.job),
            what="forward lens",
            left_out_as="its forward rows",
            note="note: {n} checkpoints have no forward-lens rows (steps {steps}): see the warnings above; rerun to retry them",
        )
