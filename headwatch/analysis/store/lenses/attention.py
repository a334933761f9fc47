"""The attention lens, declared: what the heads do on a fixed evaluation set, per checkpoint with statistics.

Its tables (attention.parquet, layer_divergence.parquet, eval_loss.parquet), its ``meta.json`` record
(``forward``: `ForwardInfo`, which sequences), its cost figure, and the lens itself (``--lenses attention``;
docs/design-notes.md section 8). ``analysis/attention/patterns.py`` holds the maths; `precompute.lenses.attention`
computes it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Seconds
from headwatch.analysis.store.records import RecordType

# The induction probe: random sequences of R tokens, each repeated twice, run forward beside the evaluation
# sequences (`precompute.evalset`).
INDUCTION_SEQUENCES = 8

# ------------------------------------------------------------------ its tables

ATTENTION_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "entropy": "attention entropy H_i = -sum_j a_ij log2 a_ij in bits, mean over query positions i and sequences "
    "(uniform causal attention: mean_i log2 i)",
    "entropy_std": "standard deviation of H_i over query positions and sequences (bits)",
    "span": "attention-weighted distance sum_j a_ij (i - j), mean over queries and sequences (uniform: mean_i (i-1)/2)",
    "sink": "attention on the first position a_i1, mean over queries (all i) and sequences",
    "prev_token": "attention on the previous position a_i,i-1, mean over queries i > 1 and sequences",
    "induction": "on R random tokens repeated twice, mean attention from position R+k to k+1 (the token after "
    "the first occurrence), k = 1..R-1",
    "current_token": "attention of a query on itself a_i,i, mean over queries i > 1 (a_11 = 1 for every head) and "
    "sequences; NaN in stores written before it was recorded (recompute the forward lens to have it)",
}
ATTENTION_STATISTICS = tuple(ATTENTION_COLUMN_DOCS)[3:]  # the per-head forward statistics
LAYER_DIVERGENCE_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer_a": "first layer, 0-based (int32)",
    "layer_b": "second layer, 0-based (int32); every ordered pair, a == b included (0)",
    "jsd": "Jensen-Shannon divergence in bits (0..1) between the layers' mean attention distributions over "
    "relative offset d = i - j (mean over heads, queries and sequences)",
}
EVAL_LOSS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "loss": "mean next-token cross-entropy on the evaluation sequences, nats per token (float64)",
    "tokens": "predicted tokens it averages over: sequences x (T - 1) (int64)",
    "probe_copy_loss": "mean next-token cross-entropy on the second copy of the induction probe (R random tokens "
    "repeated twice): the predictions of positions R+1..2R-1 (0-based), which only copying from the first copy "
    "can make; nats per token (ln vocab: no copying). NaN in stores written before it was recorded (float64)",
}
ATTENTION_SCHEMA = schema_of(
    {"step": pa.int64(), "layer": pa.int32(), "head": pa.int32()} | {c: pa.float64() for c in ATTENTION_STATISTICS}
)
LAYER_DIVERGENCE_SCHEMA = schema_of({"step": pa.int64(), "layer_a": pa.int32(), "layer_b": pa.int32(), "jsd": pa.float64()})
EVAL_LOSS_SCHEMA = schema_of({"step": pa.int64(), "loss": pa.float64(), "tokens": pa.int64(), "probe_copy_loss": pa.float64()})

ATTENTION = TableSpec(
    name="attention",
    file="attention.parquet",
    row="one row per (step, layer, head)",
    about="Forward-pass statistics of every head on the store's evaluation sequences (meta.json `forward`): "
    "attention entropy and its spread, span, sink mass, previous-token score, the induction score "
    "on repeated random tokens, and the current-token score. Present when the store was computed with `--lenses attention`.",
    schema=ATTENTION_SCHEMA,
    docs=ATTENTION_COLUMN_DOCS,
    sort=("step", "layer", "head"),
)
LAYER_DIVERGENCE = TableSpec(
    name="layer_divergence",
    file="layer_divergence.parquet",
    row="one row per (step, layer_a, layer_b)",
    about="How differently the layers attend: the Jensen-Shannon divergence between two layers' mean "
    "attention over relative offset, on the evaluation sequences. Written with `attention`.",
    schema=LAYER_DIVERGENCE_SCHEMA,
    docs=LAYER_DIVERGENCE_COLUMN_DOCS,
    sort=("step", "layer_a", "layer_b"),
)
EVAL_LOSS = TableSpec(
    name="eval_loss",
    file="eval_loss.parquet",
    row="one row per step",
    about="The model's loss on the evaluation sequences at each checkpoint with statistics, the curve "
    "the dashboard overlays on its time axes, and its loss on the induction probe's second copy (the "
    "in-context copying signal that drops when induction heads form). Written with `attention`.",
    schema=EVAL_LOSS_SCHEMA,
    docs=EVAL_LOSS_COLUMN_DOCS,
    sort=("step",),
)
# The tables the attention lens writes, committed together with heads.parquet.
ATTENTION_TABLES = (ATTENTION, LAYER_DIVERGENCE, EVAL_LOSS)

# ------------------------------------------------------------------ its record


@dataclass(frozen=True)
class ForwardInfo:
    """How the forward-pass tables were made (``meta.json`` ``forward``; README "attention.parquet").

    Every checkpoint of a store is evaluated on the same sequences; a run asked for other
    ones is refused (`same_evaluation`).

    Attributes:
        lenses: the lenses computed (``["attention"]``).
        n_sequences, seq_len: N sequences of T tokens.
        seed: the seed that chose the N windows of the tokenized text.
        text: where the text came from (a file name, or a run's held-out split).
        text_sha256: sha256 of the text's bytes.
        tokens_sha256: sha256 of the (N, T) int64 token ids, row-major little-endian.
        tokenizer: the tokenizer (a name or path, or ``bytes (vocabulary 256)``).
        induction_repeat: R, the length of the random sequence repeated twice for the induction score.
        induction_sequences: how many such sequences.
        induction_seed: the seed of their tokens.
        dtype: the dtype the forward pass ran in.
    """

    lenses: tuple[str, ...]
    n_sequences: int
    seq_len: int
    seed: int
    text: str
    text_sha256: str
    tokens_sha256: str
    tokenizer: str
    induction_repeat: int
    induction_sequences: int
    induction_seed: int
    dtype: str = "float32"

    # what must match for two runs' rows to describe the same evaluation
    IDENTITY = (
        "n_sequences",
        "seq_len",
        "seed",
        "text_sha256",
        "tokens_sha256",
        "tokenizer",
        "induction_repeat",
        "induction_sequences",
        "induction_seed",
    )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["lenses"] = list(self.lenses)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ForwardInfo:
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {k: (tuple(v) if k == "lenses" else v) for k, v in d.items() if k in known}
        return cls(**kwargs)

    def same_evaluation(self, other: ForwardInfo) -> bool:
        """Whether ``other`` evaluates on exactly the same sequences (its rows are comparable)."""
        return all(getattr(self, k) == getattr(other, k) for k in self.IDENTITY)


ATTENTION_RECORD = RecordType(
    "forward", "how the forward-pass tables were made (ForwardInfo)", read=ForwardInfo.from_dict, write=ForwardInfo.as_dict
)

# ------------------------------------------------------------------ the lens

ATTENTION_LENS = Lens(
    name="attention",
    title="forward lens",
    summary="per checkpoint: loss, attention entropy/span/sink/prev-token/induction, layer divergence",
    tables=ATTENTION_TABLES,
    asked_by="--lenses",
    needs=("checkpoint", "evaluation"),
    record=ATTENTION_RECORD,
    seconds=Seconds(
        "FORWARD_SECONDS_160M",
        19.37,
        "forward",
        'docs/benchmarks.md "The figures headwatch plan prices with", FORWARD_SECONDS_160M',
        sequences=lambda evaluation: evaluation + INDUCTION_SEQUENCES,  # the evaluation sequences and the probe
    ),
)
