"""The distributions the refined LLC's SGLD loss is taken on (``--llc-data``): each one's sequences, built once per run.

On the run's training distribution the refined LLC is the study's weight-refined LLC; on any other distribution it
is a data-refined LLC (Wang et al., section 4.2: an induction head's estimate rises on code, where repeats are
common). Each distribution gives ``--llc-sequences`` sequences of T tokens (``--eval-length``, the store's
evaluation length), stored under its name with their sha256, so one store holds estimates under several
distributions side by side (`analysis.store.lenses.llc`):

- ``train``: for a run trained here, its training batches rebuilt from ``run.json`` (`training.settings.
  settings_from_record`) through the training code's own batch stream (`training.train.training_batches`: the
  windows of its first updates, repeated spans included, from its own seed), each window's first T tokens (the
  model's input); for a model trained elsewhere its corpus is not at hand offline, so a sample of it must be
  passed as ``train=FILE``.
- ``text``: the store's evaluation sequences (`precompute.lenses.llc.sampler_sequences`), as every estimate before
  distributions were named.
- ``repeats``: the induction probe's sequences (R random ids, then the same R again; `precompute.evalset`).
- ``code``: Python's standard-library sources (the running interpreter's top-level ``*.py`` files in name order,
  until `CODE_BYTES` bytes), as bytes for a byte-level run and through the checkpoints' tokenizer otherwise;
  `WINDOW_SEED`'s draw of non-overlapping windows, as for the evaluation text. The files are recorded.
- a user's file: UTF-8 text (tokenized as ``--eval-text`` is), or a ``.npy`` array ``(N, T')`` of token ids, of
  which evenly spaced rows are taken, cut to T.

Anything that makes a distribution impossible is refused before anything is written (`LlcDataError`).
"""

from __future__ import annotations

import logging
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from headwatch.analysis.store.lenses.llc import LLC_DATA_BUILT_IN, LlcDataSpec, LlcOptions, SamplerSettings
from headwatch.precompute.evalset import (
    BYTE_TOKENIZER,
    WINDOW_SEED,
    EvalSet,
    EvalTextError,
    byte_ids,
    load_tokenizer,
    run_corpus,
    sha256_bytes,
)

log = logging.getLogger("precompute")

# How much of the standard library the code distribution reads: files in name order until this many bytes.
CODE_BYTES = 2 << 20


class LlcDataError(EvalTextError):
    """A distribution ``--llc-data`` names cannot be built; the message says what to do."""


@dataclass(frozen=True)
class LlcData:
    """One distribution's sequences.

    Attributes:
        name: its name in the store (the ``data`` column).
        tokens: ``(sequences, T)`` int64 token ids.
        record: meta.json ``llc.data[name]``: what they are and where they came from.
    """

    name: str
    tokens: np.ndarray
    record: dict[str, Any]

    @property
    def tokens_sha256(self) -> str:
        return tokens_sha256(self.tokens)


def tokens_sha256(tokens: np.ndarray) -> str:
    """sha256 of ``(sequences, T)`` token ids as little-endian int64, row after row (meta.json's ``tokens_sha256``)."""
    return sha256_bytes(np.ascontiguousarray(tokens, dtype="<i8").tobytes())


