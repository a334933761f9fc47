"""Turn one checkpoint's statistics into ``heads.parquet`` and ``layers.parquet`` rows.

`analysis.heads.checkpoint_statistics` returns arrays shaped ``(n_layers, n_heads, ...)``;
this module lays them out as one row per (step, layer, head, matrix) with the
registry's schema (`analysis.store.format.HEADS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from analysis.store.format import LAYERS, LIST_COLUMNS, NULL_COLUMNS, SCALAR_COLUMNS, heads_arrow_schema
from analysis.store.upgrade import complete_heads


def heads_rows(step: int, stats: dict[str, np.ndarray], *, d_model: int, matrix: str = "qk") -> pa.Table:
    """Rows for one checkpoint, in (layer, head) order.

    Args:
        step: the checkpoint's training step.
        stats: arrays from `analysis.heads.checkpoint_statistics`.
        d_model: the model width (for the null-model columns, when ``stats`` lacks them).
        matrix: which product the statistics describe.

    Returns:
        A table with the schema of `analysis.store.format.HEADS`; the null-model columns
        are derived from ``sv`` when ``stats`` lacks them (`analysis.store.upgrade.complete_heads`).
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
    table = pa.table(cols, schema=heads_arrow_schema(null_columns=with_null))
    return table if with_null else complete_heads(table, d_model=d_model)


def layers_rows(step: int, records: list[dict[str, Any]]) -> pa.Table:
    """``layers.parquet`` rows for one checkpoint, sorted, from `analysis.layer_matrices.layer_matrix_statistics`.

    Returns:
        A table with the schema of `analysis.store.format.LAYERS`.
    """
    cols: dict[str, Any] = {"step": [step] * len(records)}
    for field in LAYERS.schema:
        if field.name == "step":
            continue
        if pa.types.is_list(field.type):
            cols[field.name] = [np.asarray(r[field.name], dtype=np.float32) for r in records]
        else:
            cols[field.name] = [r[field.name] for r in records]
    return LAYERS.sorted(pa.table(cols, schema=LAYERS.schema))
