"""The lenses, each declared once, and what is assembled from their declarations.

A lens is a set of store tables computed from checkpoints. Each module here declares one
(`declaration.Lens`): its tables (`analysis.store.format.TableSpec`), its ``meta.json`` record
(`analysis.store.records.RecordType`), its command-line options, its cost figures, and what it needs
from a checkpoint. Its compute side is a class of the job whose ``lens`` is the declaration
(`precompute.lenses`, `precompute.job.context.Computation`). Nothing here imports torch, transformers or
the job, so the dashboard and ``headwatch info`` read it with the dashboard's requirements alone.

`LENSES` holds them in the order a run fills them (the head types after the attention rows they are
made from, the stages after the curves they cut); from it come the store's tables (`TABLES`, heads.parquet
first), the ``meta.json`` records (`RECORDS`), the choices of ``--lenses`` and ``--matrices`` and every
loop over lenses (the run, its state, the command line, ``headwatch info`` and ``headwatch plan``). A lens
declared elsewhere (a test's, a plugin's) joins with `Lenses.joined`. Adding a lens: docs/precompute.md
"Adding a lens".

The per-head matrices (``qk``, ``ov``: `analysis.store.format.HEADS`) are no lens: every store has them,
computed in the pass over each checkpoint that the lenses join.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from headwatch.analysis.store.format import HEADS, META_FILE, TableSpec
from headwatch.analysis.store.lenses import (
    ablation,
    attention,
    composition,
    embeddings,
    essential,
    layers,
    llc,
    losses,
    overlaps,
    similarity,
    stages,
    types,
)
from headwatch.analysis.store.lenses.declaration import Lens
from headwatch.analysis.store.records import META_KEYS, RecordType

# Every built-in lens, in the order a run fills them after its pass over the checkpoints.
BUILT_IN: tuple[Lens, ...] = (
    attention.ATTENTION_LENS,
    losses.LOSSES_LENS,
    llc.LLC_LENS,
    overlaps.OVERLAPS_LENS,
    layers.LAYERS_LENS,
    composition.COMPOSITION_LENS,
    similarity.SIMILARITY_LENS,
    types.TYPES_LENS,
    embeddings.EMBEDDINGS_LENS,
    essential.ESSENTIAL_LENS,
    stages.STAGES_LENS,
    ablation.ABLATION_LENS,  # after the stages: its tokens in context are kept at the stages' boundaries
)
# The order the store's files and meta.json's records are listed and written in (the dataset card, ``headwatch
# info``, meta.json's bytes): the lenses' own order but for these, which keep the place they have in the stores
# made so far. A lens not named here follows them in run order.
STORE_ORDER: tuple[str, ...] = (
    "overlaps",
    "embeddings",
    "layers",
    "attention",
    "llc",
    "composition",
    "types",
    "stages",
    "similarity",
    "essential",
)
RECORD_ORDER: tuple[str, ...] = (
    "embeddings",
    "overlaps",
    "llc",
    "composition",
    "types",
    "stages",
    "similarity",
    "attention",
    "essential",
)


def _in_order(lenses: tuple[Lens, ...], order: tuple[str, ...]) -> list[Lens]:
    named = {lens.name: lens for lens in lenses}
    return [named[n] for n in order if n in named] + [lens for lens in lenses if lens.name not in order]


class Lenses:
    """The lenses of the store format and the job, and the tables and records assembled from them.

    `tables` and `records` are the one mapping each that everyone reads (`TABLES`, `RECORDS`); `join` and
    `leave` keep them current in place.
    """

    def __init__(self, lenses: tuple[Lens, ...]) -> None:
        self.lenses: tuple[Lens, ...] = ()
        self.tables: dict[str, TableSpec] = {}
        self.records: dict[str, RecordType] = {}
        self._assemble(lenses)

    def _assemble(self, lenses: tuple[Lens, ...]) -> None:
        tables = [HEADS, *(spec for lens in _in_order(lenses, STORE_ORDER) for spec in lens.tables)]
        records = [lens.record for lens in _in_order(lenses, RECORD_ORDER) if lens.record is not None]
        names = [spec.name for spec in tables]
        keys = [record.key for record in records]
        assert len({lens.name for lens in lenses}) == len(lenses), "two lenses of one name"
        assert len(set(names)) == len(names), f"two tables of one name: {names}"
        assert len({spec.file for spec in tables} | {META_FILE}) == len(tables) + 1, "two tables of one file"
        assert len(set(keys)) == len(keys) and not set(keys) & META_KEYS, f"record keys: {keys}"
        self.lenses = lenses
        self.tables.clear()
        self.tables.update((spec.name, spec) for spec in tables)
        self.records.clear()
        self.records.update((record.key, record) for record in records)

    def __iter__(self) -> Iterator[Lens]:
        return iter(self.lenses)

    def __len__(self) -> int:
        return len(self.lenses)

    @property
    def by_name(self) -> dict[str, Lens]:
        return {lens.name: lens for lens in self.lenses}

    @property
    def stepwise(self) -> tuple[Lens, ...]:
        """The lenses whose tables the run state replaces a checkpoint at a time."""
        return tuple(lens for lens in self.lenses if lens.stepwise)

    @property
    def choices(self) -> tuple[str, ...]:
        """What ``--lenses`` may name."""
        return tuple(lens.name for lens in self.lenses if lens.asked_by == "--lenses")

    @property
    def matrix_choices(self) -> tuple[str, ...]:
        """The lenses ``--matrices`` may name beside the per-head matrices."""
        return tuple(lens.name for lens in self.lenses if lens.asked_by == "--matrices")

    @property
    def files(self) -> tuple[str, ...]:
        """Every file a store may hold: ``meta.json`` and each table's."""
        return (META_FILE, *(spec.file for spec in self.tables.values()))

    def join(self, lens: Lens) -> None:
        """Add a lens declared elsewhere after the others: its tables join `tables`, its record type `records`,
        so the run loop, the command line (parsed after this call), the reader, ``headwatch info`` and
        ``headwatch plan`` take it as they take the built-in ones. Undo it with `leave`.

        Raises:
            ValueError: a lens, table or record of that name exists, or it is asked for by ``--matrices`` (whose
                choices are fixed when `precompute.settings` is imported).
        """
        taken = set(self.by_name) | set(self.tables) | set(self.records) | META_KEYS
        if lens.name in taken or any(spec.name in self.tables for spec in lens.tables) or (lens.meta_key in taken):
            raise ValueError(f"lens {lens.name!r}: a lens, table or record of that name is declared already")
        if lens.asked_by == "--matrices":
            raise ValueError(f"lens {lens.name!r}: a lens that joins later is asked for by --lenses or by default")
        self._assemble((*self.lenses, lens))

    def leave(self, name: str) -> None:
        """Remove a lens added by `join`, its tables and its record type."""
        assert name not in {lens.name for lens in BUILT_IN}, f"{name!r} is a built-in lens; it cannot leave"
        self._assemble(tuple(lens for lens in self.lenses if lens.name != name))

    @contextmanager
    def joined(self, lens: Lens) -> Iterator[Lens]:
        """`join` the lens for the ``with`` block, then `leave`."""
        self.join(lens)
        try:
            yield lens
        finally:
            self.leave(lens.name)


LENSES = Lenses(BUILT_IN)
# Every table a store may hold, by name, heads.parquet first; and every lens's meta.json record, by key, in the
# order meta.json writes them.
TABLES: dict[str, TableSpec] = LENSES.tables
RECORDS: dict[str, RecordType] = LENSES.records
