"""The statistics store: its format, its typed metadata, its reader and its upgrade path.

- `analysis.store.format`: schema version, file names, columns, Arrow schemas, the table registry;
- `analysis.store.meta`: typed ``meta.json`` records (`Meta`, `CheckpointEntry`, ...);
- `analysis.store.records`: the lenses' ``meta.json`` sections (`RECORDS`, `register_record`);
- `analysis.store.reader`: `open_store` and `Store` (dense arrays, overlaps, embeddings);
- `analysis.store.older_versions`: how stores of older schema versions are read.

Writing is the precompute job's (`precompute.store.writer`), through the same registry.
"""

from headwatch.analysis.store.format import TABLES, TableSpec
from headwatch.analysis.store.meta import CheckpointEntry, Failure, Meta, ModelInfo, SharedFile, read_meta
from headwatch.analysis.store.reader import Store, is_store, open_store, read_table, store_version
from headwatch.analysis.store.records import ForwardInfo, RecordType

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
