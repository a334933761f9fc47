"""The statistics store: its format, its typed metadata, its reader and its upgrade path.

- `analysis.store.format`: schema version, ``meta.json``, `TableSpec`, heads.parquet;
- `analysis.store.lenses`: every lens declared (its tables, its record, its options and costs) and what is assembled
  from them (`TABLES`, `RECORDS`, `LENSES`);
- `analysis.store.meta`: typed ``meta.json`` records (`Meta`, `CheckpointEntry`, ...);
- `analysis.store.records`: what a lens's ``meta.json`` section is (`RecordType`);
- `analysis.store.reader`: `open_store` and `Store` (dense arrays, overlaps, embeddings);
- `analysis.store.older_versions`: how stores of older schema versions are read.

Writing is the precompute job's (`precompute.store.writer`), through the same tables.
"""

from headwatch.analysis.store.format import TableSpec
from headwatch.analysis.store.lenses import TABLES
from headwatch.analysis.store.lenses.attention import ForwardInfo
from headwatch.analysis.store.meta import CheckpointEntry, Failure, Meta, ModelInfo, SharedFile, read_meta
from headwatch.analysis.store.reader import Store, is_store, open_store, read_table, store_version
from headwatch.analysis.store.records import RecordType

__all__ = [
    "TABLES",
    "CheckpointEntry",
    "Failure",
    "ForwardInfo",
    "Meta",
    "ModelInfo",
    "RecordType",
    "SharedFile",
    "Store",
    "TableSpec",
    "is_store",
    "open_store",
    "read_meta",
    "read_table",
    "store_version",
]
