"""The overlaps lens, declared: the overlaps of each head's leading singular vectors between consecutive checkpoints.

Its tables, its ``meta.json`` record, its options, its cost figures, and the lens itself. analysis/stats/crossings.py
reads them; `precompute.lenses.overlaps` computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Option, StoreBytes, options_of
from headwatch.analysis.store.records import RecordType

# ------------------------------------------------------------------ its tables

# overlaps.parquet: how the leading singular directions of each head move between
# consecutive checkpoints with statistics (analysis/stats/crossings.py uses them to tell a
# level crossing from a level repulsion), and how far the whole matrix moved.
# K = meta.json ``overlaps.k`` (8, or d_head if smaller).
OVERLAP_KEY_COLUMNS = ("matrix", "layer", "head", "step")
OVERLAP_COLUMN_DOCS: dict[str, str] = {
    "matrix": 'which product, "qk" or "ov", as in heads.parquet (string; version 3)',
    "layer": "layer index, 0-based (int32)",
    "head": "query-head index within the layer, 0-based (int32)",
    "prev_step": "the earlier checkpoint t (int64)",
    "step": "the next checkpoint with statistics after prev_step, t+1 (int64)",
    "overlap_u": "K x K row-major, entry a*K+b = |<u_a(t), u_b(t+1)>| for the left singular vectors of the matrix (float32)",
    "overlap_v": "the same for the right singular vectors v (float32)",
    "rel_change": "relative change ||W(t+1) - W(t)||_F / ||W(t)||_F of the matrix, from the factors "
    "(analysis/stats/circuits.py; float64, absolute error about 1e-8; version 3)",
}
OVERLAP_COLUMNS = tuple(OVERLAP_COLUMN_DOCS)

OVERLAPS_SCHEMA = schema_of(
    {
        "matrix": pa.string(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "prev_step": pa.int64(),
        "step": pa.int64(),
        "overlap_u": pa.list_(pa.float32()),
        "overlap_v": pa.list_(pa.float32()),
        "rel_change": pa.float64(),
    }
)

assert tuple(OVERLAPS_SCHEMA.names) == OVERLAP_COLUMNS

OVERLAPS = TableSpec(
    name="overlaps",
    file="overlaps.parquet",
    row="one row per (matrix, layer, head, consecutive pair of checkpoints with statistics; also of training states, "
    "around a mixed checkpoint)",
    about="The K x K overlaps of each head's K leading singular vectors between consecutive checkpoints, "
    "which tell a level crossing (the vectors swap) from a level repulsion (they keep their identity), "
    "and the relative change of the head's matrix between the two. "
    "Sorted by (matrix, layer, head, step) and written one row group per (matrix, layer), so one head "
    "is read without decoding the others.",
    schema=OVERLAPS_SCHEMA,
    docs=OVERLAP_COLUMN_DOCS,
    sort=OVERLAP_KEY_COLUMNS,
    row_group_rows=lambda n_layers, n_heads, n_steps: max(1, n_heads * max(n_steps - 1, 1)),
)

# ------------------------------------------------------------------ its record

OVERLAPS_RECORD = RecordType("overlaps", "how overlaps.parquet was made (k, ...)")

# ------------------------------------------------------------------ its options


@dataclass(frozen=True)
class OverlapsOptions:
    """The overlaps' options (``--overlap-k``).

    Attributes:
        k: leading singular vectors per head whose overlaps are stored (capped at d_head); 0 computes none
            and keeps the store's; None: the store's K, else `analysis.stats.crossings.OVERLAP_K`.
    """

    k: int | None = None


# ------------------------------------------------------------------ the lens

OVERLAPS_LENS = Lens(
    name="overlaps",
    title="singular-vector overlaps",
    summary="the overlaps of each head's K leading singular vectors between consecutive checkpoints, "
    "for the level-crossing view (--overlap-k)",
    tables=(OVERLAPS,),
    asked_by="default",
    needs=("tensors",),
    record=OVERLAPS_RECORD,
    store_bytes=StoreBytes(
        (OVERLAPS,),
        478.7,
        "head_matrices",
        "head and matrix",
        'docs/benchmarks.md "The figures headwatch plan prices with", overlaps.parquet',
    ),
    options=(
        Option(
            "--overlap-k",
            "k",
            int,
            "K",
            "leading singular vectors per head whose overlaps between consecutive checkpoints are stored, for the "
            "level-crossing view (default: the store's K, else 8; capped at d_head; 0: compute none and keep what "
            "the store has)",
        ),
    ),
    make_options=options_of(OverlapsOptions),
    off=lambda options: options.lens_options_for("overlaps").k == 0,
    min_checkpoints=2,
    stepwise=False,
)
