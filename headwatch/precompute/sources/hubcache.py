"""Checkpoints of a Hugging Face Hub model repo read from the local Hub cache, offline.

With ``HF_HUB_OFFLINE=1`` nothing is asked of the Hub: a repo's branches cannot be
listed, so ``--revisions`` names the checkpoints, and each is read from the cache
that huggingface_hub keeps (``HF_HUB_CACHE/models--ORG--NAME``: ``refs/<branch>``
holds a commit, ``snapshots/<commit>/`` the files) like a local ``save_pretrained``
folder. Its weight files are hashed (``sha256_source: file``, the same digest the
Hub reports for LFS files), so online and offline runs of one store recognise the
same weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.file_download import repo_folder_name

from headwatch.analysis.errors import CheckpointNotFoundError
from headwatch.families.family import ModelShape
from headwatch.precompute.sources.checkpoints import read_config, read_folder
from headwatch.precompute.sources.revisions import CheckpointRef, known_tokens_per_step
from headwatch.precompute.sources.source import CheckpointSource, Fetched, SkipFn, SourceKind


class HubCacheSource(CheckpointSource):
    """The cached revisions of a Hub model repo.

    Args:
        repo_id: ``ORG/NAME``.
        cache_dir: the Hub cache (default: ``HF_HUB_CACHE``).

    Raises:
        CheckpointNotFoundError: the cache holds nothing of the repo.
    """

    kind: ClassVar[SourceKind] = "hub"  # the same repo as `HubSource` reads; meta.json cannot tell them apart

    def __init__(self, repo_id: str, *, cache_dir: str | Path | None = None):
        super().__init__(name=repo_id, model_id=repo_id)
        self.repo_id = repo_id
        self.cache_dir = str(cache_dir or constants.HF_HUB_CACHE)
        if not (Path(self.cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model")).is_dir():
            raise CheckpointNotFoundError(
                f"{repo_id!r} is not in the local Hub cache {self.cache_dir!r} and HF_HUB_OFFLINE is set; "
                "unset HF_HUB_OFFLINE to read it from the Hub, or check the repo id"
            )

    def list(self) -> None:
        return None  # the cache knows the branches downloaded, not the repo's: --revisions names them

    def config(self, ref: CheckpointRef) -> dict[str, Any]:
        return read_config(self._snapshot(ref))

    def fetch(
        self, ref: CheckpointRef, shape: ModelShape, *, skip: SkipFn, matrices: tuple[str, ...] = ("qk",), layers: bool = False
    ) -> Fetched:
        folder = self._snapshot(ref)
        return read_folder(folder, ref, shape, skip=skip, commit=folder.name, matrices=matrices, layers=layers)

    @contextlib.contextmanager
    def checkpoint_folder(self, ref: CheckpointRef) -> Iterator[Path]:
        yield self._snapshot(ref)

    def tokenizer_location(self, ref: CheckpointRef) -> tuple[str, dict[str, Any]]:
        return self.repo_id, {"cache_dir": self.cache_dir}

    def default_tokens_per_step(self) -> int | None:
        return known_tokens_per_step(self.repo_id)

    def _snapshot(self, ref: CheckpointRef) -> Path:
        """The snapshot folder (named by its commit) that the revision points to."""
        path = try_to_load_from_cache(self.repo_id, "config.json", cache_dir=self.cache_dir, revision=ref.revision)
        if not isinstance(path, str):
            raise CheckpointNotFoundError(
                f"revision {ref.revision!r} of {self.repo_id} is not in the local Hub cache {self.cache_dir!r} "
                "(HF_HUB_OFFLINE is set, so only cached revisions can be read)"
            )
        return Path(path).parent
