"""The ablation lens, declared: what the loss needs of each head, at every checkpoint with statistics, and the
tokens in context each head serves most, at chosen checkpoints.

Mean ablation, as the refined-LLC study of attention heads does it (its section 4 and appendix B): head h of layer l
writes z_h = A_h V_h (its attention-weighted values, d_head per position) into the output projection; ablating it
replaces z_h at every position by its mean over the store's evaluation text tokens (all N x T positions) at the same
checkpoint, so the output projection receives the head's average output instead of its input-dependent one, and
everything above it is recomputed. ``--ablation-method zero`` replaces z_h by 0 instead (Olsson et al.'s choice in
some experiments; it moves the residual stream off its usual mean). One head is ablated at a time.

The loss increases are next-token cross-entropies in nats, ablated minus intact, with their standard errors over
sequences (sample std, ddof 1, of the per-sequence mean increases, / sqrt(sequences)). On the text they average over
every position 1..T-1; on the probe over the second copy's positions R+1..2R-1 (`analysis.store.lenses.losses.probe_positions`),
the tokens only copying can predict. The ICL scores with the head ablated are the losses lens's two scores
(`analysis.store.lenses.losses`) computed on the ablated model.

The tokens in context (the study's Figure 4): for each head, the 20 (`CONTEXTS_PER_HEAD`) predicted tokens, pooled
over every position with a loss of the text and of the probe sequences, whose loss rises most when the head is
ablated, each with its context window (the window's tokens decoded one by one, ending at the target) and the head's
attention from the query that predicts the target over the window. They are kept at the checkpoints of
``--ablation-steps`` (default: the last checkpoint and the first checkpoint of each of the run's stages,
stages.parquet basis ``run``, made at the end of the run; `precompute.lenses.ablation` computes them at every
checkpoint of the pass and keeps those once the stages are known).

Its tables (ablation.parquet, head_contexts.parquet), its ``meta.json`` record (``ablation``), its options, and the
lens itself (``--lenses ablation``). `precompute.lenses.ablation` computes it with every head of a layer as a lane of
one batched forward pass (`families.forward`), the layers below computed once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Option, Seconds
from headwatch.analysis.store.records import RecordType

AblationMethod = Literal["mean", "zero"]
ABLATION_METHODS: tuple[AblationMethod, ...] = ("mean", "zero")
CONTEXTS_PER_HEAD = 20  # the tokens in context kept per head and checkpoint
CONTEXT_WINDOW = 64  # default tokens of a context's window, the target included

# ------------------------------------------------------------------ its tables

ABLATION_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "method": "mean (z_h replaced by its mean over the evaluation text's tokens) or zero (by 0) (string)",
    "text_increase": "mean next-token loss on the evaluation text (positions 1..T-1) with the head ablated minus "
    "intact, nats (float64)",
    "text_increase_sem": "its standard error over the text sequences, nats (float64)",
    "probe_increase": "the same on the induction probe's second copy (positions R+1..2R-1), nats (float64)",
    "probe_increase_sem": "its standard error over the probe sequences, nats (float64)",
    "icl_text": "the text ICL score (icl.parquet set text: loss at the late position minus the early one) with the "
    "head ablated, nats (float64)",
    "icl_text_sem": "its standard error over the text sequences, nats (float64)",
    "icl_probe": "the probe ICL score (second copy's mean loss minus the first's) with the head ablated, nats (float64)",
    "icl_probe_sem": "its standard error over the probe sequences, nats (float64)",
}
ABLATION_SCHEMA = schema_of(
    {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "method": pa.string()}
    | {c: pa.float64() for c in list(ABLATION_COLUMN_DOCS)[4:]}
)
ABLATION = TableSpec(
    name="ablation",
    file="ablation.parquet",
    row="one row per (step, layer, head)",
    about="What the loss needs of each head: the loss increase on the evaluation text and on the induction probe's "
    "second copy when the head's output is mean-ablated (meta.json `ablation` method), and the in-context-learning "
    "scores with it ablated, each with its standard error over sequences, at every checkpoint with statistics. "
    "Present when the store was computed with `--lenses ablation`.",
    schema=ABLATION_SCHEMA,
    docs=ABLATION_COLUMN_DOCS,
    sort=("step", "layer", "head"),
)

HEAD_CONTEXTS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "rank": "1..20, by loss_increase, largest first (int32)",
    "set": "text (an evaluation sequence) or probe (an induction-probe sequence, R random tokens repeated twice) (string)",
    "sequence": "0-based index of the sequence within its set (int32)",
    "position": "0-based position of the target token in its sequence; on the probe, position >= R is the second copy (int32)",
    "second_copy": "set is probe and position >= R + 1: a token that copying from the first copy predicts (bool)",
    "start": "0-based position of the window's first token, max(0, position - window + 1) (int32)",
    "target": "the target token, decoded alone (string)",
    "tokens": "the window's tokens, positions start..position, each decoded alone; the target is the last (list<string>)",
    "attention": "the head's attention weights from the query at position - 1 (the one that predicts the target) to "
    "each token of the window, aligned to tokens; the target's own entry is 0 (the query cannot see it); rounded to "
    "multiples of 2^-16 (list<float32>)",
    "loss_increase": "the target's next-token loss with the head ablated minus intact, nats (float64)",
    "base_loss": "the target's next-token loss intact, nats (float64)",
}
HEAD_CONTEXTS_SCHEMA = schema_of(
    {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "rank": pa.int32(), "set": pa.string()}
    | {"sequence": pa.int32(), "position": pa.int32(), "second_copy": pa.bool_(), "start": pa.int32()}
    | {"target": pa.string(), "tokens": pa.list_(pa.string()), "attention": pa.list_(pa.float32())}
    | {"loss_increase": pa.float64(), "base_loss": pa.float64()}
)
HEAD_CONTEXTS = TableSpec(
    name="head_contexts",
    file="head_contexts.parquet",
    row="one row per (step, layer, head, rank) at the checkpoints of meta.json `ablation` context_steps",
    about="The tokens in context each head serves most: the 20 predicted tokens of the pooled text and probe "
    "sequences whose loss rises most when the head is ablated, with their context window decoded, the head's "
    "attention over it, the loss increase and the intact loss. Kept at the last checkpoint and the first of each of "
    "the run's stages unless --ablation-steps chooses others. Written with ablation.parquet.",
    schema=HEAD_CONTEXTS_SCHEMA,
    docs=HEAD_CONTEXTS_COLUMN_DOCS,
    sort=("step", "layer", "head", "rank"),
    some_steps=True,
)
ABLATION_TABLES = (ABLATION, HEAD_CONTEXTS)

# ------------------------------------------------------------------ its record

ABLATION_RECORD = RecordType(
    "ablation",
    "how ablation.parquet and head_contexts.parquet were made (the method, what the mean is over, the positions the "
    "increases average over, the contexts' window, count and checkpoints)",
)

# ------------------------------------------------------------------ its options


@dataclass(frozen=True)
class AblationOptions:
    """The ablation lens's options (``--ablation-*``).

    Attributes:
        method: ``mean`` (z_h replaced by its mean over the evaluation text's tokens) or ``zero``.
        steps: the checkpoints whose tokens in context are kept: ``last``, ``all`` or comma-separated steps
            (None: the last and the first of each of the run's stages).
        window: tokens of a context's window, the target included.
    """

    method: AblationMethod = "mean"
    steps: str | None = None
    window: int = CONTEXT_WINDOW

    def __post_init__(self) -> None:
        if self.method not in ABLATION_METHODS:
            raise ValueError(f"--ablation-method {self.method!r}: expected one of {', '.join(ABLATION_METHODS)}")
        if self.window < 2:
            raise ValueError(f"--ablation-window {self.window!r}: expected 2 or more tokens (the target and one before)")
        if self.steps is not None and self.steps not in ("last", "all"):
            try:
                [int(s) for s in self.steps.split(",")]
            except ValueError as exc:
                raise ValueError(
                    f"--ablation-steps {self.steps!r}: expected 'last', 'all' or comma-separated steps (1000,2000)"
                ) from exc


def ablation_options(values: Mapping[str, Any]) -> AblationOptions:
    """`AblationOptions` from the ``--ablation-*`` values by field (absent: the default).

    Raises:
        ValueError: an unknown method, a window under 2, steps that are not 'last', 'all' or integers.
    """
    return AblationOptions(
        method=values.get("method") or "mean",
        steps=values.get("steps"),
        window=int(values.get("window") or CONTEXT_WINDOW),
    )


# ------------------------------------------------------------------ the lens

ABLATION_LENS = Lens(
    name="ablation",
    title="ablation",
    summary="per checkpoint: each head mean-ablated (its output replaced by its mean over the evaluation tokens), the "
    "loss increase on the text and the probe and the ICL scores without it; and each head's top 20 tokens in "
    "context at chosen checkpoints",
    tables=ABLATION_TABLES,
    asked_by="--lenses",
    needs=("checkpoint", "evaluation"),
    record=ABLATION_RECORD,
    options=(
        Option(
            "--ablation-method",
            "method",
            str,
            "{mean,zero}",
            "what replaces a head's output z: its mean over the evaluation text's tokens, or zero",
            "mean",
        ),
        Option(
            "--ablation-steps",
            "steps",
            str,
            "STEPS",
            "checkpoints whose tokens in context are kept: 'last', 'all' or comma-separated steps (default: the last "
            "and the first of each of the run's stages)",
        ),
        Option(
            "--ablation-window",
            "window",
            int,
            "W",
            "tokens of each context's window kept with it, the target included",
            CONTEXT_WINDOW,
        ),
    ),
    make_options=ablation_options,
    seconds=Seconds(
        "ABLATION_SECONDS_160M",
        2674.7,
        "ablation",
        'docs/benchmarks.md "The figures headwatch plan prices with", ABLATION_SECONDS_160M',
    ),
)
