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

from analysis.errors import StoreError
from analysis.store import CheckpointEntry, Failure, Meta, ModelInfo, read_meta, read_table
from analysis.store.format import FORWARD_TABLES, HEADS, HIST_Z_EDGES, LAYERS, LLC, MATRICES, META_FILE, OVERLAPS
from analysis.store.meta import new_meta
from analysis.store.upgrade import complete_heads, complete_overlaps, incomplete_steps
from precompute.lenses import overlaps as ovl
from precompute.settings import Settings, software_versions
from precompute.store.writer import commit_store
from precompute.store.tables import placeholder_rows

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
        held: vectors kept for `precompute.lenses.overlaps.OverlapFiller`: the first checkpoint whose pair
            with its predecessor could not be made here (a resumed run), and the last one's.
        layers: every ``layers.parquet`` row, sorted (the store's, plus this run's).
        layer_run: whether this run computes the whole-layer matrices (``--matrices`` with ``layers``);
            the file is written only then (otherwise the store's is kept as it is).
        forward: the forward tables (`analysis.store.format.FORWARD_TABLES`) by name, sorted; written
            whenever ``meta.forward`` is set (a store computed with a lens).
        llc: every ``llc.parquet`` row, sorted; written whenever ``meta.llc`` is set.
    """

    out: Path
    meta: Meta
    heads: pa.Table
    overlaps: pa.Table
    overlap_k: int
    last: tuple[int, ovl.Vectors] | None = None
    held: dict[int, ovl.Vectors] = field(default_factory=dict)
    layers: pa.Table = field(default_factory=LAYERS.empty)
    layer_run: bool = False
    forward: dict[str, pa.Table] = field(default_factory=lambda: {spec.name: spec.empty() for spec in FORWARD_TABLES})
    llc: pa.Table = field(default_factory=LLC.empty)

    def add(
        self, entry: CheckpointEntry, rows: pa.Table | None, vectors: ovl.Vectors | None,
        forward: dict[str, pa.Table] | None = None, *, layer_rows: pa.Table | None = None,
    ) -> None:
        """Record a checkpoint read: its entry, its rows (None for a whole duplicate), its forward-table
        rows (if the run computes a lens), its ``layers.parquet`` rows (when the run computes them),
        and the overlaps of its vectors with the previous checkpoint's when those are in memory."""
        self.meta.add_checkpoint(entry)
        if rows is None:
            return
        if forward is not None:
            self.add_forward(forward)
        self.heads = HEADS.sorted(pa.concat_tables([self.heads, rows]))
        if layer_rows is not None:
            self.add_layers(layer_rows)
        if vectors is not None:
            self._pair(entry, vectors)

    def redo(self, entry: CheckpointEntry, rows: pa.Table, vectors: ovl.Vectors | None, *,
             layer_rows: pa.Table | None = None) -> None:
        """Replace the rows of a checkpoint already in the store (`incomplete`) by ``rows``, which hold
        every matrix of the store; its entry stays as it is."""
        keep = pc.invert(pc.equal(self.heads["step"], pa.scalar(entry.step, pa.int64())))
        self.heads = HEADS.sorted(pa.concat_tables([self.heads.filter(keep), rows]))
        if layer_rows is not None:
            self.add_layers(layer_rows)
        if vectors is not None:
            self._pair(entry, vectors)

    def incomplete(self) -> list[int]:
        """Checkpoints whose rows are still to compute (`analysis.store.upgrade.incomplete_steps`)."""
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

    def add_layers(self, layer_rows: pa.Table) -> None:
        """Add (or replace) one checkpoint's ``layers.parquet`` rows."""
        steps = pa.array(sorted(set(layer_rows["step"].to_pylist())), pa.int64())
        kept = self.layers.filter(pc.invert(pc.is_in(self.layers["step"], steps)))
        self.layers = LAYERS.sorted(pa.concat_tables([kept, layer_rows]))

    def layer_steps_missing(self) -> list[int]:
        """Checkpoints with statistics but no ``layers.parquet`` rows (a store from a run without ``layers``)."""
        have = set(self.layers["step"].to_pylist())
        return [s for s in self.meta.done_steps if s not in have]

    def add_forward(self, forward: dict[str, pa.Table]) -> None:
        """Add one checkpoint's forward-table rows (replacing any the tables hold for its step)."""
        for spec in FORWARD_TABLES:
            new = forward[spec.name]
            old = self.forward[spec.name]
            steps = pa.array(pc.unique(new["step"]).to_pylist(), pa.int64())
            kept = old.filter(pc.invert(pc.is_in(old["step"], steps)))
            self.forward[spec.name] = spec.sorted(pa.concat_tables([kept, new]))

    def forward_missing(self) -> list[int]:
        """Steps with weight statistics but no forward rows (computed before the lens was asked for)."""
        have = set(self.forward[FORWARD_TABLES[0].name]["step"].to_pylist())
        return [s for s in self.meta.done_steps if s not in have]

    def add_llc(self, rows: pa.Table) -> None:
        """Add one checkpoint's ``llc.parquet`` rows (replacing any the table holds for its step)."""
        steps = pa.array(pc.unique(rows["step"]).to_pylist(), pa.int64())
        kept = self.llc.filter(pc.invert(pc.is_in(self.llc["step"], steps)))
        self.llc = LLC.sorted(pa.concat_tables([kept, rows]))

    def llc_steps(self) -> set[int]:
        """Steps with ``llc.parquet`` rows."""
        return set(self.llc["step"].to_pylist())

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
        changed) and overlaps.parquet when this run computes overlaps."""
        tables = {HEADS.name: self.heads} if heads else {}
        if self.overlap_k:
            tables[OVERLAPS.name] = self.overlaps
        if self.layer_run:
            tables[LAYERS.name] = self.layers
        if self.meta.forward is not None:
            tables |= self.forward
        if self.meta.llc is not None:
            tables[LLC.name] = self.llc
        commit_store(self.out, self.meta, tables)


def stored_meta(out: Path) -> Meta | None:
    """The metadata of the store at ``out`` (None when there is none yet).

    Raises:
        SchemaVersionError: a newer schema version (nothing is written then).
        StoreError: ``out`` is unreadable, or a non-empty directory that is not a store.
    """
    if (out / META_FILE).is_file():
        return read_meta(out)
    if out.exists() and any(out.iterdir()):
        raise StoreError(f"--out {str(out)!r} exists, is not empty and is not a store; choose a new path")
    return None


def open_state(out: Path, stored: Meta | None, model: ModelInfo, settings: Settings) -> RunState:
    """Resume the store at ``out`` (its metadata ``stored``) or start a new one, under the run's settings.

    Raises:
        StoreError: the store holds a different model, or comes from another Hub repo.
    """
    software = software_versions()
    if stored is None:
        meta = new_meta(model, settings=settings.as_meta(), software=software, hist_edges=HIST_Z_EDGES.tolist())
        meta.matrices = list(settings.head_matrices)
        return RunState(out, meta, HEADS.empty(), OVERLAPS.empty(), settings.overlap_k, layer_run=settings.layers)
    if stored.model.geometry() != model.geometry():
        raise StoreError(
            f"store {str(out)!r} holds a different model ({stored.model.geometry()}) than {settings.source!r} "
            f"({model.geometry()}); write to a new --out"
        )
    before, before_kind = stored.source
    if settings.source_kind == "hub" and before_kind == "hub" and before != settings.source:
        raise StoreError(
            f"store {str(out)!r} was computed from {before!r}, not {settings.source!r}; write to a new --out"
        )
    heads = read_table(out, HEADS)
    if heads is None:
        heads = HEADS.empty()
    else:  # rows of steps meta does not list (a fallback commit cut short) are dropped
        heads = heads.filter(pc.is_in(heads["step"], pa.array(stored.done_steps, pa.int64())))
    heads = complete_heads(heads, d_model=model.d_model)  # version 1: null-model columns; 2: circuit columns NaN
    gained = [m for m in settings.head_matrices if m not in stored.matrices]
    if gained and stored.done_steps:  # rows to compute, one checkpoint per commit (`RunState.incomplete`)
        log.info("the store gains %s: every one of its %d checkpoints is read again for it",
                 ", ".join(gained), len(stored.done_steps))
    for matrix in gained:
        heads = pa.concat_tables([heads, placeholder_rows(
            stored.done_steps, n_layers=model.n_layers, n_heads=model.n_heads, d_head=model.d_head,
            n_hist=len(HIST_Z_EDGES) + 1, matrix=matrix)])
    heads = HEADS.sorted(heads)
    overlaps = _stored_overlaps(out, stored, settings.overlap_k)
    layers = _stored_layers(out, stored) if settings.layers else LAYERS.empty()
    meta = stored
    meta.matrices = [m for m in MATRICES if m in stored.matrices or m in settings.head_matrices]
    meta.settings, meta.software = settings.as_meta(), software
    state = RunState(out, meta, heads, overlaps, settings.overlap_k, layers=layers, layer_run=settings.layers)
    if stored.forward is not None:
        state.forward = _stored_forward(out, stored)
    if stored.llc is not None:
        state.llc = _stored_llc(out, stored)
    return state


def _stored_llc(out: Path, meta: Meta) -> pa.Table:
    """The store's ``llc.parquet`` rows of steps meta lists as done (empty when missing or unreadable:
    its steps are then estimated again)."""
    try:
        table = read_table(out, LLC)
    except StoreError as exc:
        log.warning("%s: its refined-LLC rows are estimated again", exc)
        return LLC.empty()
    if table is None or not table.schema.equals(LLC.schema):
        return LLC.empty()
    return LLC.sorted(table.filter(pc.is_in(table["step"], pa.array(meta.done_steps, pa.int64()))))


def _stored_layers(out: Path, meta: Meta) -> pa.Table:
    """The store's ``layers.parquet`` rows of checkpoints meta lists as done (empty when it has none;
    an unreadable file is recomputed)."""
    try:
        table = read_table(out, LAYERS)
    except StoreError as exc:
        log.warning("%s: recomputing the layer matrices (every checkpoint is read again)", exc)
        return LAYERS.empty()
    if table is None:
        return LAYERS.empty()
    if not table.schema.equals(LAYERS.schema):
        log.warning("%s has another schema than this version writes: recomputing it", LAYERS.file)
        return LAYERS.empty()
    return LAYERS.sorted(table.filter(pc.is_in(table["step"], pa.array(meta.done_steps, pa.int64()))))


def _stored_forward(out: Path, meta: Meta) -> dict[str, pa.Table]:
    """The store's forward tables, less rows of steps meta does not list as done (a missing or
    unreadable table is recomputed: its steps then count as missing)."""
    done = pa.array(meta.done_steps, pa.int64())
    tables = {}
    for spec in FORWARD_TABLES:
        try:
            table = read_table(out, spec)
        except StoreError as exc:
            log.warning("%s: its forward rows are recomputed", exc)
            table = None
        tables[spec.name] = spec.empty() if table is None else spec.sorted(table.filter(pc.is_in(table["step"], done)))
    steps = [set(t["step"].to_pylist()) for t in tables.values()]
    if not all(s == steps[0] for s in steps):  # tables disagree (a file lost): recompute every step's
        tables = {spec.name: spec.empty() for spec in FORWARD_TABLES}
    return tables


def _stored_overlaps(out: Path, meta: Meta, k: int) -> pa.Table:
    """The store's overlaps for this run's K (empty when it has none, or has them for another K)."""
    stored_k = meta.overlap_k
    if stored_k and stored_k == k:
        try:
            table = read_table(out, OVERLAPS)
        except StoreError as exc:  # derived data: rebuilt from the checkpoints
            log.warning("%s: recomputing the overlaps (every checkpoint is read again)", exc)
            return OVERLAPS.empty()
        return ovl.update(complete_overlaps(table), meta.done_steps, states=meta.state_steps) if table is not None else OVERLAPS.empty()
    if k and stored_k not in (0, k):  # (K = 0 leaves the file as it is)
        log.warning("the store's overlaps are for K=%s, this run's for K=%s: recomputing every pair "
                    "(every checkpoint is read again)", stored_k, k)
    return OVERLAPS.empty()
