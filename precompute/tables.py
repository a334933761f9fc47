"""Turn one checkpoint's statistics arrays into ``heads.parquet`` rows, and build store metadata.

`analysis.heads.checkpoint_statistics` returns arrays shaped ``(n_layers, n_heads, ...)``;
this module lays them out as one row per (step, layer, head, matrix) with the
column types of `analysis.store.heads_arrow_schema`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from analysis.schema import HIST_Z_EDGES, LIST_COLUMNS, NULL_COLUMNS, SCALAR_COLUMNS, SCHEMA_VERSION
from analysis.store import heads_arrow_schema


def heads_rows(step: int, stats: dict[str, np.ndarray], *, matrix: str = "qk") -> pa.Table:
    """Rows for one checkpoint, in (layer, head) order.

    Args:
        step: the checkpoint's training step.
        stats: arrays from `analysis.heads.checkpoint_statistics`.
        matrix: which product the statistics describe.

    Returns:
        A table with the schema of `analysis.store.heads_arrow_schema`, including
        the null-model columns when ``stats`` has them.
    """
    n_layers, n_heads = stats["std"].shape
    n = n_layers * n_heads
    cols: dict[str, Any] = {
        "step": pa.array(np.full(n, step, dtype=np.int64)),
        "layer": pa.array(np.repeat(np.arange(n_layers, dtype=np.int32), n_heads)),
        "head": pa.array(np.tile(np.arange(n_heads, dtype=np.int32), n_layers)),
        "matrix": pa.array([matrix] * n, type=pa.string()),
    }
    for name in SCALAR_COLUMNS:
        cols[name] = pa.array(np.asarray(stats[name], dtype=np.float64).reshape(n))
    for name in LIST_COLUMNS:
        values = np.asarray(stats[name], dtype=np.float32).reshape(n, -1)
        width = values.shape[1]
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
        cols[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.reshape(-1)))
    with_null = all(name in stats for name in NULL_COLUMNS)
    if with_null:
        for name in NULL_COLUMNS:
            cols[name] = pa.array(np.asarray(stats[name], dtype=np.float64).reshape(n))
    return pa.table(cols, schema=heads_arrow_schema(null_columns=with_null))


def new_meta(*, model: dict[str, Any], settings: dict[str, Any], software: dict[str, str]) -> dict[str, Any]:
    """Metadata of an empty store: no checkpoints done yet."""
    return {
        "schema_version": SCHEMA_VERSION,
        "model": model,
        "matrices": ["qk"],
        "checkpoints": [],
        "failed": [],
        "hist_edges": HIST_Z_EDGES.tolist(),
        "settings": settings,
        "software": software,
    }
