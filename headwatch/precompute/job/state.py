"""The state of one precompute run: the store's metadata and tables as they will be committed.

`RunState` holds ``meta`` (`analysis.store.Meta`), the heads and overlaps tables and
the singular vectors the next overlap pair needs; a run changes it only through
`RunState.add` (a checkpoint read), `RunState.fail` (a checkpoint that could not be)
and `RunState.commit` (everything, atomically). `open_state` resumes an existing
store (refusing another model's) or starts a new one, and upgrades a store of an
older schema version in its first commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import CheckpointEntry, Failure, Meta, ModelInfo, read_meta, read_table
from headwatch.analysis.store.format import HEADS, HIST_Z_EDGES, MATRICES, META_FILE, TableSpec
from headwatch.analysis.store.lenses import LENSES, TABLES
from headwatch.analysis.store.lenses.declaration import Lens
from headwatch.analysis.store.lenses.overlaps import OVERLAPS
from headwatch.analysis.store.meta import new_meta
from headwatch.analysis.store.older_versions import complete_heads, complete_keys, complete_overlaps, incomplete_steps
from headwatch.analysis.store.outputs import check_same_model
from headwatch.precompute.settings import StoreSettings, software_versions
from headwatch.precompute.store import pairs as ovl
from headwatch.precompute.store.tables import placeholder_rows
from headwatch.precompute.store.writer import commit_store

log = logging.getLogger("precompute")


@dataclass
class RunState:
    """What a run has made so far, committed together by `commit`.

    Attributes:
        out: the store directory.
        meta: the metadata to write.
        heads: every ``heads.parquet`` row, sorted.
        overlaps: every ``overlaps.parquet`` row, sorted (empty when the run computes none).
        overlap_k: K of the overlaps this run computes (0: none; the store's file is kept as it is).
        last: the latest checkpoint computed this run and its singular vectors.
        held: vectors kept for `precompute.store.pairs.OverlapFiller`: the first checkpoint whose pair
            with its predecessor could not be made here (a resumed run), and the last one's.
        tables: the tables of the stepwise lenses (`precompute.LENSES.stepwise`) the run
            holds, by table name, sorted: the store's rows plus this run's. A lens's tables are held
            (and written by every commit) when the run computes the lens or the store's meta records
            it; otherwise the store's files are kept as they are.
        asked: the names of the lenses this run computes.
    """

    out: Path
    meta: Meta
    heads: pa.Table
    overlaps: pa.Table
    overlap_k: int
    last: tuple[int, ovl.Vectors] | None = None
    held: dict[int, ovl.Vectors] = field(default_factory=dict)
    tables: dict[str, pa.Table] = field(default_factory=dict)
    asked: frozenset[str] = frozenset()

    def add(
        self,
        entry: CheckpointEntry,
        rows: pa.Table | None,
        vectors: ovl.Vectors | None,
        lens_rows: dict[str, pa.Table] | None = None,
    ) -> None:
        """Record a checkpoint read: its entry, its rows (None for a whole duplicate), its rows of the
        lenses computed in the same pass (`put`), and the overlaps of its vectors with the previous
        checkpoint's when those are in memory."""
        self.meta.add_checkpoint(entry)
        if rows is None:
            return
        self.put(lens_rows or {})
        self.heads = HEADS.sorted(pa.concat_tables([self.heads, rows]))
        if vectors is not None:
            self._pair(entry, vectors)

    def redo(
        self, entry: CheckpointEntry, rows: pa.Table, vectors: ovl.Vectors | None, lens_rows: dict[str, pa.Table] | None = None
    ) -> None:
        """Replace the rows of a checkpoint already in the store (`incomplete`) by ``rows``, which hold
        every matrix of the store, and its lens rows by ``lens_rows``; its entry stays as it is."""
        keep = pc.invert(pc.equal(self.heads["step"], pa.scalar(entry.step, pa.int64())))
        self.heads = HEADS.sorted(pa.concat_tables([self.heads.filter(keep), rows]))
        self.put(lens_rows or {})
        if vectors is not None:
            self._pair(entry, vectors)

    def incomplete(self) -> list[int]:
        """Checkpoints whose rows are still to compute (`analysis.store.older_versions.incomplete_steps`)."""
        return incomplete_steps(self.heads)

    def _pair(self, entry: CheckpointEntry, vectors: ovl.Vectors) -> None:
        steps = self.meta.done_steps
        i = steps.index(entry.step)
        before = steps[i - 1] if i else None
        new = [ovl.pair_rows(before, entry.step, self.last[1], vectors)] if self.last and self.last[0] == before else []
        if before is not None and not new and not self.held:
            self.held[entry.step] = vectors
        self.overlaps = ovl.update(self.overlaps, steps, new, self.meta.state_steps)  # also drops a pair this step now splits
        self.last = (entry.step, vectors)

    def put(self, rows: dict[str, pa.Table]) -> None:
        """Add rows of held tables by name, replacing the rows those tables hold for the same units (the same steps;
        for the refined LLC the same step under the same distribution, `analysis.store.format.TableSpec.unit`)."""
        for name, new in rows.items():
            spec = TABLES[name]
            old = self.tables.get(name, spec.empty())
            if spec.unit == ("step",):
                steps = pa.array(pc.unique(new["step"]).to_pylist(), pa.int64())
                kept = old.filter(pc.invert(pc.is_in(old["step"], steps)))
            else:
                units = set(zip(*(new[c].to_pylist() for c in spec.unit), strict=True))
                mask = [u not in units for u in zip(*(old[c].to_pylist() for c in spec.unit), strict=True)]
                kept = old.filter(pa.array(mask, pa.bool_()))
            self.tables[name] = spec.sorted(pa.concat_tables([kept, new]))

    def steps_with(self, name: str, *, where: dict[str, str] | None = None) -> set[int]:
        """Steps with rows in the held table ``name`` (none when it is not held); with ``where``, rows whose columns
        hold those values only (the refined LLC's under one distribution: ``where={"data": "train"}``)."""
        table = self.tables.get(name)
        if table is None:
            return set()
        for column, value in (where or {}).items():
            table = table.filter(pc.equal(table[column], pa.scalar(value)))
        return set(table["step"].to_pylist())

    def holds(self, lens: Lens) -> bool:
        """Whether the run computes ``lens`` or the store's meta records it: its tables are then held
        and written by every commit."""
        return lens.name in self.asked or lens.recorded(self.meta)

    def take_record(self, lens: Lens) -> None:
        """Take ``lens``'s ``meta.json`` record as the store on disk now holds it into ``meta``. A lens made from
        the committed store (it ``needs`` the store: the embeddings, the head types, the stages) writes its
        tables and record in a commit of its own; without this, the run's next commit of ``meta`` would write
        the record as it was before that lens ran (or drop it)."""
        key = lens.meta_key
        if key is not None and (self.out / META_FILE).is_file():
            self.meta.set_record(key, read_meta(self.out).records.get(key))

    def fail(self, failure: Failure) -> None:
        """Record a checkpoint that could not be read (a later success replaces it)."""
        self.meta.add_failure(failure)

    def finish_vectors(self) -> dict[int, ovl.Vectors]:
        """The vectors held for filling the overlaps, the last computed checkpoint's included."""
        if self.last is not None:
            self.held[self.last[0]] = self.last[1]
        return self.held

    def commit(self, *, heads: bool = True) -> None:
        """Write the store atomically: meta.json, heads.parquet (unless ``heads=False``, when it has not
        changed), overlaps.parquet when this run computes overlaps, and the held tables of every lens
        the run computes or the store records (`holds`)."""
        tables = {HEADS.name: self.heads} if heads else {}
        if self.overlap_k:
            tables[OVERLAPS.name] = self.overlaps
        for lens in LENSES.stepwise:
            if self.holds(lens):
                computed = lens.name in self.asked
                tables |= {
                    spec.name: self.tables.get(spec.name, spec.empty())
                    for spec in lens.tables
                    if computed or spec.name in self.tables  # a lens kept as it is writes no table it lacked
                }
        commit_store(self.out, self.meta, tables)


def open_state(out: Path, stored: Meta | None, model: ModelInfo, settings: StoreSettings, asked: frozenset[str]) -> RunState:
    """Resume the store at ``out`` (its metadata ``stored``) or start a new one, under the run's settings,
    for a run computing the lenses named in ``asked``.

    Raises:
        StoreError: the store holds a different model, or comes from another Hub repo.
    """
    software = software_versions()
    if stored is None:
        meta = new_meta(model, settings=settings.as_meta(), software=software, hist_edges=HIST_Z_EDGES.tolist())
        meta.matrices = list(settings.head_matrices)
        return RunState(out, meta, HEADS.empty(), OVERLAPS.empty(), settings.overlap_k, asked=asked)
    check_same_model(out, stored, model, source=settings.source)
    before, before_kind = stored.source
    if settings.source_kind == "hub" and before_kind == "hub" and before != settings.source:
        raise StoreError(f"store {str(out)!r} was computed from {before!r}, not {settings.source!r}; write to a new --out")
    heads = read_table(out, HEADS)
    # rows of steps meta does not list (a fallback commit cut short) are dropped
    heads = HEADS.empty() if heads is None else heads.filter(pc.is_in(heads["step"], pa.array(stored.done_steps, pa.int64())))
    heads = complete_heads(heads, d_model=model.d_model)  # version 1: null-model columns; 2: circuit columns NaN
    gained = [m for m in settings.head_matrices if m not in stored.matrices]
    if gained and stored.done_steps:  # rows to compute, one checkpoint per commit (`RunState.incomplete`)
        log.info(
            "the store gains %s: every one of its %d checkpoints is read again for it", ", ".join(gained), len(stored.done_steps)
        )
    for matrix in gained:
        heads = pa.concat_tables(
            [
                heads,
                placeholder_rows(
                    stored.done_steps,
                    n_layers=model.n_layers,
                    n_heads=model.n_heads,
                    d_head=model.d_head,
                    n_hist=len(HIST_Z_EDGES) + 1,
                    matrix=matrix,
                ),
            ]
        )
    heads = HEADS.sorted(heads)
    overlaps = _stored_overlaps(out, stored, settings.overlap_k)
    meta = stored
    meta.matrices = [m for m in MATRICES if m in stored.matrices or m in settings.head_matrices]
    meta.settings, meta.software = settings.as_meta(), software
    state = RunState(out, meta, heads, overlaps, settings.overlap_k, asked=asked)
    for lens in LENSES.stepwise:
        if state.holds(lens):
            state.tables |= _stored_lens(out, stored, lens, computed=lens.name in asked)
    return state


def _stored_lens(out: Path, meta: Meta, lens: Lens, *, computed: bool = True) -> dict[str, pa.Table]:
    """The store's tables of ``lens`` by name, less rows of steps meta does not list as done. A table
    that is missing, unreadable or of another schema comes back empty, and so do all of the lens's
    tables when they disagree on their steps (a file lost; a table with rows at some steps only,
    `TableSpec.some_steps`, disagrees when it has a step the others lack) and this run computes the lens
    (``computed``): its steps then count as missing and are computed again. A lens this run does not
    compute keeps what the store has, as it is: emptying it would lose estimates nothing recomputes (a
    store written before llc_chains.parquet, given another lens, lost its refined LLC that way)."""
    done = pa.array(meta.done_steps, pa.int64())
    tables = {spec.name: _stored_rows(out, spec, done, lens) for spec in lens.tables}
    steps = [set(tables[spec.name]["step"].to_pylist()) for spec in lens.tables if not spec.some_steps]
    some = [set(tables[spec.name]["step"].to_pylist()) for spec in lens.tables if spec.some_steps]
    every = steps[0] if steps else set()
    if not all(s == every for s in steps) or not all(s <= every for s in some):
        if not computed:
            log.warning(
                "the store's %s tables disagree on their checkpoints; this run does not compute the lens, so they are "
                "kept as they are (add --lenses %s to compute them again)",
                lens.title,
                lens.name,
            )
            return {name: table for name, table in tables.items() if (out / TABLES[name].file).is_file()}
        log.warning("the store's %s tables disagree on their checkpoints: computing them again", lens.title)
        return {spec.name: spec.empty() for spec in lens.tables}
    return tables


def _stored_rows(out: Path, spec: TableSpec, done: pa.Array, lens: Lens) -> pa.Table:
    """One stored table of a stepwise lens, its rows of the ``done`` steps, sorted (empty when it
    cannot be used as it is)."""
    try:
        table = read_table(out, spec)
    except StoreError as exc:
        log.warning("%s: its %s rows are computed again", exc, lens.title)
        return spec.empty()
    if table is None:
        return spec.empty()
    table = complete_keys(spec, table)  # a key column an older file lacks (llc.parquet's data: text)
    if not table.schema.equals(spec.schema):
        log.warning("%s has another schema than this version writes: computing it again", spec.file)
        return spec.empty()
    return spec.sorted(table.filter(pc.is_in(table["step"], done)))


def _stored_overlaps(out: Path, meta: Meta, k: int) -> pa.Table:
    """The store's overlaps for this run's K (empty when it has none, or has them for another K)."""
    stored_k = meta.overlap_k
    if stored_k and stored_k == k:
        try:
            table = read_table(out, OVERLAPS)
        except StoreError as exc:  # derived data: rebuilt from the checkpoints
            log.warning("%s: recomputing the overlaps (every checkpoint is read again)", exc)
            return OVERLAPS.empty()
        return (
            ovl.update(complete_overlaps(table), meta.done_steps, states=meta.state_steps)
            if table is not None
            else OVERLAPS.empty()
        )
    if k and stored_k not in (0, k):  # (K = 0 leaves the file as it is)
        log.warning(
            "the store's overlaps are for K=%s, this run's for K=%s: recomputing every pair (every checkpoint is read again)",
            stored_k,
            k,
        )
    return OVERLAPS.empty()
