"""The one upgrade path for stores written by older schema versions.

Older stores keep opening: the reader reads them as the current version, deriving
what they lack here and nowhere else, and a precompute run on such a store writes
the upgraded files in its first atomic commit (`precompute.job.run`).

- version 1 -> 2: ``meta.json`` checkpoints gain ``shared_files`` (derived from the
  weight-file digests every version recorded, by `analysis.store.meta.Meta`);
  ``heads.parquet`` may lack the null-model columns, derived from ``sv``
  (`null_model_columns`), by the reader per column and by precompute for the table.
- version 2 -> 3: ``heads.parquet`` lacks the circuit columns (`CIRCUIT_COLUMNS`), which need
  the weights: they read as NaN (`complete_heads`) and a precompute run recomputes the
  checkpoints whose rows lack them (`incomplete_steps`); ``overlaps.parquet`` lacks
  ``matrix`` (its rows are all ``qk``) and ``rel_change`` (NaN: `complete_overlaps`), and a
  precompute run refills those pairs; ``embeddings.parquet`` lacks ``matrix`` (its maps are
  all ``qk``: `upgrade_table`). ``meta.json`` is unchanged.
- within version 3: ``eval_loss.parquet`` gained ``probe_copy_loss``; a file without it reads it as
  NaN (`upgrade_table`), and a precompute run with the attention lens computes the forward rows again.
  ``stages.parquet`` gained ``support`` (the run's merged boundaries); a file without it has no ``run`` basis and
  reads it as empty strings (`upgrade_table`); ``python -m headwatch.precompute.lenses.stages STORE`` makes the stages again.
  ``attention.parquet`` gained ``current_token``; a file without it reads it as NaN (`upgrade_table`: the score was
  not recorded, so the types lens decides no current-token heads there), and a precompute run with the attention
  lens computes the forward rows again (it needs the checkpoints).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from headwatch.analysis.rmt.nullmodel import NULL_RATIO_STATS, null_columns
from headwatch.analysis.store.format import CIRCUIT_COLUMNS, HEADS, NULL_COLUMNS, TableSpec
from headwatch.analysis.store.lenses.attention import ATTENTION, EVAL_LOSS
from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS
from headwatch.analysis.store.lenses.llc import LLC, LLC_CHAINS, LLC_DATA_COLUMN, STORED_BEFORE_DATA
from headwatch.analysis.store.lenses.overlaps import OVERLAPS
from headwatch.analysis.store.lenses.stages import STAGES


def upgrade_meta(raw: dict[str, Any]) -> dict[str, Any]:
    """A ``meta.json`` dict of any version <= current, with what later versions added filled in.

    ``schema_version`` is left as the file has it, so the reader can tell an upgraded store.
    Does not modify ``raw``.
    """
    out = dict(raw)
    out.setdefault("matrices", ["qk"])
    out.setdefault("failed", [])
    out.setdefault("settings", {})
    out.setdefault("software", {})
    return out


def null_model_columns(sv: np.ndarray, spectral: dict[str, np.ndarray], *, d_model: int) -> dict[str, np.ndarray]:
    """The null-model columns of rows that lack them, from their singular values.

    Args:
        sv: ``(..., d_head)`` singular values.
        spectral: the spectral columns the ratios divide (`analysis.rmt.nullmodel.NULL_RATIO_STATS`), each ``sv.shape[:-1]``.
        d_model: the model width (the null model's shape).

    Returns:
        Every column of `NULL_COLUMNS`, float64, shaped like ``sv.shape[:-1]``.
    """
    return null_columns(sv, spectral, d_model=d_model)


def complete_heads(table: pa.Table, *, d_model: int) -> pa.Table:
    """``heads.parquet`` rows with every current column: the null-model columns derived from ``sv``
    where the table lacks them, the circuit columns NaN where it lacks them (they need the weights)."""
    if table.num_rows == 0:
        return HEADS.empty()
    if not all(c in table.column_names for c in NULL_COLUMNS):
        table = table.drop_columns([c for c in NULL_COLUMNS if c in table.column_names])
        values = table["sv"].combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(table.num_rows, -1)
        spectral = {name: table[name].to_numpy() for name in NULL_RATIO_STATS}
        derived = null_model_columns(values, spectral, d_model=d_model)
        for name in NULL_COLUMNS:
            table = table.append_column(pa.field(name, pa.float64()), pa.array(derived[name]))
    for name in CIRCUIT_COLUMNS:
        if name not in table.column_names:
            table = table.append_column(pa.field(name, pa.float64()), pa.array(np.full(table.num_rows, np.nan)))
    return table.select(HEADS.schema.names).cast(HEADS.schema)


def incomplete_steps(table: pa.Table) -> list[int]:
    """Steps of a completed ``heads.parquet`` table (`complete_heads`) with rows still to compute: rows of
    a matrix the store gained after the checkpoint was computed (``std`` NaN: placeholders), and rows
    written before schema version 3, whose circuit columns are NaN although the matrix is not zero.
    A precompute run reads those checkpoints again."""
    if table.num_rows == 0:
        return []
    std = table["std"].to_numpy(zero_copy_only=False)
    sym = table["sym_frac"].to_numpy(zero_copy_only=False)
    frob = table["frob_norm"].to_numpy(zero_copy_only=False)
    todo = np.isnan(std) | (np.isnan(sym) & (frob > 0))
    return sorted(set(table["step"].to_numpy()[todo].tolist()))


def complete_overlaps(table: pa.Table) -> pa.Table:
    """``overlaps.parquet`` rows with every current column: a version-2 file's rows are ``qk`` and
    have no ``rel_change`` (NaN: a precompute run refills those pairs)."""
    if table.num_rows == 0:
        return OVERLAPS.empty()
    if "matrix" not in table.column_names:
        table = table.append_column(pa.field("matrix", pa.string()), pa.array(["qk"] * table.num_rows, pa.string()))
    if "rel_change" not in table.column_names:
        table = table.append_column(pa.field("rel_change", pa.float64()), pa.array(np.full(table.num_rows, np.nan)))
    return table.select(OVERLAPS.schema.names).cast(OVERLAPS.schema)


def complete_keys(spec: TableSpec, table: pa.Table) -> pa.Table:
    """A table with the key columns later versions added, whose value in an older file is known: ``llc.parquet``'s and
    ``llc_chains.parquet``'s ``data`` (``text``, as their meta.json ``llc.evaluation`` says). A run resuming the store
    keeps such rows as they are (`precompute.job.state`); `upgrade_table` does this and more."""
    if spec.name in (LLC.name, LLC_CHAINS.name) and LLC_DATA_COLUMN not in table.column_names and "step" in table.column_names:
        column = pa.array([STORED_BEFORE_DATA] * table.num_rows, pa.string())
        at = min(spec.schema.names.index(LLC_DATA_COLUMN), table.num_columns)
        table = table.add_column(at, pa.field(LLC_DATA_COLUMN, pa.string()), column)
    return table


def upgrade_table(spec: TableSpec, table: pa.Table) -> pa.Table:
    """A table as read from a store of any version, with the columns later versions added where it can
    have them without the weights (`analysis.store.reader.Store.table`); a column it still lacks stays
    absent. Version 2 -> 3: ``embeddings.parquet`` and ``overlaps.parquet`` gain ``matrix`` (``qk``);
    ``eval_loss.parquet`` gains ``probe_copy_loss`` (NaN: the loss on the induction probe was not recorded);
    ``stages.parquet`` gains ``support`` (empty: stages made before the run's merged boundaries) and ``low_step``,
    ``high_step`` (-1), ``evidence`` (NaN): stages made before the boundaries' uncertainty;
    ``attention.parquet`` gains ``current_token`` (NaN: the current-token score was not recorded); ``llc.parquet``
    and ``llc_chains.parquet`` gain ``data`` (``text``: every estimate before it was taken on held-out text, as
    their meta.json ``llc.evaluation`` says)."""
    table = complete_keys(spec, table)
    if spec.name == ATTENTION.name and "current_token" not in table.column_names and "step" in table.column_names:
        table = table.append_column(pa.field("current_token", pa.float64()), pa.array(np.full(table.num_rows, np.nan)))
    if spec.name == STAGES.name and "support" not in table.column_names and "basis" in table.column_names:
        table = table.append_column(pa.field("support", pa.string()), pa.array([""] * table.num_rows, pa.string()))
    if spec.name == STAGES.name and "low_step" not in table.column_names and "basis" in table.column_names:
        for name, kind, fill in (("low_step", pa.int64(), -1), ("high_step", pa.int64(), -1), ("evidence", pa.float64(), np.nan)):
            table = table.append_column(pa.field(name, kind), pa.array(np.full(table.num_rows, fill), kind))
    if spec.name == EVAL_LOSS.name and "probe_copy_loss" not in table.column_names and "step" in table.column_names:
        table = table.append_column(pa.field("probe_copy_loss", pa.float64()), pa.array(np.full(table.num_rows, np.nan)))
    if spec.name in (EMBEDDINGS.name, OVERLAPS.name) and "matrix" not in table.column_names and "matrix" in spec.schema.names:
        column = pa.array(["qk"] * table.num_rows, pa.string())
        table = table.add_column(spec.schema.names.index("matrix"), pa.field("matrix", pa.string()), column)
    return table