def evenly_spaced(tokens: np.ndarray, count: int, *, what: str) -> np.ndarray:
    """``count`` of the rows of ``tokens``, evenly spaced (`precompute.lenses.llc.sampler_sequences`'s choice).

    Raises:
        LlcDataError: fewer rows than ``count``.
    """
    n = len(tokens)
    if count > n:
        raise LlcDataError(f"{what} has {n} sequences, fewer than --llc-sequences {count}; lower --llc-sequences")
    return np.ascontiguousarray(tokens[np.arange(count) * n // count], dtype=np.int64)


def draw_windows(ids: np.ndarray, count: int, t: int, *, what: str, seed: int = WINDOW_SEED) -> np.ndarray:
    """``count`` of the non-overlapping windows of ``t`` tokens of ``ids``, drawn as `precompute.evalset.make_eval_set`
    draws the evaluation text's: ``(count, t)`` int64.

    Raises:
        LlcDataError: fewer than ``count`` windows.
    """
    windows = len(ids) // t
    if windows < count:
        raise LlcDataError(f"{what} has {len(ids):,} tokens, fewer than {count} windows of {t}; pass a longer one")
    starts = np.sort(np.random.default_rng(seed).choice(windows, size=count, replace=False)) * t
    return np.stack([np.asarray(ids[s : s + t], dtype=np.int64) for s in starts])


def training_sequences(run_info: dict[str, Any], run_folder: Path, count: int, t: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The first ``count`` windows the run trained on (`training.train.training_batches` from its run.json), each
    cut to its first ``t`` tokens, and their record.

    Raises:
        LlcDataError: run.json does not say how the run was trained, ``t`` exceeds its context, or its corpus is not at hand.
    """
    import torch

    from headwatch.training.settings import settings_from_record
    from headwatch.training.train import training_batches

    try:
        settings = settings_from_record(run_info.get("config") or {})
    except (TypeError, ValueError) as exc:
        raise LlcDataError(f"--llc-data train: {exc}; pass a sample of the training data as train=FILE") from None
    if t > settings.model.context:
        raise LlcDataError(f"--llc-data train: --eval-length {t} exceeds the run's context {settings.model.context}")
    corpus, _, name = run_corpus(run_info, run_folder)
    batches = training_batches(settings, torch.from_numpy(corpus.train))
    taken: list[torch.Tensor] = []
    while sum(len(b) for b in taken) < count:
        taken.append(next(batches))
    windows = torch.cat(taken)[:count, :t].numpy().astype(np.int64)  # (count, t): the model's input of each window
    r = settings.repeats
    return windows, {
        "description": f"the run's training batches ({name}; repeated spans: share {r.share}, {r.min_span} to "
        f"{r.max_span} tokens, {r.content}, {r.spans} per window), the first {count} windows of its first "
        f"{len(taken)} updates (seed {settings.seed}), their first {t} tokens",
        "source": "headwatch.training.train.training_batches from run.json",
        "updates": len(taken),
    }


def code_bytes(limit: int = CODE_BYTES) -> tuple[bytes, list[str], str]:
    """Python's standard-library sources: the top-level ``*.py`` files of the running interpreter's ``stdlib``
    folder in name order, until ``limit`` bytes, concatenated; with the file names and the folder.

    Raises:
        LlcDataError: the folder holds no sources (an interpreter shipped without them).
    """
    folder = Path(sysconfig.get_paths()["stdlib"])
    files, parts, size = [], [], 0
    for path in sorted(folder.glob("*.py")):
        if size >= limit:
            break
        data = path.read_bytes()
        files.append(path.name)
        parts.append(data)
        size += len(data)
    if not files:
        raise LlcDataError(f"--llc-data code: no *.py sources in {str(folder)!r}; pass a file of code instead (NAME=FILE)")
    return b"".join(parts), files, str(folder)


def file_sequences(
    path: Path, count: int, t: int, *, encode: Callable[[str], np.ndarray] | None, byte_level: bool, vocab_size: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """A user's file as ``(count, t)`` sequences: a ``.npy`` of token ids (evenly spaced rows, cut to ``t``) or UTF-8
    text (tokenized, or bytes for a byte-level run; windows drawn as for the evaluation text).

    Raises:
        LlcDataError: unreadable, not UTF-8, too short, or ids outside the vocabulary.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LlcDataError(f"--llc-data: cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    record: dict[str, Any] = {"file": path.name, "file_sha256": sha256_bytes(data)}
    if path.suffix == ".npy":
        ids = np.load(path, allow_pickle=False)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer) or ids.shape[1] < t:
            raise LlcDataError(
                f"--llc-data {str(path)!r}: expected an integer array (sequences, length >= {t}), got {ids.dtype} {ids.shape}"
            )
        tokens = evenly_spaced(ids[:, :t], count, what=f"--llc-data {str(path)!r}")
        record["description"] = f"token ids from {path.name}: {count} of its {len(ids)} rows, evenly spaced, first {t} tokens"
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LlcDataError(f"--llc-data {str(path)!r} is not UTF-8 ({exc.reason} at byte {exc.start}); convert it") from exc
        ids = byte_ids(data) if byte_level or encode is None else encode(text)
        tokens = draw_windows(ids, count, t, what=f"--llc-data {str(path)!r}")
        record["description"] = f"{path.name}: {count} windows of {t} tokens ({'bytes' if byte_level else 'tokenized'})"
    if tokens.min() < 0 or tokens.max() >= vocab_size:
        raise LlcDataError(
            f"--llc-data {str(path)!r}: token ids up to {int(tokens.max())}, outside the vocabulary of {vocab_size}"
        )
    return tokens, record


def trained_here(run_info: dict[str, Any] | None) -> bool:
    """Whether run.json says how the run was trained (so ``train`` can be rebuilt)."""
    config = (run_info or {}).get("config") or {}
    return (
        bool((run_info or {}).get("corpus")) and isinstance(config.get("model"), dict) and isinstance(config.get("optim"), dict)
    )


def resolve_llc_data(
    options: LlcOptions,
    *,
    eval_set: EvalSet,
    text_tokens: np.ndarray,
    run_info: dict[str, Any] | None,
    run_folder: Path | None,
    tokenizer_at: tuple[str, dict[str, Any]],
    vocab_size: int,
) -> tuple[LlcData, ...]:
    """The distributions ``--llc-data`` asks for, in its order (module docstring).

    Args:
        options: the lens's options (``data`` None: ``train`` where run.json says how the run was trained, else ``text``).
        eval_set: the store's evaluation sequences (their length T is every distribution's; the probe).
        text_tokens: the sampler's evaluation sequences (`precompute.lenses.llc.sampler_sequences`).
        run_info: the source's run.json (None: not trained here).
        run_folder: the local source folder (where the corpus cache is looked for).
        tokenizer_at: where the checkpoints' tokenizer is, for text and code of a model that is not byte-level.
        vocab_size: the model's vocabulary.

    Raises:
        LlcDataError: a distribution that cannot be built here, with what to pass instead.
    """
    sampler: SamplerSettings = options.sampler
    count, t = sampler.sequences, eval_set.info.seq_len
    byte_level = eval_set.info.tokenizer == BYTE_TOKENIZER
    specs = options.data_specs
    if options.data is None and not trained_here(run_info):
        log.info(
            "refined LLC: run.json does not say how this model was trained: on held-out text (--llc-data train=FILE adds its own)"
        )
        specs = (LlcDataSpec("text"),)
    encoder: list[Callable[[str], np.ndarray] | None] = []

    def encode() -> Callable[[str], np.ndarray] | None:
        if not encoder:
            encoder.append(None if byte_level else load_tokenizer(*tokenizer_at))
        return encoder[0]

    out = []
    for spec in specs:
        if spec.file is not None:
            tokens, record = file_sequences(
                Path(spec.file), count, t, encode=encode(), byte_level=byte_level, vocab_size=vocab_size
            )
            if spec.name == "train":
                record["description"] = "a sample of the training corpus the user passed: " + record["description"]
        elif spec.name == "train":
            if not trained_here(run_info) or run_folder is None:
                raise LlcDataError(
                    "--llc-data train: this model was not trained here and its training corpus is not reachable offline; "
                    "pass a sample of it as --llc-data train=FILE (UTF-8 text or a .npy of token ids), or choose text"
                )
            assert run_info is not None
            tokens, record = training_sequences(run_info, run_folder, count, t)
        elif spec.name == "text":
            tokens = np.ascontiguousarray(text_tokens, dtype=np.int64)
            record = {"description": f"held-out text: {eval_set.info.text}", "source": "the store's evaluation sequences"}
        elif spec.name == "repeats":
            tokens = evenly_spaced(eval_set.induction, count, what="the induction probe")
            record = {
                "description": f"the induction probe: {eval_set.info.induction_repeat} random ids (seed "
                f"{eval_set.info.induction_seed}), then the same again",
                "source": "the store's induction probe",
            }
        else:
            assert spec.name == "code", spec
            data, files, folder = code_bytes()
            fn = encode()
            if not byte_level and fn is None:
                raise LlcDataError(
                    f"--llc-data code: no usable tokenizer at {tokenizer_at[0]!r}; save the model's tokenizer beside its config"
                )
            ids = byte_ids(data) if byte_level or fn is None else fn(data.decode("utf-8", errors="replace"))
            tokens = draw_windows(ids, count, t, what="the standard library's sources")
            record = {
                "description": f"Python {sys.version_info.major}.{sys.version_info.minor}'s standard-library sources, "
                f"{len(files)} files ({files[0]} .. {files[-1]}), {'bytes' if byte_level else 'tokenized'}; {count} "
                f"windows of {t} tokens",
                "source": folder,
                "files": files,
                "bytes_sha256": sha256_bytes(data),
            }
        assert tokens.ndim == 2 and len(tokens) == count, (spec.name, tokens.shape)
        record = {
            "name": spec.name,
            "about": LLC_DATA_BUILT_IN.get(spec.name, "a user's file"),
            **record,
            "sequences": count,
            "seq_len": int(tokens.shape[1]),
            "tokens_sha256": tokens_sha256(tokens),
        }
        out.append(LlcData(spec.name, tokens, record))
    return tuple(out)
