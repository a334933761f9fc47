"""Find checkpoints in a local folder and fingerprint their weight files.

A source folder holds one sub-folder per checkpoint in transformers'
``save_pretrained`` format, named ``step<N>`` (Pythia's branch names) or
``checkpoint-<N>`` (transformers Trainer). Each checkpoint's weight files are
``model.safetensors`` / ``pytorch_model.bin`` or their sharded forms with an
``*.index.json``; when both formats are present, safetensors wins.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from analysis.errors import CheckpointError, CheckpointNotFoundError

CHECKPOINT_DIR = re.compile(r"^(?:step(\d+)|checkpoint-(\d+))$")

SAFETENSORS_SINGLE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_SINGLE = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"

_HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class LocalCheckpoint:
    """One checkpoint folder: its training step, its name (the revision) and path."""

    step: int
    revision: str
    path: Path


def find_checkpoints(source: str | Path) -> tuple[list[LocalCheckpoint], list[str]]:
    """Checkpoint folders under ``source``, sorted by step, and the names that were ignored.

    Raises:
        CheckpointNotFoundError: ``source`` is not a directory, or has no checkpoint folders.
        CheckpointError: two folders name the same step.
    """
    source = Path(source)
    if not source.is_dir():
        raise CheckpointNotFoundError(f"--source {str(source)!r} is not a directory")
    found: dict[int, LocalCheckpoint] = {}
    ignored = []
    for child in sorted(source.iterdir()):
        m = CHECKPOINT_DIR.match(child.name)
        if not child.is_dir() or not m:
            if child.is_dir():
                ignored.append(child.name)
            continue
        step = int(m.group(1) or m.group(2))
        if step in found:
            raise CheckpointError(f"{found[step].revision!r} and {child.name!r} in {str(source)!r} both name step {step}")
        found[step] = LocalCheckpoint(step, child.name, child)
    if not found:
        raise CheckpointNotFoundError(
            f"no checkpoint folders in {str(source)!r}: expected sub-folders named step<N> or checkpoint-<N> "
            f"holding save_pretrained output (found: {ignored[:5] or 'nothing'})"
        )
    return [found[s] for s in sorted(found)], ignored


def weight_files(folder: Path) -> list[Path]:
    """The weight files of one checkpoint folder, in a stable order.

    Raises:
        CheckpointNotFoundError: no weight files, or an index names a missing shard.
        CheckpointError: an index file is unreadable.
    """
    for single, index in ((SAFETENSORS_SINGLE, SAFETENSORS_INDEX), (BIN_SINGLE, BIN_INDEX)):
        if (folder / index).is_file():
            try:
                weight_map = json.loads((folder / index).read_text())["weight_map"]
            except (OSError, ValueError, KeyError) as exc:
                raise CheckpointError(f"{str(folder / index)!r} is not a valid shard index: {exc}") from exc
            shards = sorted({folder / name for name in weight_map.values()})
            missing = [p.name for p in shards if not p.is_file()]
            if missing:
                raise CheckpointNotFoundError(f"{str(folder)!r}: shard index names missing files {missing}")
            return shards
        if (folder / single).is_file():
            return [folder / single]
    raise CheckpointNotFoundError(
        f"{str(folder)!r} holds no weights: expected {SAFETENSORS_SINGLE}, {BIN_SINGLE} or a sharded index"
    )


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes (the same digest the Hub reports for LFS files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def weights_fingerprint(files: dict[str, str]) -> str:
    """One sha256 for a checkpoint: the file's own digest when unsharded, else a digest of
    the sorted ``name sha256`` lines, so identical weights give identical fingerprints."""
    if len(files) == 1:
        return next(iter(files.values()))
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def read_config(folder: Path) -> dict:
    """A checkpoint's ``config.json``.

    Raises:
        CheckpointNotFoundError: the file is missing.
        CheckpointError: it is not valid JSON.
    """
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointNotFoundError(f"{str(folder)!r} has no config.json (save_pretrained writes one)")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is not valid JSON: {exc}") from exc
