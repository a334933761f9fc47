"""The composition lens, declared: Q-, K- and V-composition between heads of different layers.

Its tables, its ``meta.json`` record, its options, its cost figures, and the lens itself. analysis/weights/composition.py
holds the maths; `precompute.lenses.composition` computes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Option, Seconds, StoreBytes, options_of
from headwatch.analysis.store.records import RecordType

# ------------------------------------------------------------------ its tables

# Composition between heads (analysis/weights/composition.py; `python -m headwatch.precompute --lenses composition`): how much a
# head B in a later layer reads, through its queries, keys or values, what a head A in an earlier layer writes.
# meta.json ``composition`` holds the random baseline a score is compared with and which pairs were kept.
COMPOSITION_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer_a": "layer of the source head A, 0-based (int32)",
    "head_a": "query-head index of A within its layer, 0-based (int32)",
    "layer_b": "layer of the target head B, 0-based (int32); always > layer_a",
    "head_b": "query-head index of B within its layer, 0-based (int32)",
    "q": "Q-composition ||W_QK,B^T W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F), in [0, 1] (float32)",
    "k": "K-composition ||W_QK,B W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F), in [0, 1] (float32)",
    "v": "V-composition ||W_OV,B W_OV,A||_F / (||W_OV,B||_F ||W_OV,A||_F), in [0, 1] (float32)",
}
COMPOSITION_KINDS = ("q", "k", "v")
COMPOSITION_SCHEMA = schema_of(
    {"step": pa.int64(), "layer_a": pa.int32(), "head_a": pa.int32(), "layer_b": pa.int32(), "head_b": pa.int32()}
    | {c: pa.float32() for c in COMPOSITION_KINDS}
)
COMPOSITION = TableSpec(
    name="composition",
    file="composition.parquet",
    row="one row per (step, layer_a, head_a, layer_b, head_b) with layer_a < layer_b",
    about="Q-, K- and V-composition scores (Elhage et al. 2021) of every ordered pair of heads in different "
    "layers, from the raw weights (LayerNorm not folded), at every checkpoint with statistics; with "
    "`--composition-top K` only the pairs whose source is among the K strongest of its target head for q, k or v. meta.json "
    "`composition` gives the score of random Gaussian heads of the same shapes (a score / it reads as "
    "'x times random'). Present when the store was computed with `--lenses composition`.",
    schema=COMPOSITION_SCHEMA,
    docs=COMPOSITION_COLUMN_DOCS,
    sort=("step", "layer_a", "head_a", "layer_b", "head_b"),
)

# ------------------------------------------------------------------ its record

COMPOSITION_RECORD = RecordType("composition", "how composition.parquet was made (top, the random baseline, ...)")

# ------------------------------------------------------------------ its options


@dataclass(frozen=True)
class CompositionOptions:
    """The composition lens's options (``--composition-*``).

    Attributes:
        top: keep only the pairs whose source is among the ``top`` highest-scoring sources of its
            target head for q, k or v (`analysis.weights.composition.strongest_sources`); None keeps every pair.
    """

    top: int | None = None

    def __post_init__(self) -> None:
        if self.top is not None and self.top < 1:
            raise ValueError(f"--composition-top {self.top!r}: expected a positive integer (leave it out to keep every pair)")


# ------------------------------------------------------------------ the lens

COMPOSITION_LENS = Lens(
    name="composition",
    title="composition scores",
    summary="Q-, K- and V-composition of every pair of heads in different layers, from the weights, "
    "against random heads of the same shapes (--composition-top)",
    tables=(COMPOSITION,),
    asked_by="--lenses",
    needs=("tensors",),
    record=COMPOSITION_RECORD,
    options=(
        Option(
            "--composition-top",
            "top",
            int,
            "K",
            "keep only pairs whose source is among the K strongest of its target head for q, k or v "
            "(default: every pair; Pythia-1.4B has 70,656 per checkpoint)",
        ),
    ),
    make_options=options_of(CompositionOptions),
    seconds=Seconds(
        "COMPOSITION_SECONDS_1_4B",
        532.6,
        "head_pairs",
        'docs/benchmarks.md "The figures headwatch plan prices with", COMPOSITION_SECONDS_1_4B',
    ),
    store_bytes=StoreBytes(
        (COMPOSITION,),
        13.64,
        "head_pairs",
        "pair of heads (every pair)",
        'docs/benchmarks.md "The figures headwatch plan prices with", composition.parquet',
    ),
)
