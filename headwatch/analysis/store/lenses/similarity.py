"""The similarity lens, declared: how alike every pair of heads is, and how ultrametric each layer's heads are.

Its tables, its ``meta.json`` record, its options, its cost figures, and the lens itself. analysis/weights/similarity.py and
analysis/weights/ultrametric.py hold the maths; `precompute.lenses.similarity` computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Option, Seconds, StoreBytes, options_of
from headwatch.analysis.store.records import RecordType

# ------------------------------------------------------------------ its tables

# Head similarity that does not depend on the residual basis (analysis/weights/similarity.py; `python -m headwatch.precompute
# --lenses similarity`): for every unordered pair of heads, how alike their W_QK and their W_OV are as matrices
# and how close their column and row spaces are; per layer, how ultrametric (hierarchical) the heads' distances
# are (analysis/weights/ultrametric.py). meta.json ``similarity`` holds the random baselines and the tolerance.
SIMILARITY_STATS = ("qk_frob", "qk_col", "qk_row", "ov_frob", "ov_col", "ov_row")
SIMILARITY_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer_a": "layer of head a, 0-based (int32)",
    "head_a": "query-head index of a within its layer, 0-based (int32)",
    "layer_b": "layer of head b, 0-based (int32); (layer_a, head_a) < (layer_b, head_b) in layer-major order",
    "head_b": "query-head index of b within its layer, 0-based (int32)",
    "qk_frob": "<W_QK,a, W_QK,b>_F / (||W_QK,a||_F ||W_QK,b||_F), in [-1, 1] (float32)",
    "qk_col": "mean cos^2 of the principal angles between the column spaces of W_QK,a and W_QK,b "
    "(what the queries read), in [0, 1] (float32)",
    "qk_row": "mean cos^2 of the principal angles between the row spaces of W_QK,a and W_QK,b "
    "(what the keys read), in [0, 1] (float32)",
    "ov_frob": "<W_OV,a, W_OV,b>_F / (||W_OV,a||_F ||W_OV,b||_F), in [-1, 1] (float32)",
    "ov_col": "mean cos^2 of the principal angles between the column spaces of W_OV,a and W_OV,b "
    "(where the heads write), in [0, 1] (float32)",
    "ov_row": "mean cos^2 of the principal angles between the row spaces of W_OV,a and W_OV,b "
    "(what the values read), in [0, 1] (float32)",
}
SIMILARITY_SCHEMA = schema_of(
    {"step": pa.int64(), "layer_a": pa.int32(), "head_a": pa.int32(), "layer_b": pa.int32(), "head_b": pa.int32()}
    | {c: pa.float32() for c in SIMILARITY_STATS}
)
SIMILARITY = TableSpec(
    name="similarity",
    file="similarity.parquet",
    row="one row per (step, layer_a, head_a, layer_b, head_b) with (layer_a, head_a) < (layer_b, head_b)",
    about="How alike every unordered pair of heads is (within a layer and across layers), in ways invariant under "
    "an orthogonal change of basis of the residual stream: the normalized Frobenius inner product of their W_QK "
    "and of their W_OV, and the mean cos^2 of the principal angles between their column and their row spaces; "
    "from the raw weights (LayerNorm not folded), at every checkpoint with statistics. meta.json `similarity` "
    "gives the values of random Gaussian heads of the same shapes. Present when the store was computed with "
    "`--lenses similarity`.",
    schema=SIMILARITY_SCHEMA,
    docs=SIMILARITY_COLUMN_DOCS,
    sort=("step", "layer_a", "head_a", "layer_b", "head_b"),
)
ULTRAMETRICITY_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "layer": "layer index, 0-based (int32)",
    "distance": "which similarity.parquet column the distance comes from: qk_frob, qk_col, qk_row, ov_frob, "
    "ov_col or ov_row (string); frob: sqrt(2 - 2 x), col and row: sqrt(1 - x)",
    "triangles": "triangles of distinct heads of the layer with three finite sides (int32)",
    "share": "share of those triangles, sides d1 <= d2 <= d3, with d3 - d2 <= tolerance * (d3 - d1) (float64)",
    "baseline": "share for random Gaussian heads of the same shapes (meta.json similarity) (float64)",
    "share_of_max": "share of the triangles with d3 - d2 <= tolerance * d3 (float64)",
    "baseline_of_max": "share_of_max for random Gaussian heads of the same shapes (float64)",
}
ULTRAMETRICITY_SCHEMA = schema_of(
    {"step": pa.int64(), "layer": pa.int32(), "distance": pa.string(), "triangles": pa.int32()}
    | {c: pa.float64() for c in ("share", "baseline", "share_of_max", "baseline_of_max")}
)
ULTRAMETRICITY = TableSpec(
    name="ultrametricity",
    file="ultrametricity.parquet",
    row="one row per (step, layer, distance) at every checkpoint with similarity rows (layers of 3 heads or more)",
    about="How ultrametric (hierarchical) each layer's heads are under each similarity's distance: the share of "
    "triangles of heads whose two largest sides are equal within the tolerance of meta.json `similarity`, "
    "beside the same share for random heads of the same shapes. Written with similarity.parquet.",
    schema=ULTRAMETRICITY_SCHEMA,
    docs=ULTRAMETRICITY_COLUMN_DOCS,
    sort=("step", "layer", "distance"),
)

# ------------------------------------------------------------------ its record

SIMILARITY_RECORD = RecordType(
    "similarity",
    "how similarity.parquet and ultrametricity.parquet were made (tolerance, the random baseline, the definitions)",
)

# ------------------------------------------------------------------ its options


@dataclass(frozen=True)
class SimilarityOptions:
    """The similarity lens's options (``--similarity-*``).

    Attributes:
        tolerance: the ultrametric test's tolerance: a triangle of heads counts as ultrametric when its
            two largest sides differ by at most this share of its spread (`analysis.weights.ultrametric`).
    """

    tolerance: float = 0.1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tolerance) and 0 <= self.tolerance <= 1):
            raise ValueError(f"--similarity-tolerance {self.tolerance!r}: expected a number from 0 to 1")


# ------------------------------------------------------------------ the lens

SIMILARITY_LENS = Lens(
    name="similarity",
    title="head similarity",
    summary="how alike every pair of heads is, independently of the residual basis (W_QK and W_OV cosines, "
    "principal angles), and how ultrametric each layer's heads are, against random heads",
    tables=(SIMILARITY, ULTRAMETRICITY),
    asked_by="--lenses",
    needs=("tensors",),
    record=SIMILARITY_RECORD,
    options=(
        Option(
            "--similarity-tolerance",
            "tolerance",
            float,
            "TOL",
            "a triangle of heads is ultrametric when its two largest sides differ by at most TOL of its spread",
            SimilarityOptions.tolerance,
        ),
    ),
    make_options=options_of(SimilarityOptions),
    seconds=Seconds(
        "SIMILARITY_SECONDS_1_4B",
        873.3,
        "all_head_pairs",
        'docs/benchmarks.md "The figures headwatch plan prices with", SIMILARITY_SECONDS_1_4B',
    ),
    store_bytes=StoreBytes(
        (SIMILARITY, ULTRAMETRICITY),
        30.55,
        "all_head_pairs",
        "unordered pair of heads",
        'docs/benchmarks.md "The figures headwatch plan prices with", similarity.parquet and ultrametricity.parquet',
    ),
)
