"""The losses lens's computation: the per-token losses of one checkpoint on the evaluation text and the induction
probe, and the rows of position_loss.parquet and icl.parquet made from them.

The checkpoint is loaded with transformers (`precompute.lenses.attention.load_model`, float32 on CPU, its own dtype
on CUDA) and run on the forward lens's sequences (`precompute.evalset`) a batch at a time; the statistics are
`analysis.attention.losses`'. Its ``meta.json`` record (``losses``) holds the positions the scores read and the
sequences' identity (`ForwardInfo`), and a store keeps one of each (`LossesComputation.check_store`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from headwatch.analysis.attention.losses import icl_probe, icl_text, position_stats
from headwatch.analysis.errors import CheckpointError, StoreError
from headwatch.analysis.store import Meta
from headwatch.analysis.store.lenses.losses import ICL, LOSSES_LENS, POSITION_LOSS, icl_positions, probe_positions
from headwatch.families.family import ModelShape
from headwatch.precompute.evalset import EvalSet
from headwatch.precompute.job.context import BaseComputation, ComputationSetup, RunContext, fill_missing, lens_device, tensor_of
from headwatch.precompute.lenses.attention import BATCH_SEQUENCES, load_model
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched


def per_token_losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``(..., T)`` float64 next-token cross-entropy with column 0 NaN, from ``logits`` ``(..., T, V)`` and ``ids``
    ``(..., T)`` (broadcast over leading lane axes), computed in the logits' dtype (float32 at least): one fused
    log-softmax and pick over the logits as they lie (the last position's target ignored, not sliced off)."""
    *lead, T, V = logits.shape
    flat = logits.reshape(-1, V)
    if flat.dtype.itemsize < 4:
        flat = flat.float()
    target = torch.nn.functional.pad(ids[..., 1:], (0, 1), value=-100).expand(*lead, T).reshape(-1)
    lost = torch.nn.functional.cross_entropy(flat, target, reduction="none", ignore_index=-100).view(*lead, T)
    out = torch.empty(*lead, T, dtype=torch.float64, device=lost.device)
    out[..., 0] = float("nan")
    out[..., 1:] = lost[..., :-1]
    return out


@torch.no_grad()
def model_losses(model: torch.nn.Module, tokens: np.ndarray, *, device: str, batch: int = BATCH_SEQUENCES) -> np.ndarray:
    """Per-token losses ``(S, T)`` float64 (column 0 NaN) of a transformers causal LM on ``tokens`` ``(S, T)``, by
    `per_token_losses`, the one per-token loss the ablation lens's intact pass and lanes use too."""
    out = []
    ids = tensor_of(tokens)
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch].to(device)
        out.append(per_token_losses(model(input_ids=chunk, use_cache=False).logits, chunk).cpu())
    return torch.cat(out).numpy()


def losses_record(eval_set: EvalSet) -> dict[str, Any]:
    """What ``meta.json`` ``losses`` records: the sequences, the positions each score reads, the definitions."""
    info = eval_set.info
    early, late = icl_positions(info.seq_len)
    first, second = probe_positions(info.induction_repeat)
    return {
        "forward": info.as_dict(),
        "seq_len": info.seq_len,
        "induction_repeat": info.induction_repeat,
        "early": early,
        "late": late,
        "probe_first": [first.start, first.stop - 1],
        "probe_second": [second.start, second.stop - 1],
        "positions": "0-based; position p is the token predicted from positions 0..p-1",
        "text_score": "loss at position late minus at position early (Olsson et al.'s 500th minus 50th token of 512, "
        "scaled to T: the k-th token becomes the round(k T / 512)-th)",
        "probe_score": "mean loss over the second copy (probe_second) minus over the first (probe_first)",
        "sem": "sample standard deviation (ddof 1) over sequences / sqrt(sequences)",
    }


