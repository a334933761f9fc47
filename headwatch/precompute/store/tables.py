"""Turn one checkpoint's statistics into ``heads.parquet`` and ``layers.parquet`` rows, and rows over pairs of heads.

`analysis.weights.heads.checkpoint_statistics` returns arrays shaped ``(n_layers, n_heads, ...)``;
this module lays them out as one row per (step, layer, head, matrix) with the
declared schema (`analysis.store.format.HEADS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from headwatch.analysis.store.format import CIRCUIT_COLUMNS, LIST_COLUMNS, NULL_COLUMNS, SCALAR_COLUMNS, heads_arrow_schema
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.analysis.store.older_versions import complete_heads


def heads_rows(step: int, stats: dict[str, np.ndarray], *, d_model: int, matrix: str = "qk") -> pa.Table:
    """Rows for one checkpoint, in (layer, head) order.

    Args:
        step: the checkpoint's training step.
        stats: arrays from `analysis.weights.heads.checkpoint_statistics`.
        d_model: the model width (for the null-model columns, when ``stats`` lacks them).
        matrix: which product the statistics describe.

    Returns:
        A table with the schema of `analysis.store.format.HEADS`; the null-model columns
        are derived from ``sv`` when ``stats`` lacks them, the circuit columns NaN
        (`analysis.store.older_versions.complete_heads`).
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
    with_circuits = all(name in stats for name in CIRCUIT_COLUMNS)
    for present, names in ((with_null, NULL_COLUMNS), (with_circuits, CIRCUIT_COLUMNS)):
        if present:
            for name in names:
                cols[name] = pa.array(np.asarray(stats[name], dtype=np.float64).reshape(n))
    table = pa.table(cols, schema=heads_arrow_schema(null_columns=with_null, circuit_columns=with_circuits))
    return table if with_null and with_circuits else complete_heads(table, d_model=d_model)


def placeholder_rows(steps: list[int], *, n_layers: int, n_heads: int, d_head: int, n_hist: int, matrix: str) -> pa.Table:
    """Rows of ``matrix`` for checkpoints that have none yet, every statistic NaN (``std`` NaN marks them;
    `analysis.store.older_versions.incomplete_steps`): a store that gains a matrix stays consistent (every
    checkpoint has rows for each of ``meta.json`` ``matrices``) while the run computes them, one
    checkpoint per commit, and one whose checkpoint cannot be read again keeps them.

    Args:
        steps: the checkpoints.
        n_layers, n_heads, d_head: the model.
        n_hist: entries of ``hist_z`` (len(edges) + 1).
        matrix: which product.
    """
    nan = np.full((n_layers, n_heads), np.nan)
    stats = {name: nan for name in SCALAR_COLUMNS + NULL_COLUMNS + CIRCUIT_COLUMNS}
    stats["sv"] = np.full((n_layers, n_heads, d_head), np.nan)
    stats["hist_z"] = np.full((n_layers, n_heads, n_hist), np.nan)
    tables = [heads_rows(step, stats, d_model=1, matrix=matrix) for step in steps]
    return pa.concat_tables(tables) if tables else heads_arrow_schema().empty_table()


def layers_rows(step: int, records: list[dict[str, Any]]) -> pa.Table:
    """``layers.parquet`` rows for one checkpoint, sorted, from `analysis.weights.layers.layer_matrix_statistics`.

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


def head_pair_rows(step: int, values: np.ndarray, mask: np.ndarray, columns: tuple[str, ...], schema: pa.Schema) -> pa.Table:
    """One row per pair of heads of ``mask``, sorted by (layer_a, head_a, layer_b, head_b), with a float32 column per
    statistic (the composition and similarity tables).

    Args:
        step: the checkpoint's step.
        values: ``(len(columns), n_layers, n_heads, n_layers, n_heads)``, statistic first.
        mask: bool ``(n_layers, n_heads, n_layers, n_heads)``: the pairs to write.
        columns: the statistics' column names, in the order of ``values``.
        schema: the table's schema.
    """
    la, ha, lb, hb = np.nonzero(mask)  # C order: sorted by (layer_a, head_a, layer_b, head_b)
    table: dict[str, Any] = {
        "step": pa.array(np.full(la.size, step, dtype=np.int64)),
        "layer_a": pa.array(la.astype(np.int32)),
        "head_a": pa.array(ha.astype(np.int32)),
        "layer_b": pa.array(lb.astype(np.int32)),
        "head_b": pa.array(hb.astype(np.int32)),
    }
    for i, column in enumerate(columns):
        table[column] = pa.array(values[i][mask].astype(np.float32))
    return pa.table(table, schema=schema)
