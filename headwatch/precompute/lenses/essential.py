"""The essential-dynamics lens (`analysis.stages.essential`; ``--lenses essential``): per checkpoint, the model's
next-token log-probabilities on a fixed sample, and their trajectory in its leading principal components.

The sample (recorded in ``meta.json`` ``essential``): the first `analysis.stages.essential.SEQUENCES` sequences of the
evaluation text and of the induction probe (the forward lens's sequences, `precompute.evalset`), at
`analysis.stages.essential.POSITIONS` evenly spaced positions of each, for a fixed subset of tokens
(`analysis.stages.essential.token_subset`: every token of a vocabulary of at most `analysis.stages.essential.TOKENS`, else that
many of the most frequent next tokens of the sample). The evaluation text shows the model's language statistics,
the probe its copying: both change when a circuit forms. Each checkpoint's log-probabilities are one row of
``essential_outputs.parquet`` (computed in the pass over each new checkpoint, and afterwards for the store's
checkpoints computed without the lens); after every run the principal components over all of them, the variance
they explain and the trajectory's cusps are made again (``essential.parquet``), since a new checkpoint changes them.
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

from headwatch.analysis.errors import CheckpointError, StoreError
from headwatch.analysis.stages import essential as ed
from headwatch.analysis.store import Meta
from headwatch.analysis.store.lenses.essential import ESSENTIAL, ESSENTIAL_LENS, ESSENTIAL_OUTPUTS
from headwatch.families.family import ModelShape
from headwatch.families.registry import language_config
from headwatch.precompute.evalset import EvalSet
from headwatch.precompute.job.context import (
    BaseComputation,
    ComputationSetup,
    RunContext,
    fill_missing,
    lens_device,
    tensor_of,
)
from headwatch.precompute.lenses.attention import load_model
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched

log = logging.getLogger("precompute")

TOKEN_RULE = (
    "every token of a vocabulary of at most {size}; else the {size} most frequent next tokens at the sampled "
    "positions (ties to the lower id): a token the sample never predicts moves mostly with the unigram statistics, "
    "and a fixed number keeps a checkpoint's bytes independent of the vocabulary"
)


@dataclass(frozen=True)
class EssentialSample:
    """The fixed inputs: per kind (``evaluation``, ``probe``), its sequences ``(n, L)`` and sampled positions; the
    tokens whose log-probabilities are kept."""

    sequences: dict[str, np.ndarray]
    positions: dict[str, np.ndarray]
    tokens: np.ndarray
    vocab_size: int
    evaluation: dict[str, Any]

    @property
    def values(self) -> int:
        """Numbers per checkpoint: sequences x positions x tokens, summed over the kinds."""
        return sum(len(s) * len(self.positions[k]) for k, s in self.sequences.items()) * len(self.tokens)

    def record(self) -> dict[str, Any]:
        """What ``meta.json`` ``essential`` records about the sample and the rules (`compare` keys)."""
        return {
            "sequences": {k: len(s) for k, s in self.sequences.items()},
            "sequences_from": "the first sequences of the evaluation text and of the induction probe (precompute.evalset)",
            "evaluation": self.evaluation,
            "positions": {k: [int(p) for p in v] for k, v in self.positions.items()},
            "tokens": "all" if len(self.tokens) == self.vocab_size else [int(t) for t in self.tokens],
            "token_rule": TOKEN_RULE.format(size=ed.TOKENS),
            "values_per_checkpoint": self.values,
            "order": "(kind: evaluation then probe, sequence, position, token)",
            "components": ed.COMPONENTS,
            "cusp_rule": (ed.__doc__ or "").split("\n\n")[-1].strip(),
            "window": ed.WINDOW,
            "turn_degrees": ed.TURN_DEGREES,
            "arc": ed.ARC,
            "smoothing_checkpoints": ed.SMOOTHING,
            "margin_degrees": ed.MARGIN_DEGREES,
        }


SAMPLE_KEYS = ("evaluation", "sequences", "positions", "tokens", "values_per_checkpoint", "order")


def make_sample(eval_set: EvalSet, vocab_size: int) -> EssentialSample:
    """The sample of a run's evaluation sequences (module docstring)."""
    sequences = {"evaluation": eval_set.tokens[: ed.SEQUENCES], "probe": eval_set.induction[: ed.SEQUENCES]}
    positions = {k: ed.sample_positions(s.shape[1]) for k, s in sequences.items()}
    targets = np.concatenate([s[:, positions[k] + 1].ravel() for k, s in sequences.items()])
    evaluation = eval_set.info.as_dict()  # the text, its digest and the sequences' (the forward lens records the same)
    return EssentialSample(sequences, positions, ed.token_subset(targets, vocab_size), vocab_size, evaluation)


@torch.no_grad()
def checkpoint_outputs(model: torch.nn.Module, sample: EssentialSample, *, device: str) -> np.ndarray:
    """The model's log-probabilities on the sample, ``(values,)`` float32 in the recorded order."""
    tokens = tensor_of(sample.tokens).to(device)
    parts = []
    for kind, ids in sample.sequences.items():
        logits = model(input_ids=tensor_of(ids).to(device), use_cache=False).logits  # (n, L, V)
        at = tensor_of(sample.positions[kind]).to(device)
        logp = torch.log_softmax(logits[:, at].double(), dim=-1)  # (n, P, V)
        parts.append(logp[:, :, tokens].float().reshape(-1).cpu().numpy())  # (n * P * K,)
    return np.concatenate(parts)


