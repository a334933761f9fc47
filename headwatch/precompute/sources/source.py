"""Where checkpoints come from: the interface the precompute run sees, and its records.

Three implementations, each in its own module; `precompute.sources.resolve.open_source`
chooses one from ``--source``:

- `precompute.sources.local.LocalSource`: a folder of ``step<N>/`` (or ``checkpoint-<N>/``, ...)
  sub-folders in transformers' ``save_pretrained`` format;
- `precompute.sources.hub.HubSource`: a Hugging Face Hub model repo whose branches are the
  checkpoints; only the Q/K bytes are fetched;
- `precompute.sources.hubcache.HubCacheSource`: the same repo read from the local Hub cache
  (``HF_HUB_OFFLINE=1``).

The run (`precompute.job.run`) sees only `CheckpointSource`, `Fetched` and
`fingerprints_comparable`; it never asks which implementation it holds. This module
imports none of them.
"""

from __future__ import annotations

import builtins  # the sources have a `list` method, which hides the builtin in their class bodies
import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch

from headwatch.analysis.errors import CheckpointError
from headwatch.families.family import ModelShape
from headwatch.families.registry import model_shape
from headwatch.precompute.settings import FetchSettings
from headwatch.precompute.sources.revisions import CheckpointRef

# How a checkpoint's sha256 was obtained (meta.json ``sha256_source``):
#   file: hashed every weight file here (local folders, the Hub cache);
#   hub:  the Hub's LFS metadata, without downloading (the same digest as `file`);
#   read: the attention tensors as read (the Hub reported no LFS digest); equal only
#         to other `read` fingerprints.
Sha256Source = Literal["file", "hub", "read"]

# What meta.json records as ``settings.source_kind``: a local folder, or a Hub repo
# (read online or from the Hub cache).
SourceKind = Literal["local", "hub"]


def fingerprints_comparable(a: str | None, b: str | None) -> bool:
    """Whether two fingerprints obtained as ``a`` and ``b`` (`Sha256Source` values, None
    for a store entry that predates them) are digests of the same thing, so that unequal
    digests mean different weights: `file` and `hub` are both the weight files' digest;
    `read` compares only with `read`."""
    return a == b or {a, b} <= {"file", "hub"}


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


class CheckpointSource(ABC):
    """A suite of checkpoints: what the precompute run asks of one.

    `list`, `config` and `fetch` are each self-sufficient: none relies on another
    having been called first. `fetch` may run in a background thread while the run's
    thread calls the others.

    Attributes:
        kind: recorded in meta.json as ``settings.source_kind``; data, not a switch.
        name: the source as this process opens it (a resolved path, or a repo id); see
            `recorded_name` for what the store records.
        model_id: the default model name in meta.json.
        stop: set to abandon reads in flight (they raise `precompute.sources.fetch.Cancelled`);
            the run sets it when it stops prefetching and clears it before reads it
            still wants. Sources whose reads cannot be abandoned never look at it.
        fetch_settings: the network settings its reads depend on, recorded in
            meta.json; None for a source that reads no network.
    """

    kind: ClassVar[SourceKind]
    fetch_settings: FetchSettings | None = None

    def __init__(self, *, name: str, model_id: str):
        self.name = name
        self.model_id = model_id
        self.stop = threading.Event()

    @property
    def recorded_name(self) -> str:
        """What meta.json records as ``settings.source``: what the user gave, never a path
        of this machine (a Hub id as given; a local source overrides this)."""
        return self.name

    @abstractmethod
    def list(self) -> tuple[list[CheckpointRef], list[str]] | None:
        """Every checkpoint in step order and the names ignored, or None where the source
        cannot be listed (the Hub cache offline: ``--revisions`` names them).

        Raises:
            CheckpointNotFoundError: the source does not exist.
            CheckpointError: two names denote one step.
        """

    @abstractmethod
    def config(self, ref: CheckpointRef) -> dict[str, Any]:
        """A checkpoint's ``config.json``.

        Raises:
            CheckpointNotFoundError, CheckpointError: missing or unreadable.
        """

    @abstractmethod
    def fetch(
        self, ref: CheckpointRef, shape: ModelShape, *, skip: SkipFn, matrices: tuple[str, ...] = ("qk",), layers: bool = False
    ) -> Fetched:
        """Fingerprint a checkpoint and, unless ``skip(sha256)``, read the attention tensors that the
        per-head ``matrices`` need (`families.extract.attention_tensor_names`; for ``ov`` the value
        weights and the output projection as well), and no others; with ``layers``, every 2-D weight
        of every block too, whole (`precompute.sources.checkpoints.tensors_to_read`).

        Raises:
            CheckpointNotFoundError: the checkpoint or its weights are missing.
            CheckpointError: corrupt, truncated, or a different model.
            analysis.errors.HubUnreachableError: the network failed on every retry.
        """

    def run_info(self) -> dict[str, Any] | None:
        """Training metadata stored beside the checkpoints (``run.json``), if any."""
        return None

    def default_tokens_per_step(self) -> int | None:
        """Tokens per optimizer step when the suite's schedule is known (Pythia: 2,097,152),
        else None."""
        return None

    def check_schedule(self, available: builtins.list[CheckpointRef]) -> None:  # noqa: B027 (an optional hook: the default checks nothing)
        """Log where `list`'s checkpoints depart from the suite's known schedule (Pythia's
        154 steps: a branch missing is a warning); nothing for suites without one."""

    @contextlib.contextmanager
    def checkpoint_folder(self, ref: CheckpointRef) -> Iterator[Path]:
        """The whole checkpoint as a ``save_pretrained`` folder, for the forward-pass lens, held
        only inside the ``with`` block (a download is deleted when it ends).

        Raises:
            CheckpointNotFoundError, CheckpointError: as `fetch`.
        """
        raise CheckpointError(f"{self.name}: this source cannot provide whole checkpoints for the forward lens")
        yield Path()  # pragma: no cover

    def tokenizer_location(self, ref: CheckpointRef) -> tuple[str, dict[str, Any]]:
        """Where the checkpoints' tokenizer is (a folder or a repo id) and the keyword arguments
        ``AutoTokenizer.from_pretrained`` needs to load it from there."""
        return self.name, {}

    def progress_note(self, ref: CheckpointRef) -> str:
        """The progress bar's note after ``ref`` is done: its name, and what the source
        has transferred so far if it transfers anything."""
        return ref.revision


def check_shape(config: dict[str, Any], shape: ModelShape) -> None:
    """Refuse a checkpoint whose config describes another model than the run's.

    Raises:
        CheckpointError: the geometry differs.
        UnknownArchitectureError: the model type has no adapter.
    """
    this = model_shape(config)
    if this != shape:
        raise CheckpointError(f"config.json describes {this.as_meta()}, but the run's model is {shape.as_meta()}")
