"""The essential dynamics lens, declared: the model's outputs on a fixed sample and their trajectory in its leading
principal components.

Its tables, its ``meta.json`` record, its cost figures, and the lens itself. analysis/stages/essential.py holds the maths;
`precompute.lenses.essential` computes it.
"""

from __future__ import annotations

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Seconds, StoreBytes
from headwatch.analysis.store.records import RecordType

# Sequences of each kind (evaluation text, induction probe) in the sample.
SEQUENCES = 4

# ------------------------------------------------------------------ its tables

# Essential dynamics (analysis/stages/essential.py; `python -m headwatch.precompute --lenses essential`): per
# checkpoint, the model's next-token log-probabilities on a fixed sample (meta.json ``essential`` records it), and
# their trajectory in its leading principal components over the checkpoints, with its cusps.
ESSENTIAL_OUTPUTS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "logprobs": "the model's next-token log-probabilities (nats) on the sample of meta.json essential, in (sequence, "
    "position, token) order: sequences x positions x tokens values (list<float32>)",
}
ESSENTIAL_OUTPUTS = TableSpec(
    name="essential_outputs",
    file="essential_outputs.parquet",
    row="one row per step",
    about="The outputs the essential-dynamics lens reads: per checkpoint, the log-probabilities of a fixed subset of "
    "tokens at fixed positions of fixed sequences (the sample and how it was chosen are in meta.json `essential`).",
    schema=schema_of({"step": pa.int64(), "logprobs": pa.list_(pa.float32())}),
    docs=ESSENTIAL_OUTPUTS_COLUMN_DOCS,
    sort=("step",),
)
ESSENTIAL_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "component": "0-based index of the principal component over checkpoints (int32)",
    "score": "the checkpoint's coordinate on the component: U[t, j] S[j] of the thin SVD of the centred outputs "
    "(nats; each component's sign makes its largest-magnitude score positive)",
    "explained": "fraction of the outputs' variance over checkpoints the component explains, S[j]^2 / sum(S^2) "
    "(the same in every row of the component)",
    "turn": "degrees the trajectory, smoothed over checkpoints by a Gaussian filter, turns at the checkpoint, between "
    "x(t) - x(a) and x(b) - x(t) with a and b 5% of the path's length before and after it along the path (NaN where a "
    "side is shorter; the same in every row of the step; analysis.stages.essential.arc_turns)",
    "cusp": "the checkpoint is a cusp: a minimum of the smoothed path's speed where it turns by more than 90 degrees "
    "plus a margin of 15 (analysis.stages.essential.turns; meta.json essential turns lists every minimum with its "
    "verdict) (bool)",
}
ESSENTIAL = TableSpec(
    name="essential",
    file="essential.parquet",
    row="one row per (step, component)",
    about="Essential dynamics: the trajectory of the model's outputs on fixed inputs (essential_outputs.parquet) in "
    "its leading principal components over the checkpoints, the variance each explains, and the trajectory's cusps "
    "(turning points; the rule is in meta.json `essential`). Made again from essential_outputs.parquet by every run "
    "of the `essential` lens.",
    schema=schema_of(
        {"step": pa.int64(), "component": pa.int32(), "score": pa.float64(), "explained": pa.float64()}
        | {"turn": pa.float64(), "cusp": pa.bool_()}
    ),
    docs=ESSENTIAL_COLUMN_DOCS,
    sort=("step", "component"),
)

# ------------------------------------------------------------------ its record

ESSENTIAL_RECORD = RecordType(
    "essential",
    "how essential_outputs.parquet and essential.parquet were made (the sample: sequences, positions, tokens and why; "
    "the components and the variance they explain; the cusp rule; analysis.stages.essential)",
)

# ------------------------------------------------------------------ the lens

ESSENTIAL_LENS = Lens(
    name="essential",
    title="essential dynamics",
    summary="per checkpoint, the log-probabilities of a fixed sample of sequences, positions and tokens; their "
    "trajectory in its leading principal components over checkpoints, with its cusps (docs/stages.md)",
    tables=(ESSENTIAL_OUTPUTS, ESSENTIAL),
    asked_by="--lenses",
    needs=("checkpoint", "evaluation"),
    record=ESSENTIAL_RECORD,
    seconds=Seconds(
        "ESSENTIAL_SECONDS_160M",
        3.37,
        "forward",
        'docs/benchmarks.md "The figures headwatch plan prices with", ESSENTIAL_SECONDS_160M',
        sequences=lambda evaluation: min(evaluation, SEQUENCES) + SEQUENCES,  # the sample's sequences of each kind
    ),
    store_bytes=StoreBytes(
        (ESSENTIAL_OUTPUTS,),
        24137.3,
        "checkpoint",
        "checkpoint",
        'docs/benchmarks.md "The figures headwatch plan prices with", essential_outputs.parquet',
    ),
)
