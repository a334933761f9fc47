"""Read only the attention tensors of a checkpoint, never the whole model.

safetensors files are opened lazily (``safe_open``) and only the named tensors
are read. ``pytorch_model.bin`` files are opened with
``torch.load(weights_only=True, mmap=True)``: no code from the file is
executed and tensors we do not touch are never paged in.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from headwatch.analysis.errors import CheckpointError


def tensor_names(files: Iterable[Path]) -> dict[str, Path]:
    """Every tensor name in the checkpoint and the file holding it (headers only for safetensors).

    Raises:
        CheckpointError: a file is truncated or corrupt.
    """
    where: dict[str, Path] = {}
    for path in files:
        for name in _open(path).keys():  # noqa: SIM118 (safe_open has keys() but is not iterable)
            where[name] = path
    return where


def read_tensors(where: dict[str, Path], names: Iterable[str]) -> dict[str, torch.Tensor]:
    """The named tensors, each read from its file.

    Raises:
        CheckpointError: a file is truncated or corrupt, or a tensor cannot be read.
    """
    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(where[name], []).append(name)
    out: dict[str, torch.Tensor] = {}
    for path, wanted in by_file.items():
        handle = _open(path)
        for name in wanted:
            try:
                out[name] = handle.get_tensor(name)
            except (SafetensorError, RuntimeError, OSError, ValueError) as exc:
                raise CheckpointError(f"{str(path)!r}: cannot read tensor {name!r} ({exc}); the file may be truncated") from exc
    return out


class _BinFile:
    """A ``pytorch_model.bin`` opened with mmap, with safe_open's ``keys``/``get_tensor``."""

    def __init__(self, state: dict[str, torch.Tensor]):
        self._state = state

    def keys(self) -> list[str]:
        return list(self._state)

    def get_tensor(self, name: str) -> torch.Tensor:
        return self._state[name]


def _open(path: Path):
    if path.suffix == ".safetensors":
        try:
            return safe_open(str(path), framework="pt")
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"{str(path)!r} is truncated or not a safetensors file ({exc})") from exc
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on bad files
        raise CheckpointError(f"{str(path)!r} is truncated or not a torch checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict):
        raise CheckpointError(f"{str(path)!r} holds a {type(state).__name__}, not a state dict of tensors")
    return _BinFile(state)
