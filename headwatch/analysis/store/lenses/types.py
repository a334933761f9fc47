"""The head types lens, declared: previous-token, induction, sink, current-token, multigram and other heads at every
checkpoint and when each emerged.

Its tables, its ``meta.json`` record, its options, and the lens itself. analysis/attention/head_types.py holds the rule;
`precompute.lenses.types` makes them from the attention lens's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Option, options_of
from headwatch.analysis.store.records import RecordType

# ------------------------------------------------------------------ its tables

# Head types (analysis/attention/head_types.py; the `types` lens, made from attention.parquet after a run or on an existing
# store): which heads are previous-token, induction, sink or current-token heads at each checkpoint, each decided by its forward
# score against the value under uniform causal attention (the null) and a threshold; meta.json ``types`` records
# the nulls, the thresholds and the hysteresis rule.
# Types by where a head attends: each an attention.parquet score against its uniform-attention null.
ATTENTION_TYPES = ("previous_token", "induction", "sink", "current_token")
HEAD_TYPE_SCORES = {
    "previous_token": "prev_token",
    "induction": "induction",
    "sink": "sink",
    "current_token": "current_token",
}  # attention.parquet column
# Types by what ablating a head costs (docs/head-types.md): a head that holds no attention type but whose mean
# ablation raises the loss measurably is a multigram head where its top contexts continue frequent n-grams of the
# training text, and "other" where they do not. Decided at the checkpoints with tokens in context only.
FUNCTION_TYPES = ("multigram", "other")
HEAD_TYPES = ATTENTION_TYPES + FUNCTION_TYPES  # the types, in display order
HEAD_TYPES_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "type": "head type: previous_token, induction, sink, current_token, multigram or other (string)",
    "score": "an attention type's forward score (attention.parquet prev_token, induction, sink or current_token) at "
    "this checkpoint; for multigram and other: the loss increase on the evaluation text when the head is mean-ablated "
    "(nats per token, ablation.parquet)",
    "null": "an attention type: the score under uniform causal attention on the same sequences (docs/head-types.md "
    "derives it); multigram and other: the measurable level max(floor, k x standard error) of the ablation effect",
    "ratio": "score / null: how many times uniform attention (for multigram and other: the measurable level)",
    "above": "score >= the type's threshold at this checkpoint alone (bool)",
    "holds": "the head holds the type at this checkpoint under the hysteresis rule (bool)",
}
HEAD_TYPES_SCHEMA = schema_of(
    {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "type": pa.string()}
    | {"score": pa.float64(), "null": pa.float64(), "ratio": pa.float64(), "above": pa.bool_(), "holds": pa.bool_()}
)
HEAD_TYPES_TABLE = TableSpec(
    name="head_types",
    file="head_types.parquet",
    row="one row per (step, layer, head, type) at every checkpoint with forward statistics",
    about="Which type each head holds at each checkpoint: its forward score against the uniform-attention null "
    "and the type's threshold (meta.json `types`), with the hysteresis rule that keeps noise from making a head "
    "flicker. Made from attention.parquet by the `types` lens.",
    schema=HEAD_TYPES_SCHEMA,
    docs=HEAD_TYPES_COLUMN_DOCS,
    sort=("step", "layer", "head", "type"),
)
HEAD_EMERGENCE_COLUMN_DOCS: dict[str, str] = {
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "type": "head type: previous_token, induction, sink, current_token, multigram or other (string)",
    "emergence_step": "first checkpoint from which the head holds the type for the rest of training "
    "(null: it does not hold it at the last checkpoint) (int64)",
    "first_step": "first checkpoint at which the score reaches the threshold at all (null: never) (int64)",
    "peak_score": "largest score over training",
    "peak_step": "checkpoint of the largest score (int64)",
    "final_score": "score at the last checkpoint with forward statistics",
}
HEAD_EMERGENCE_SCHEMA = schema_of(
    {"layer": pa.int32(), "head": pa.int32(), "type": pa.string(), "emergence_step": pa.int64(), "first_step": pa.int64()}
    | {"peak_score": pa.float64(), "peak_step": pa.int64(), "final_score": pa.float64()}
)
HEAD_EMERGENCE = TableSpec(
    name="head_emergence",
    file="head_emergence.parquet",
    row="one row per (layer, head, type)",
    about="When each head became each type: the emergence step (the first checkpoint from which it holds the type "
    "to the end of training, under the hysteresis rule of meta.json `types`), the first crossing of the threshold, "
    "and the peak and final scores. Written with head_types.parquet.",
    schema=HEAD_EMERGENCE_SCHEMA,
    docs=HEAD_EMERGENCE_COLUMN_DOCS,
    sort=("layer", "head", "type"),
)

# The n-gram check of each token in context (analysis/attention/function_types.py): made by the types lens from
# head_contexts.parquet (the ablation lens) and a sample of the training text, at the checkpoints it types
# multigram and other heads at.
CONTEXT_NGRAMS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "rank": "the context's rank in head_contexts.parquet, 1 = the largest loss increase (int32)",
    "order": "the longest n (2..4) whose n-gram of the window ending at the target is a frequent n-gram of the "
    "training-text sample (meta.json `types` function); 0: none is (int32)",
    "count": "that n-gram's occurrences in the sample (0: none) (int64)",
}
CONTEXT_NGRAMS_SCHEMA = schema_of(
    {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "rank": pa.int32()} | {"order": pa.int32(), "count": pa.int64()}
)
CONTEXT_NGRAMS = TableSpec(
    name="context_ngrams",
    file="context_ngrams.parquet",
    row="one row per (step, layer, head, rank) of head_contexts.parquet at the checkpoints typed",
    about="Whether each head's top tokens in context continue a frequent n-gram of the training text: the longest "
    "order whose n-gram ending at the target is among the most frequent of a sample of the text (the multigram "
    "rule of docs/head-types.md). Written by the `types` lens when the store has tokens in context and a training "
    "text is at hand.",
    schema=CONTEXT_NGRAMS_SCHEMA,
    docs=CONTEXT_NGRAMS_COLUMN_DOCS,
    sort=("step", "layer", "head", "rank"),
)

# ------------------------------------------------------------------ its record

TYPES_RECORD = RecordType(
    "types",
    "how head_types.parquet and head_emergence.parquet were made (the nulls, thresholds and exit levels per "
    "type, the rule, T and R, the steps; analysis.attention.head_types)",
)

# ------------------------------------------------------------------ the lens


@dataclass(frozen=True)
class TypesOptions:
    """The types lens's options.

    Attributes:
        on: whether a run makes the head types (``--no-types``: not).
        ngram_text: ``--types-ngram-text``: a UTF-8 text whose n-grams decide multigram heads, tokenized with the
            checkpoints' tokenizer as ``--eval-text`` is (None: a run trained here uses its training split, and
            another run decides no multigram heads).
    """

    on: bool = True
    ngram_text: str | None = None


TYPES_LENS = Lens(
    name="types",
    title="head types",
    summary="previous-token, induction, sink and current-token heads at every checkpoint and when each emerged, from "
    "the forward lens's scores against uniform attention; multigram and other heads from the ablation lens and "
    "the training text's n-grams; made from the store after a run with --lenses attention or ablation "
    "(--no-types: none)",
    tables=(HEAD_TYPES_TABLE, HEAD_EMERGENCE, CONTEXT_NGRAMS),
    asked_by="default",
    needs=("store",),
    record=TYPES_RECORD,
    options=(
        Option(
            "--no-types",
            "on",
            bool,
            "",
            "with --lenses attention or ablation: skip the head types made from their tables",
            True,
            switch=True,
        ),
        Option(
            "--types-ngram-text",
            "ngram_text",
            str,
            "FILE",
            "UTF-8 text whose frequent n-grams decide multigram heads, tokenized as --eval-text is (default: a run "
            "trained here uses its training split; another run decides no multigram heads)",
        ),
    ),
    make_options=options_of(TypesOptions),
    off=lambda options: not options.lens_options_for("types").on or not {"attention", "ablation"} & set(options.lenses),
    stepwise=False,
)
