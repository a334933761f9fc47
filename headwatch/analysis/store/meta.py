"""Typed ``meta.json`` records and the questions the code asks of them.

``meta.json`` is a store's commit record (README "The statistics store"): the model,
every checkpoint with its weight-file digests, the failures, the settings and
software that made the numbers, and what the optional tables hold. `Meta` is its
one typed view: code asks ``meta.done_steps``, ``meta.duplicates``,
``meta.overlap_k``, ``meta.tokens_at(steps)`` instead of digging in a dict, and
`Meta.to_dict` writes it back with every key it was read with (keys this version
does not know are kept, so a newer tool's additions survive a round trip).

Partial duplicates (docs/design-notes.md section 5, EleutherAI/pythia issue 206): a checkpoint
with a weight file byte-identical to another checkpoint's file, while the whole
differs, mixes two revisions' weights. Within every group of checkpoints sharing a
file, the latest is taken as the file's owner (a branch serving another revision's
file is a later model's file pushed to an earlier branch, as in issue 206) and each
other one gets a `SharedFile` record: it has statistics but is kept out of the
training states the views plot, unless asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from headwatch.analysis.errors import SchemaVersionError, StoreError
from headwatch.analysis.store.format import META_FILE, SCHEMA_VERSION
from headwatch.analysis.store.lenses import RECORDS
from headwatch.analysis.store.older_versions import upgrade_meta


@dataclass(frozen=True)
class SharedFile:
    """A weight file of this checkpoint identical to a file of a later one (the file's owner).

    Attributes:
        file: this checkpoint's file name.
        step: the checkpoint that owns the same bytes.
        other_file: the owner's file name (usually the same name).
        sha256: the file's digest.
    """

    file: str
    step: int
    other_file: str
    sha256: str


@dataclass(frozen=True)
class CheckpointEntry:
    """One checkpoint in ``meta.json`` ``checkpoints``.

    Attributes:
        step, revision: the training step and the folder or branch it was read from.
        tokens: tokens seen at this step, when known.
        sha256: fingerprint of its weights (`precompute.sources.source`); ``sha256_source`` says how it was made.
        files: weight file -> sha256 (empty when the source gave no per-file digests).
        commit: the Hub commit the branch pointed to (None for local folders).
        duplicate_of: the earlier step whose weights are identical (no rows then), else None.
        shared_files: files identical to a later checkpoint's while the whole differs (partial duplicate).
    """

    step: int
    revision: str
    tokens: int | None
    sha256: str
    sha256_source: str = "file"
    files: dict[str, str] = field(default_factory=dict)
    commit: str | None = None
    duplicate_of: int | None = None
    shared_files: tuple[SharedFile, ...] = ()

    @property
    def has_rows(self) -> bool:
        """Whether heads.parquet holds rows for it (every checkpoint but a whole duplicate)."""
        return self.duplicate_of is None

    @property
    def mixed(self) -> bool:
        """Whether some of its weight files are another checkpoint's (a partial duplicate)."""
        return bool(self.shared_files)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["shared_files"] = [asdict(s) for s in self.shared_files]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckpointEntry:
        shared = tuple(SharedFile(**s) for s in d.get("shared_files") or ())
        known = {f.name for f in fields(cls)} - {"shared_files"}
        return cls(**{k: v for k, v in d.items() if k in known}, shared_files=shared)


@dataclass(frozen=True)
class Failure:
    """A checkpoint that could not be read (``meta.json`` ``failed``): ``reason`` is ``missing`` or ``error``."""

    step: int
    revision: str
    error: str
    reason: str = "error"


@dataclass(frozen=True)
class ModelInfo:
    """The model a store describes (``meta.json`` ``model``): the geometry from its config.json."""

    id: str | None
    family: str
    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    n_kv_heads: int | None = None
    model_type: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    GEOMETRY = ("family", "n_layers", "n_heads", "n_kv_heads", "d_model", "d_head")

    def geometry(self) -> dict[str, Any]:
        """The fields two stores must share to describe the same model."""
        return {k: getattr(self, k) for k in self.GEOMETRY}


@dataclass
class Meta:
    """A store's ``meta.json``, typed. Mutable: a precompute run adds checkpoints and failures to it.

    Attributes:
        model: the model.
        checkpoints: every checkpoint read so far, duplicates included, by step.
        failed: checkpoints that could not be read, by step.
        hist_edges: the standardized histogram's edges.
        matrices: which products ``heads.parquet`` rows describe.
        settings: the resolved precompute settings (`precompute.settings.StoreSettings`).
        software: library versions that shaped the numbers.
        training: metadata of a run trained here (``run.json``: tokens per step, losses), else None.
        records: each lens's record of how its tables were made, by ``meta.json`` key, for the keys of
            `analysis.store.lenses.RECORDS` the file has (``meta.records["llc"]``; also read as
            ``meta.llc``, None when absent).
        schema_version: the version the file was written with (`to_dict` always writes
            `SCHEMA_VERSION`: older stores are upgraded on reading, `analysis.store.older_versions`).
        extra: keys this version does not know, written back unchanged.
    """

    model: ModelInfo
    checkpoints: list[CheckpointEntry] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    hist_edges: list[float] = field(default_factory=list)
    matrices: list[str] = field(default_factory=lambda: ["qk"])
    settings: dict[str, Any] = field(default_factory=dict)
    software: dict[str, str] = field(default_factory=dict)
    training: dict[str, Any] | None = None
    records: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ reading and writing

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = META_FILE) -> Meta:
        """Parse a current-version ``meta.json`` dict (see `analysis.store.older_versions` for older ones).

        Raises:
            StoreError: a required key is missing or malformed.
        """
        for key in ("model", "checkpoints", "hist_edges"):
            if key not in d:
                raise StoreError(f"{where!r} lacks the required key {key!r}.")
        try:
            model_fields = {f.name for f in fields(ModelInfo)}
            model = ModelInfo(**{k: v for k, v in d["model"].items() if k in model_fields})
            checkpoints = sorted((CheckpointEntry.from_dict(c) for c in d["checkpoints"]), key=lambda c: c.step)
            failed = sorted((Failure(**f) for f in d.get("failed") or []), key=lambda f: f.step)
        except (TypeError, AttributeError) as exc:
            raise StoreError(
                f"{where!r} is malformed ({exc}); recompute the store with `python -m headwatch.precompute`"
            ) from exc
        records = {}
        for key, record in RECORDS.items():
            if d.get(key) is not None:
                try:
                    records[key] = record.read(d[key])
                except (TypeError, AttributeError) as exc:
                    raise StoreError(f"{where!r} has a malformed {key!r} record ({exc}); recompute the store") from exc
        own = {f.name for f in fields(cls)} - {"model", "checkpoints", "failed", "extra", "records"}
        meta = cls(
            model=model,
            checkpoints=checkpoints,
            failed=failed,
            records=records,
            **{k: d[k] for k in own if k in d and d[k] is not None},
            extra={k: v for k, v in d.items() if k not in own | set(RECORDS) | {"model", "checkpoints", "failed"}},
        )
        meta.mark_shared_files()  # derived from the digests: the same whatever the file says
        return meta

    def to_dict(self) -> dict[str, Any]:
        """The ``meta.json`` dict, keys in a stable order."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "model": {k: v for k, v in asdict(self.model).items() if v is not None or k == "id"},
            "matrices": list(self.matrices),
            "checkpoints": [c.as_dict() for c in self.checkpoints],
            "failed": [asdict(f) for f in self.failed],
            "hist_edges": list(self.hist_edges),
            "settings": self.settings,
            "software": self.software,
        }
        if self.training is not None:
            out["training"] = self.training
        for key, record in RECORDS.items():
            if self.records.get(key) is not None:
                out[key] = record.write(self.records[key])
        out.update(self.extra)
        return out

    # ------------------------------------------------------------------ the lenses' records

    def __getattr__(self, name: str) -> Any:
        """A lens's record read as an attribute (``meta.llc``): `records` by key, None when absent."""
        if name in RECORDS:
            return self.__dict__.get("records", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        """``meta.llc = {...}`` sets the lens's record (None removes it); other names are fields."""
        if name in RECORDS:
            self.set_record(name, value)
        else:
            object.__setattr__(self, name, value)

    def set_record(self, key: str, value: Any) -> None:
        """Set (None: remove) the record ``key`` of `analysis.store.lenses.RECORDS`."""
        assert key in RECORDS, f"no lens declares the record {key!r} (analysis.store.lenses)"
        if value is None:
            self.records.pop(key, None)
        else:
            self.records[key] = value

    def with_record(self, key: str, value: Any) -> Meta:
        """A copy with the record ``key`` set (None: removed); this one is unchanged."""
        out = replace(self, records=dict(self.records))
        out.set_record(key, value)
        return out

    # ------------------------------------------------------------------ questions

    @property
    def done_steps(self) -> list[int]:
        """Steps with rows in ``heads.parquet``: every listed checkpoint that is not a whole duplicate."""
        return [c.step for c in self.checkpoints if c.has_rows]

    @property
    def state_steps(self) -> list[int]:
        """Steps that are training states: with rows and no weight file of another checkpoint."""
        return [c.step for c in self.checkpoints if c.has_rows and not c.mixed]

    @property
    def duplicates(self) -> list[tuple[int, int]]:
        """(step, the earlier step whose weights it repeats) for every whole duplicate, by step."""
        return [(c.step, c.duplicate_of) for c in self.checkpoints if c.duplicate_of is not None]

    @property
    def upgraded(self) -> bool:
        """Whether the file was written by an older schema version (the next commit rewrites it)."""
        return self.schema_version < SCHEMA_VERSION

    @property
    def mixed(self) -> list[CheckpointEntry]:
        """Checkpoints with rows some of whose weight files are a later checkpoint's, by step."""
        return [c for c in self.checkpoints if c.has_rows and c.mixed]

    @property
    def fingerprints(self) -> dict[str, int]:
        """Weights fingerprint -> step, for every checkpoint with rows (what a duplicate is recognised by)."""
        return {c.sha256: c.step for c in self.checkpoints if c.has_rows}

    @property
    def listed_steps(self) -> set[int]:
        return {c.step for c in self.checkpoints}

    @property
    def overlap_k(self) -> int:
        """K of ``overlaps.parquet`` (0 when the store has no overlaps)."""
        return int((self.overlaps or {}).get("k") or 0)

    @property
    def embedding_steps(self) -> list[int] | None:
        """The steps the stored embeddings were made from (None without embeddings)."""
        return (self.embeddings or {}).get("steps")

    @property
    def embedding_settings(self) -> dict[str, Any]:
        """The settings the stored embeddings were made with (UMAP neighbours, ...; empty without)."""
        return dict((self.embeddings or {}).get("settings") or {})

    @property
    def embedding_method(self) -> str:
        """How the stored embeddings were made (``umap`` unless recorded otherwise)."""
        return str((self.embeddings or {}).get("method") or "umap")

    @property
    def recipe(self) -> dict[str, Any] | None:
        """How a run trained here was trained, less its seed: ``run.json``'s ``config`` (model, optimiser, repeats,
        checkpoints, evaluation, tokens per step) without ``seed``, ``software`` and ``transformers_config`` (the
        model's config as transformers writes it, which follows from the model's settings and transformers'
        version), and the corpus's digest. Runs with equal recipes and different `seed` are replicates
        (`analysis.findings.replicates`). None for a run not trained here (no ``run.json``)."""
        config = (self.training or {}).get("config")
        if not isinstance(config, dict):
            return None
        corpus = (self.training or {}).get("corpus")
        recipe = {k: v for k, v in config.items() if k not in ("seed", "software", "transformers_config")}
        return recipe | {"corpus": corpus.get("sha256") if isinstance(corpus, dict) else corpus}

    @property
    def seed(self) -> int | None:
        """The training seed of a run trained here (``run.json`` ``seed``: initial weights, batch order), else None."""
        seed = (self.training or {}).get("seed")
        return None if seed is None else int(seed)

    @property
    def training_losses(self) -> list[dict[str, Any]]:
        """The train and validation losses a run trained here recorded at its checkpoints (``run.json``
        ``losses``: ``step``, ``train_loss``, ``val_loss``); empty for other runs."""
        return list((self.training or {}).get("losses") or [])

    @property
    def source(self) -> tuple[str | None, str]:
        """Where the statistics were computed from: the source's name and kind (``local``, ``hub``, ...)."""
        return self.settings.get("source"), str(self.settings.get("source_kind") or "local")

    def entry(self, step: int) -> CheckpointEntry:
        """The checkpoint of ``step``.

        Raises:
            KeyError: no such checkpoint.
        """
        for c in self.checkpoints:
            if c.step == step:
                return c
        raise KeyError(f"no checkpoint at step {step}")

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens per optimizer step: from ``training``, else the settings, else the checkpoints' token counts."""
        tps = (self.training or {}).get("tokens_per_step") or self.settings.get("tokens_per_step")
        if tps:
            return float(tps)
        for c in self.checkpoints:
            if c.tokens is not None and c.step > 0:
                return float(c.tokens) / float(c.step)
        return None

    def tokens_at(self, steps: Iterable[int]) -> np.ndarray | None:
        """Tokens seen at each of ``steps``: recorded counts where given, else step x tokens per step; None if unknown."""
        steps = [int(s) for s in steps]
        recorded = {c.step: float(c.tokens) for c in self.checkpoints if c.tokens is not None}
        tps = self.tokens_per_step
        if tps is None and not all(s in recorded for s in steps):
            return None
        return np.array([recorded.get(s, s * (tps or 0.0)) for s in steps], dtype=np.float64)

    # ------------------------------------------------------------------ changes (a precompute run)

    def add_checkpoint(self, entry: CheckpointEntry) -> None:
        """Add (or replace) a checkpoint, clear its failure, and re-derive the partial duplicates."""
        self.checkpoints = sorted([c for c in self.checkpoints if c.step != entry.step] + [entry], key=lambda c: c.step)
        self.failed = [f for f in self.failed if f.step != entry.step]
        self.mark_shared_files()

    def add_failure(self, failure: Failure) -> None:
        """Record (or replace) a checkpoint's failure."""
        self.failed = sorted([f for f in self.failed if f.step != failure.step] + [failure], key=lambda f: f.step)

    def mark_shared_files(self) -> None:
        """Set every checkpoint's ``shared_files`` from the weight-file digests (see the module docstring)."""
        self.checkpoints = mark_shared_files(self.checkpoints)


def mark_shared_files(checkpoints: list[CheckpointEntry]) -> list[CheckpointEntry]:
    """The checkpoints with ``shared_files`` derived from their ``files`` digests.

    Only checkpoints with rows take part (a whole duplicate shares every file with its
    original by definition). Within each group sharing a digest the latest step owns the
    file; every other member records it.
    """
    owners: dict[str, tuple[int, str]] = {}  # digest -> (latest step with it, its file name)
    for c in checkpoints:
        if c.has_rows:
            for name, digest in c.files.items():
                if digest and (digest not in owners or owners[digest][0] < c.step):
                    owners[digest] = (c.step, name)
    out = []
    for c in checkpoints:
        shared: tuple[SharedFile, ...] = ()
        if c.has_rows:
            shared = tuple(
                SharedFile(file=name, step=owners[digest][0], other_file=owners[digest][1], sha256=digest)
                for name, digest in sorted(c.files.items())
                if digest and owners[digest][0] != c.step
            )
        out.append(c if shared == c.shared_files else replace(c, shared_files=shared))
    return out


def read_meta(path: str | Path) -> Meta:
    """Read, version-check and (for older versions) upgrade a store's ``meta.json``.

    Args:
        path: the store directory.

    Returns:
        The typed metadata, at `SCHEMA_VERSION`.

    Raises:
        StoreError: the directory or its ``meta.json`` is missing, unreadable or malformed.
        SchemaVersionError: the store was written by a newer schema version.
    """
    path = Path(path)
    meta_path = path / META_FILE
    if not meta_path.is_file():
        raise StoreError(not_a_store(path))
    try:
        raw = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"cannot read {str(meta_path)!r}: {exc}") from exc
    if not isinstance(raw, dict):
        raise StoreError(f"{str(meta_path)!r} is not a JSON object; recompute the store")
    version = raw.get("schema_version")
    if not isinstance(version, int):
        raise StoreError(f"{str(meta_path)!r} has no integer schema_version (found {version!r}).")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"store {str(path)!r} has schema_version {version}, newer than the {SCHEMA_VERSION} "
            "this code reads; upgrade this tool (git pull) to open it."
        )
    if version < 1:
        raise SchemaVersionError(f"store {str(path)!r} has invalid schema_version {version}.")
    return Meta.from_dict(upgrade_meta(raw), where=str(meta_path))


def not_a_store(path: Path) -> str:
    """Why ``path``, which has no ``meta.json``, is not a store, and what to give instead."""
    if path.is_file():
        hint = f"; give its folder, {str(path.parent)!r}" if path.name == META_FILE else ", written by `headwatch precompute`"
        return f"{str(path)!r} is a file, not a store: a store is a folder with {META_FILE}{hint}"
    if not path.exists():
        return f"{str(path)!r} is not a statistics store: it does not exist"
    try:
        held = sorted(p.name for p in path.iterdir() if (p / META_FILE).is_file())
    except OSError:
        held = []
    if held:
        return (
            f"{str(path)!r} is a folder of stores, not a store: name one of them "
            f"({', '.join(held[:4])}{', ...' if len(held) > 4 else ''})"
        )
    return (
        f"{str(path)!r} is not a statistics store: it has no {META_FILE}. "
        "Point at a directory written by `python -m headwatch.precompute`."
    )


def new_meta(model: ModelInfo, *, settings: dict[str, Any], software: dict[str, str], hist_edges: list[float]) -> Meta:
    """Metadata of an empty store: no checkpoints done yet."""
    return Meta(model=model, hist_edges=list(hist_edges), settings=settings, software=software)
