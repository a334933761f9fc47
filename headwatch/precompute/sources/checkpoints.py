"""Checkpoint folders in transformers' ``save_pretrained`` format: find them, choose their
weight files, fingerprint them, read them.

A source folder holds one sub-folder per checkpoint, named like a Hub branch:
``step<N>`` (Pythia), ``checkpoint-<N>`` (transformers Trainer), ``step<N>-tokens<M>``
(OLMo) or ``ckpt_<N>`` (LLM360); see `precompute.sources.revisions`. Each checkpoint's weight
files are ``model.safetensors`` / ``pytorch_model.bin`` or their sharded forms with an
``*.index.json``; when both formats are present, safetensors wins.

Shared by every source: `precompute.sources.local` reads such folders, `precompute.sources.hubcache`
reads Hub cache snapshots (laid out the same way), and `precompute.sources.hub` chooses weight
files and fingerprints them the same way from a repo's file list. This module imports
none of them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from headwatch.analysis.errors import CheckpointError, CheckpointNotFoundError
from headwatch.families.blocks import block_tensor_names
from headwatch.families.extract import attention_tensor_names
from headwatch.families.family import ModelShape
from headwatch.precompute.sources.revisions import CheckpointRef, refs_from_names
from headwatch.precompute.sources.source import Fetched, SkipFn, check_shape
from headwatch.precompute.sources.weights import read_tensors, tensor_names

SAFETENSORS_SINGLE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_SINGLE = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"

_HASH_CHUNK = 8 << 20


def tensors_to_read(
    shape: ModelShape, names: Iterable[str], *, matrices: tuple[str, ...] = ("qk",), layers: bool = False
) -> list[str]:
    """The tensors a run reads: the attention tensors the per-head ``matrices`` need, and with
    ``layers`` every 2-D weight of every block too (`families.blocks.block_tensor_names`), each
    named once.

    Raises:
        CheckpointError: a layer lacks one of them.
    """
    names = list(names)
    wanted = attention_tensor_names(shape, names, matrices=matrices)
    if layers:
        wanted += block_tensor_names(shape, names).values()
    return list(dict.fromkeys(wanted))


def read_folder(
    folder: Path,
    ref: CheckpointRef,
    shape: ModelShape,
    *,
    skip: SkipFn,
    commit: str | None = None,
    matrices: tuple[str, ...] = ("qk",),
    layers: bool = False,
) -> Fetched:
    """Hash one checkpoint folder's weight files and, unless ``skip(sha256)``, read its
    config and the attention tensors of ``matrices`` (with ``layers``, every block weight too).

    Raises:
        CheckpointNotFoundError: no weights or no config.json.
        CheckpointError: corrupt files, or a config describing another model.
    """
    files = weight_files(folder)
    digests = {f.name: file_sha256(f) for f in files}
    sha = weights_fingerprint(digests)
    fetched = Fetched(ref, sha, "file", digests, commit=commit)
    if skip(sha):
        return fetched
    fetched.config = read_config(folder)
    check_shape(fetched.config, shape)
    where = tensor_names(files)
    fetched.tensors = read_tensors(where, tensors_to_read(shape, where, matrices=matrices, layers=layers))
    return fetched


def find_checkpoints(source: str | Path) -> tuple[list[CheckpointRef], list[str]]:
    """Checkpoint folders under ``source``, sorted by step, and the names that were ignored.

    Raises:
        CheckpointNotFoundError: ``source`` is not a directory, or has no checkpoint folders.
        CheckpointError: two folders name the same step.
    """
    source = Path(source)
    if not source.is_dir():
        raise CheckpointNotFoundError(f"--source {str(source)!r} is not a directory")
    folders = [child.name for child in source.iterdir() if child.is_dir()]
    refs, ignored = refs_from_names(folders, where=repr(str(source)))
    if not refs:
        raise CheckpointNotFoundError(
            f"no checkpoint folders in {str(source)!r}: expected sub-folders named step<N> or checkpoint-<N> "
            f"holding save_pretrained output (found: {ignored[:5] or 'nothing'})"
        )
    return refs, ignored


def select_weight_files(names: Iterable[str], read_index: Callable[[str], dict], *, where: str) -> list[str]:
    """Which of a checkpoint's files hold its weights, in a stable order.

    Args:
        names: every file of the checkpoint.
        read_index: reads a shard index (``*.index.json``) by file name.
        where: the checkpoint, for error messages.

    Raises:
        CheckpointNotFoundError: no weight files, or an index names a missing shard.
        CheckpointError: an index file is unreadable.
    """
    names = set(names)
    for single, index in ((SAFETENSORS_SINGLE, SAFETENSORS_INDEX), (BIN_SINGLE, BIN_INDEX)):
        if index in names:
            try:
                weight_map = read_index(index)["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise CheckpointError(f"{where}: {index} is not a valid shard index: {exc}") from exc
            missing = [s for s in shards if s not in names]
            if missing:
                raise CheckpointNotFoundError(f"{where}: shard index names missing files {missing}")
            return shards
        if single in names:
            return [single]
    raise CheckpointNotFoundError(f"{where} holds no weights: expected {SAFETENSORS_SINGLE}, {BIN_SINGLE} or a sharded index")


def weight_files(folder: Path) -> list[Path]:
    """The weight files of one checkpoint folder, in a stable order (see `select_weight_files`)."""
    names = [f for f in os.listdir(folder) if (folder / f).is_file()]
    chosen = select_weight_files(names, lambda n: json.loads((folder / n).read_text()), where=repr(str(folder)))
    return [folder / n for n in chosen]


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


TRAINER_ARGS = "training_args.bin"  # transformers.Trainer writes it right after the weights of a checkpoint
TRAINER_STATE = "trainer_state.json"  # ... and this one last, after the optimizer, scheduler and RNG states


def incomplete_reason(folder: Path) -> str | None:
    """Why a checkpoint folder may still be being written, or None when what a run reads is complete.

    A run reads ``config.json`` and the weight files, so those are what is checked, from the files
    alone (no timing):

    - ``config.json`` parses (``save_pretrained`` writes it first);
    - the weight files are chosen (`select_weight_files`: a shard index, written after its shards,
      names only shards that exist);
    - every safetensors file is as long as its header says (8 bytes of header length, the header,
      then the data up to the largest end offset it lists: a file still being written is shorter);
      every ``.bin`` file is a zip archive whose central directory, written last by ``torch.save``,
      is present;
    - a transformers ``Trainer`` checkpoint (one holding ``training_args.bin``) has its
      ``trainer_state.json``, which the Trainer writes last.

    Folders renamed into place once written (``headwatch train`` saves ``.step<N>.partial`` and renames
    it ``step<N>``) pass at once.

    Args:
        folder: one checkpoint folder.

    Returns:
        None, or a short reason (``'model.safetensors' has 1024 of 4096 bytes``).
    """
    try:
        read_config(folder)
        files = weight_files(folder)
    except (CheckpointError, CheckpointNotFoundError, OSError) as exc:
        return str(exc)
    for path in files:
        reason = _file_incomplete(path)
        if reason is not None:
            return reason
    if (folder / TRAINER_ARGS).is_file() and not (folder / TRAINER_STATE).is_file():
        return f"a Trainer checkpoint without its {TRAINER_STATE} (written last)"
    return None


def _file_incomplete(path: Path) -> str | None:
    """Why one weight file is not yet whole (see `incomplete_reason`), or None."""
    import zipfile

    try:
        size = path.stat().st_size
        if path.suffix == ".safetensors":
            with open(path, "rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    return f"{path.name!r} has no header yet"
                n = int.from_bytes(head, "little")
                header = f.read(n)
            if len(header) < n:
                return f"{path.name!r} has {size} bytes, less than its header"
            entries = json.loads(header)
            end = max((e["data_offsets"][1] for k, e in entries.items() if k != "__metadata__"), default=0)
            expected = 8 + n + end
            if size < expected:
                return f"{path.name!r} has {size} of {expected} bytes"
            return None
        if not zipfile.is_zipfile(path):
            return f"{path.name!r} has no zip central directory yet ({size} bytes)"
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return f"{path.name!r} cannot be read yet ({exc})"
    return None
