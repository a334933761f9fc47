"""Where checkpoints come from: one interface, two implementations.

- `precompute.checkpoints.LocalSource`: a folder of ``step<N>/`` (or ``checkpoint-<N>/``, ...)
  sub-folders in transformers' ``save_pretrained`` format;
- `precompute.hub.HubSource`: a Hugging Face Hub model repo whose branches are the
  checkpoints (online: only the Q/K bytes are fetched; offline: the local Hub cache).

The precompute loop (`precompute.run`) sees only `CheckpointSource` and `Fetched`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from analysis.errors import CheckpointError, CheckpointNotFoundError
from analysis.extract import ModelShape, model_shape
from precompute.fetch import Meter
from precompute.revisions import CheckpointRef
from precompute.settings import FetchSettings

# How a checkpoint's sha256 was obtained (meta.json ``sha256_source``):
#   file: hashed every weight file here (local folders, the Hub cache);
#   hub:  the Hub's LFS metadata, without downloading (the same digest as `file`);
#   read: the attention tensors as read (the Hub reported no LFS digest); equal only
#         to other `read` fingerprints.
Sha256Source = Literal["file", "hub", "read"]


@dataclass
class Fetched:
    """One checkpoint as fetched: its fingerprint and, unless it was skipped as a
    duplicate, its config and attention tensors."""

    ref: CheckpointRef
    sha256: str
    sha256_source: Sha256Source
    files: dict[str, str]  # weight file -> sha256 (empty for `read`)
    commit: str | None = None  # the Hub commit the branch pointed to
    config: dict[str, Any] | None = None
    tensors: dict[str, torch.Tensor] | None = None


# fingerprint -> True to skip reading the tensors (a checkpoint with these weights is known)
SkipFn = Callable[[str], bool]


class CheckpointSource(Protocol):
    """A suite of checkpoints.

    Attributes:
        kind: ``local`` or ``hub``.
        name: what the store records as its source (a resolved path, or a repo id).
        model_id: the default model name in meta.json.
    """

    kind: Literal["local", "hub"]
    name: str
    model_id: str

    def list(self) -> tuple[list[CheckpointRef], list[str]] | None:
        """Every checkpoint in step order and the names ignored, or None where the source
        cannot be listed (the Hub in offline mode).

        Raises:
            CheckpointNotFoundError: the source does not exist.
            CheckpointError: two names denote one step.
        """
        ...

    def config(self, ref: CheckpointRef) -> dict[str, Any]:
        """A checkpoint's ``config.json``.

        Raises:
            CheckpointNotFoundError, CheckpointError: missing or unreadable.
        """
        ...

    def fetch(self, ref: CheckpointRef, shape: ModelShape, *, skip: SkipFn) -> Fetched:
        """Fingerprint a checkpoint and, unless ``skip(sha256)``, read its attention tensors.

        Raises:
            CheckpointNotFoundError: the checkpoint or its weights are missing.
            CheckpointError: corrupt, truncated, or a different model.
            analysis.errors.HubUnreachableError: the network failed on every retry.
        """
        ...

    def run_info(self) -> dict[str, Any] | None:
        """Training metadata stored beside the checkpoints (``run.json``), if any."""
        ...


def check_shape(config: dict[str, Any], shape: ModelShape) -> None:
    """Refuse a checkpoint whose config describes another model than the run's.

    Raises:
        CheckpointError: the geometry differs.
        UnknownArchitectureError: the model type has no adapter.
    """
    this = model_shape(config)
    if this != shape:
        raise CheckpointError(f"config.json describes {this.as_meta()}, but the run's model is {shape.as_meta()}")


def open_source(
    spec: str | Path,
    *,
    scratch: Path,
    fetch: FetchSettings,
    meter: Meter,
    token: str | bool | None = None,
) -> CheckpointSource:
    """A local folder if ``spec`` is a directory, else a Hub model repo id.

    Args:
        spec: ``--source``.
        scratch: a folder for temporary downloads (``pytorch_model.bin`` files).
        fetch: Hub fetch settings.
        meter: counts bytes fetched and scratch disk in use.
        token: Hub token (None: the logged-in user's, if any).

    Raises:
        CheckpointNotFoundError: neither an existing directory nor a valid repo id.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from precompute.checkpoints import LocalSource

    path = Path(spec)
    if path.is_dir():
        return LocalSource(path)
    try:
        validate_repo_id(str(spec))
    except HFValidationError:
        raise CheckpointNotFoundError(
            f"--source {str(spec)!r} is not a directory, nor a Hub model id like EleutherAI/pythia-70m"
        ) from None
    from precompute.hub import HubSource

    return HubSource(str(spec), scratch=scratch, fetch=fetch, meter=meter, token=token)