def output_rows(step: int, values: np.ndarray) -> dict[str, pa.Table]:
    rows = {"step": pa.array([step], pa.int64()), "logprobs": pa.array([values.astype(np.float32)], pa.list_(pa.float32()))}
    return {ESSENTIAL_OUTPUTS.name: pa.table(rows, schema=ESSENTIAL_OUTPUTS.schema)}


@dataclass(frozen=True)
class EssentialJob:
    """The lens's share of the pass over each checkpoint (`precompute.job.context.PassJob`)."""

    sample: EssentialSample
    device: str = "cpu"

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        assert src is not None, "the essential-dynamics lens needs the source"
        return essential_work(src, fetched.ref, self)


def essential_work(src: CheckpointSource, ref: CheckpointRef, job: EssentialJob) -> dict[str, pa.Table]:
    """One checkpoint's row of essential_outputs.parquet.

    Raises:
        CheckpointError: it cannot be loaded, or its log-probabilities are not finite.
    """
    with src.checkpoint_folder(ref) as folder:
        model = load_model(folder, device=job.device)
        try:
            values = checkpoint_outputs(model, job.sample, device=job.device)
        finally:
            del model
    if not np.all(np.isfinite(values)):
        raise CheckpointError(f"step {ref.step}: non-finite log-probabilities on the essential-dynamics sample")
    return output_rows(ref.step, values)


def trajectory_rows(steps: np.ndarray, outputs: np.ndarray) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``essential.parquet`` from the outputs ``(T, D)`` of ``steps``: the scores, explained variance, turns (of the
    smoothed path) and cusps (`analysis.stages.essential.turns`); also the explained fractions and the cusps' steps."""
    scores, explained = ed.principal_components(outputs)
    turn = ed.arc_turns(ed.smoothed(scores))[0]
    cusp = ed.cusps(scores)
    t, k = scores.shape
    rows = {
        "step": pa.array(np.repeat(steps.astype(np.int64), k)),
        "component": pa.array(np.tile(np.arange(k, dtype=np.int32), t)),
        "score": pa.array(scores.reshape(-1)),
        "explained": pa.array(np.tile(explained, t)),
        "turn": pa.array(np.repeat(turn, k)),
        "cusp": pa.array(np.repeat(cusp, k)),
    }
    return ESSENTIAL.sorted(pa.table(rows, schema=ESSENTIAL.schema)), explained, steps[cusp]


def turn_records(steps: np.ndarray, rows: pa.Table) -> list[dict[str, Any]]:
    """``meta.json`` ``essential`` ``turns``: every minimum of the smoothed path's speed with its step, angle (degrees),
    speed (nats per checkpoint), travel (share of the most over 2w checkpoints) and verdict (cusp, near, none)."""
    scores = rows.to_pandas().pivot(index="step", columns="component", values="score").sort_index().to_numpy(np.float64)
    return [
        {"step": int(steps[t.index]), "angle": t.angle, "speed": t.speed, "travel": t.travel, "verdict": t.verdict}
        for t in ed.turns(scores)
    ]


class EssentialComputation(BaseComputation):
    """The essential-dynamics lens: outputs in the pass over each new checkpoint and afterwards for the store's
    checkpoints computed without it; the trajectory made again from all of them. Refuses a store whose outputs
    were taken on another sample."""

    lens = ESSENTIAL_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        super().__init__(setup)
        assert setup.eval_set is not None, "the essential-dynamics lens needs the evaluation sequences"
        vocab = int(language_config(setup.plan.model.config).get("vocab_size") or 0)
        if vocab <= 0:
            raise StoreError("the model's config.json has no vocab_size: the essential-dynamics lens cannot choose its tokens")
        self.sample = make_sample(setup.eval_set, vocab)
        self.pass_job = self.job = EssentialJob(self.sample, device=lens_device(setup.options))

    def check_store(self, out: Path, stored: Meta | None) -> None:
        was = (stored.records.get(self.lens.name) if stored is not None else None) or {}
        now = self.sample.record()
        differ = [k for k in SAMPLE_KEYS if k in was and was[k] != now[k]]
        if differ:
            raise StoreError(
                f"store {str(out)!r} has essential dynamics on another sample ({', '.join(differ)} differ); pass the same "
                "--eval-text and sizes, or write to a new --out"
            )

    def begin(self, run: RunContext) -> None:
        meta = run.state.meta
        was = meta.records.get(self.lens.name) or {}
        meta.set_record(self.lens.name, was | self.sample.record())

    def fill(self, run: RunContext) -> None:
        """The outputs of checkpoints computed without the lens (one commit each), then the trajectory."""
        plan, state = run.plan, run.state
        fill_missing(
            run,
            self.lens,
            lambda ref: essential_work(plan.src, ref, self.job),
            what="essential dynamics",
            left_out_as="its outputs",
            note="note: {n} checkpoints have no essential-dynamics outputs (steps {steps})",
        )
        table = state.tables.get(ESSENTIAL_OUTPUTS.name)
        if table is None or table.num_rows < 2:
            run.report.notes.append("essential dynamics: fewer than 2 checkpoints with outputs, no trajectory")
            return
        steps = table["step"].to_numpy()
        outputs = np.stack(table["logprobs"].to_numpy(zero_copy_only=False))  # (T, D)
        rows, explained, cusp_steps = trajectory_rows(steps, outputs)
        state.put({ESSENTIAL.name: rows})
        record = dict(state.meta.records.get(self.lens.name) or {})
        record |= {
            "explained": [float(e) for e in explained],
            "cusps": [int(s) for s in cusp_steps],
            "turns": turn_records(steps, rows),
            "steps": len(steps),
        }
        state.meta.set_record(self.lens.name, record)
        state.commit(heads=False)
