"""Checkpoints in a local folder: one ``save_pretrained`` sub-folder per checkpoint
(`precompute.sources.checkpoints` finds, fingerprints and reads them), plus the ``run.json``
that `training` writes beside the checkpoints of a run trained here.

While a run trains (`precompute.follow`), the source lists only the checkpoints whose files are
complete (`precompute.sources.checkpoints.incomplete_reason`), and before ``run.json`` exists it reads
the run's record from ``run-started.json``, which `training` writes when it starts (the same record
without what only the end knows: losses, wall time).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from headwatch.analysis.errors import CheckpointError, CheckpointNotFoundError
from headwatch.families.family import ModelShape
from headwatch.precompute.sources.checkpoints import find_checkpoints, incomplete_reason, read_config, read_folder
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched, SkipFn, SourceKind
from headwatch.training.markers import RUN_FILE, RUN_STARTED_FILE

RUN_INFO_FILE = RUN_FILE  # written by training/ next to the checkpoint folders, last: the run has finished

log = logging.getLogger("precompute")


class LocalSource(CheckpointSource):
    """The checkpoints of a local folder: ``folder/step<N>/``, ``folder/checkpoint-<N>/``, ..."""

    kind: ClassVar[SourceKind] = "local"

    def __init__(self, folder: str | Path, *, following: bool = False):
        """Args:
        folder: the run folder.
        following: the run may still be training: list only complete checkpoints, and read the run's
            record from ``run-started.json`` until ``run.json`` exists.
        """
        self.folder = Path(folder)
        self.following = following
        super().__init__(name=str(self.folder.resolve()), model_id=self.folder.resolve().name)

    @property
    def recorded_name(self) -> str:
        """The folder relative to the working directory when it lies under it (as the user
        would type it), else its name alone: a store must not carry a path of the machine
        that made it (``/home/me/runs/x`` means nothing to a collaborator)."""
        return recorded_folder(self.folder)

    def list(self) -> tuple[list[CheckpointRef], list[str]]:
        refs, ignored = find_checkpoints(self.folder)
        if not self.following:
            return refs, ignored
        ready = []
        for ref in refs:
            reason = incomplete_reason(self.folder / ref.revision)
            if reason is None:
                ready.append(ref)
            else:
                log.info("%s is still being written (%s): left for the next round", ref.revision, reason)
        return ready, ignored

    def config(self, ref: CheckpointRef) -> dict[str, Any]:
        return read_config(self._path(ref))

    def fetch(
        self, ref: CheckpointRef, shape: ModelShape, *, skip: SkipFn, matrices: tuple[str, ...] = ("qk",), layers: bool = False
    ) -> Fetched:
        return read_folder(self._path(ref), ref, shape, skip=skip, matrices=matrices, layers=layers)

    @contextlib.contextmanager
    def checkpoint_folder(self, ref: CheckpointRef) -> Iterator[Path]:
        yield self._path(ref)

    def tokenizer_location(self, ref: CheckpointRef) -> tuple[str, dict[str, Any]]:
        return str(self._path(ref)), {}

    def run_info(self) -> dict[str, Any] | None:
        path = self.folder / RUN_INFO_FILE
        if not path.is_file() and self.following:
            path = self.folder / RUN_STARTED_FILE
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{str(path)!r} is not valid JSON: {exc}") from exc

    def _path(self, ref: CheckpointRef) -> Path:
        path = self.folder / ref.revision
        if not path.is_dir():
            raise CheckpointNotFoundError(f"no checkpoint folder {ref.revision!r} in {str(self.folder)!r}")
        return path


def recorded_folder(folder: str | Path, *, cwd: Path | None = None) -> str:
    """A local folder as a store records it: relative to ``cwd`` (default: the working
    directory) in POSIX form when it lies under it, else its own name.

    Args:
        folder: the folder as given (relative or absolute).
        cwd: the directory to be relative to.

    Returns:
        ``runs/pythia-6x8`` for a folder under ``cwd``; ``pythia-6x8`` for one elsewhere.
    """
    resolved = Path(folder).resolve()
    base = (cwd or Path.cwd()).resolve()
    if resolved.is_relative_to(base) and resolved != base:
        return resolved.relative_to(base).as_posix()
    return resolved.name