def losses_rows(step: int, text: np.ndarray, probe: np.ndarray, *, repeat: int) -> dict[str, pa.Table]:
    """One checkpoint's rows of position_loss and icl from its per-token losses on the text ``(N, T)`` and the
    probe ``(S, 2R)`` (column 0 NaN in both)."""
    t = text.shape[1]
    rows: dict[str, list[Any]] = {c: [] for c in POSITION_LOSS.schema.names}
    for name, losses in (("text", text), ("probe", probe)):
        mean, err = position_stats(losses[:, 1:])
        n = len(mean)
        rows["step"] += [step] * n
        rows["set"] += [name] * n
        rows["position"] += list(range(1, n + 1))
        rows["loss_mean"] += mean.tolist()
        rows["loss_sem"] += err.tolist()
    early, late = icl_positions(t)
    scores = {"text": icl_text(text, early, late), "probe": icl_probe(probe, repeat)}
    icl = {
        "step": [step, step],
        "set": list(scores),
        "early_loss": [float(s.early) for s in scores.values()],
        "late_loss": [float(s.late) for s in scores.values()],
        "score": [float(s.score) for s in scores.values()],
        "score_sem": [float(s.sem) for s in scores.values()],
    }
    return {
        POSITION_LOSS.name: POSITION_LOSS.sorted(pa.table(rows, schema=POSITION_LOSS.schema)),
        ICL.name: ICL.sorted(pa.table(icl, schema=ICL.schema)),
    }


@dataclass(frozen=True)
class LossesJob:
    """The losses lens's share of the pass over each checkpoint (`precompute.job.context.PassJob`)."""

    eval_set: EvalSet
    device: str = "cpu"

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        assert src is not None, "the losses lens needs the source"
        return losses_work(src, fetched.ref, self)


def losses_work(src: CheckpointSource, ref: CheckpointRef, job: LossesJob) -> dict[str, pa.Table]:
    """One checkpoint's rows of the losses lens.

    Raises:
        CheckpointError: it cannot be loaded, or its losses are not finite.
    """
    with src.checkpoint_folder(ref) as folder:
        model = load_model(folder, device=job.device, attn_implementation="sdpa")
        try:
            text = model_losses(model, job.eval_set.tokens, device=job.device)
            probe = model_losses(model, job.eval_set.induction, device=job.device)
        finally:
            del model
    if not (np.isfinite(text[:, 1:]).all() and np.isfinite(probe[:, 1:]).all()):
        raise CheckpointError("the per-token losses are not finite; the checkpoint diverged")
    return losses_rows(ref.step, text, probe, repeat=job.eval_set.info.induction_repeat)


def check_same_sequences(out: Path, stored: Meta | None, key: str, eval_set: EvalSet, what: str) -> None:
    """Refuse a store whose ``key`` record was made on other evaluation sequences.

    Raises:
        StoreError: naming both and what to pass instead.
    """
    from headwatch.analysis.store.lenses.attention import ForwardInfo

    record = stored.records.get(key) if stored is not None else None
    if record is None or "forward" not in record:
        return
    was, now = ForwardInfo.from_dict(record["forward"]), eval_set.info
    if not was.same_evaluation(now):
        raise StoreError(
            f"store {str(out)!r} has {what} on {was.n_sequences} x {was.seq_len} tokens of {was.text!r} "
            f"(sha256 {was.text_sha256[:12]}), not {now.n_sequences} x {now.seq_len} of {now.text!r} "
            f"(sha256 {now.text_sha256[:12]}); pass the same --eval-text and sizes, or write to a new --out"
        )


class LossesComputation(BaseComputation):
    """The losses lens: computed in the pass over each new checkpoint, and afterwards for the store's checkpoints
    computed without it."""

    lens = LOSSES_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        super().__init__(setup)
        assert setup.eval_set is not None, "the losses lens needs the evaluation sequences"
        icl_positions(setup.eval_set.info.seq_len)  # refuses a context too short for two positions
        self.pass_job = self.job = LossesJob(setup.eval_set, device=lens_device(setup.options))

    def check_store(self, out: Path, stored: Meta | None) -> None:
        check_same_sequences(out, stored, "losses", self.job.eval_set, "losses by position")

    def begin(self, run: RunContext) -> None:
        if run.state.meta.records.get("losses") is None:
            run.state.meta.set_record("losses", losses_record(self.job.eval_set))

    def fill(self, run: RunContext) -> None:
        plan = run.plan
        fill_missing(
            run,
            self.lens,
            lambda ref: losses_work(plan.src, ref, self.job),
            what="losses lens",
            left_out_as="its losses by position",
            note="note: {n} checkpoints have no losses-by-position rows (steps {steps}): see the warnings above; "
            "rerun to retry them",
        )
