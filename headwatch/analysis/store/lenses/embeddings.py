"""The embeddings lens, declared: the trajectory maps (UMAP) of the heads' statistics, made from the finished store.

Its tables, its ``meta.json`` record, its options, and the lens itself. `precompute.lenses.embeddings` makes them.
"""

from __future__ import annotations

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Option, switch_options
from headwatch.analysis.store.records import RecordType

# ------------------------------------------------------------------ its tables

# embeddings.parquet: the trajectory maps precompute embeds (precompute/lenses/embeddings.py).
EMBEDDING_COLUMN_DOCS: dict[str, str] = {
    "matrix": 'which per-head product\'s trajectories, "qk" or "ov" (string; version 3: older files are "qk")',
    "statistic": "the heads.parquet column whose per-head trajectories were embedded (string)",
    "normalisation": "`zscore` or `global`: how each trajectory was normalised before embedding (string)",
    "layer": "layer index, 0-based (int32)",
    "head": "head index within the layer, 0-based (int32)",
    "x": "map coordinate 1 (float64, UMAP units: only distances on the map mean anything)",
    "y": "map coordinate 2 (float64)",
    "neighbors": "list<int32>: layer-major indices (layer * n_heads + head) of the head's k nearest "
    "trajectories in normalised space, nearest first",
}

EMBEDDINGS_SCHEMA = schema_of(
    {
        "matrix": pa.string(),
        "statistic": pa.string(),
        "normalisation": pa.string(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "x": pa.float64(),
        "y": pa.float64(),
        "neighbors": pa.list_(pa.int32()),
    }
)

assert tuple(EMBEDDINGS_SCHEMA.names) == tuple(EMBEDDING_COLUMN_DOCS)

EMBEDDINGS = TableSpec(
    name="embeddings",
    file="embeddings.parquet",
    row="one row per (matrix, statistic, normalisation, head)",
    about="Precomputed trajectory maps (UMAP of each head's statistic over training) and each head's "
    "nearest trajectories; how they were made is in `meta.json` `embeddings`.",
    schema=EMBEDDINGS_SCHEMA,
    docs=EMBEDDING_COLUMN_DOCS,
    sort=("matrix", "statistic", "normalisation", "layer", "head"),
)

# ------------------------------------------------------------------ its record

EMBEDDINGS_RECORD = RecordType("embeddings", "how embeddings.parquet was made (steps, settings, ...)")

# ------------------------------------------------------------------ the lens

EMBEDDINGS_LENS = Lens(
    name="embeddings",
    title="trajectory-map embeddings",
    summary="UMAP maps of the heads' trajectories, made from the store after a run (--no-embeddings: none)",
    tables=(EMBEDDINGS,),
    asked_by="default",
    needs=("store",),
    record=EMBEDDINGS_RECORD,
    options=(
        Option(
            "--no-embeddings",
            "on",
            bool,
            "",
            "skip the trajectory-map embeddings",
            True,
            switch=True,
            env="HEADWATCH_EMBEDDINGS",
        ),
    ),
    make_options=switch_options,
    off=lambda options: not options.lens_options_for("embeddings").on,
    stepwise=False,
)
