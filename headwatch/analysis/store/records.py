"""The per-lens records of ``meta.json``: one section per lens, saying how its tables were made.

A lens records how it made its tables in one ``meta.json`` section (``llc``: the sampler settings,
``composition``: the random baseline, ...). Each section is a `RecordType` here: its key, what it
holds, and how its JSON is read into the value `analysis.store.Meta` keeps (`Meta.records`) and
written back. Most are plain JSON objects kept as dicts; the forward lens's is typed (`ForwardInfo`).

`RECORDS` lists them in the order ``meta.json`` writes them (after ``training``), so a store reads
and writes the same bytes whatever the lenses are. The precompute registry
(`precompute.registry.Lens.record`) names a lens's record type; a lens added at run time registers
its own with `register_record` (`precompute.registry.register_lens` does). A section whose type is
not registered is kept as the file has it (`Meta.extra`), so a newer tool's records survive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any


def _as_is(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class RecordType:
    """One lens's ``meta.json`` section.

    Attributes:
        key: the section's key (``llc``).
        holds: what it records, in words (the store reference and ``headwatch info`` say it).
        read: its JSON value -> what `Meta.records` keeps (default: the value as it is).
        write: what `Meta.records` keeps -> its JSON value (default: as it is).
    """

    key: str
    holds: str
    read: Callable[[Any], Any] = _as_is
    write: Callable[[Any], Any] = _as_is


@dataclass(frozen=True)
class ForwardInfo:
    """How the forward-pass tables were made (``meta.json`` ``forward``; README "attention.parquet").

    Every checkpoint of a store is evaluated on the same sequences; a run asked for other
    ones is refused (`same_evaluation`).

    Attributes:
        lenses: the lenses computed (``["attention"]``).
        n_sequences, seq_len: N sequences of T tokens.
        seed: the seed that chose the N windows of the tokenized text.
        text: where the text came from (a file name, or a run's held-out split).
        text_sha256: sha256 of the text's bytes.
        tokens_sha256: sha256 of the (N, T) int64 token ids, row-major little-endian.
        tokenizer: the tokenizer (a name or path, or ``bytes (vocabulary 256)``).
        induction_repeat: R, the length of the random sequence repeated twice for the induction score.
        induction_sequences: how many such sequences.
        induction_seed: the seed of their tokens.
        dtype: the dtype the forward pass ran in.
    """

    lenses: tuple[str, ...]
    n_sequences: int
    seq_len: int
    seed: int
    text: str
    text_sha256: str
    tokens_sha256: str
    tokenizer: str
    induction_repeat: int
    induction_sequences: int
    induction_seed: int
    dtype: str = "float32"

    # what must match for two runs' rows to describe the same evaluation
    IDENTITY = (
        "n_sequences",
        "seq_len",
        "seed",
        "text_sha256",
        "tokens_sha256",
        "tokenizer",
        "induction_repeat",
        "induction_sequences",
        "induction_seed",
    )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["lenses"] = list(self.lenses)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ForwardInfo:
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {k: (tuple(v) if k == "lenses" else v) for k, v in d.items() if k in known}
        return cls(**kwargs)

    def same_evaluation(self, other: ForwardInfo) -> bool:
        """Whether ``other`` evaluates on exactly the same sequences (its rows are comparable)."""
        return all(getattr(self, k) == getattr(other, k) for k in self.IDENTITY)


EMBEDDINGS_RECORD = RecordType("embeddings", "how embeddings.parquet was made (steps, settings, ...)")
OVERLAPS_RECORD = RecordType("overlaps", "how overlaps.parquet was made (k, ...)")
LLC_RECORD = RecordType(
    "llc",
    "how llc.parquet was made (sampler settings, evaluation sequences, who sampled and devinterp's version when it did, "
    "restriction, "
    "seconds per step; README 'llc.parquet')",
)
COMPOSITION_RECORD = RecordType("composition", "how composition.parquet was made (top, the random baseline, ...)")
TYPES_RECORD = RecordType(
    "types",
    "how head_types.parquet and head_emergence.parquet were made (the nulls, thresholds and exit levels per "
    "type, the rule, T and R, the steps; analysis.attention.head_types)",
)
STAGES_RECORD = RecordType("stages", "how stages.parquet was made (rule, its parameters, the noise levels, primary)")
SIMILARITY_RECORD = RecordType(
    "similarity",
    "how similarity.parquet and ultrametricity.parquet were made (tolerance, the random baseline, the definitions)",
)
ESSENTIAL_RECORD = RecordType(
    "essential",
    "how essential_outputs.parquet and essential.parquet were made (the sample: sequences, positions, tokens and why; "
    "the components and the variance they explain; the cusp rule; analysis.stages.essential)",
)
FORWARD_RECORD = RecordType(
    "forward", "how the forward-pass tables were made (ForwardInfo)", read=ForwardInfo.from_dict, write=ForwardInfo.as_dict
)

# meta.json's own keys, which no lens record may take.
META_KEYS = frozenset(
    {
        "schema_version",
        "model",
        "matrices",
        "checkpoints",
        "failed",
        "hist_edges",
        "settings",
        "software",
        "training",
        "records",
        "extra",
    }
)

# Every record type by key, in the order meta.json writes them.
RECORDS: dict[str, RecordType] = {
    r.key: r
    for r in (
        EMBEDDINGS_RECORD,
        OVERLAPS_RECORD,
        LLC_RECORD,
        COMPOSITION_RECORD,
        TYPES_RECORD,
        STAGES_RECORD,
        SIMILARITY_RECORD,
        FORWARD_RECORD,
        ESSENTIAL_RECORD,
    )
}


def register_record(record: RecordType) -> None:
    """Add a lens's record type (written after the others). Registering the same type again does nothing.

    Raises:
        ValueError: another record type, or meta.json itself, has its key.
    """
    if record.key in META_KEYS:
        raise ValueError(f"{record.key!r} is a key of meta.json itself; give the lens another key")
    if RECORDS.get(record.key, record) != record:
        raise ValueError(f"meta.json already has a record {record.key!r}; give the lens another key")
    RECORDS[record.key] = record


def unregister_record(key: str) -> None:
    """Remove a record type added by `register_record` (a test's lens, when the test ends)."""
    RECORDS.pop(key, None)
