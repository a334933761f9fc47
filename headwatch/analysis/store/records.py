"""The per-lens records of ``meta.json``: one section per lens, saying how its tables were made.

A lens records how it made its tables in one ``meta.json`` section (``llc``: the sampler settings,
``composition``: the random baseline, ...). Each section is a `RecordType`: its key, what it holds, and how
its JSON is read into the value `analysis.store.Meta` keeps (`Meta.records`) and written back. Most are plain
JSON objects kept as dicts; the attention lens's is typed (`analysis.store.lenses.attention.ForwardInfo`).
Each lens declares its record type (`analysis.store.lenses.declaration.Lens.record`); the lenses assemble
them, in the order ``meta.json`` writes them, into `analysis.store.lenses.RECORDS`. A section whose type is
not declared is kept as the file has it (`Meta.extra`), so a newer tool's records survive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
