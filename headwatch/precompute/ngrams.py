"""The training text whose frequent n-grams decide multigram heads (`analysis.attention.function_types`).

`ngram_text` picks it once per store:

- ``--types-ngram-text FILE`` (UTF-8): tokenized with the checkpoints' tokenizer as ``--eval-text`` is (for a run
  trained here without tokenizer files, or a store whose forward lens ran on byte tokens, bytes);
- otherwise, for a run trained here, its training split (`training.corpus`: the first ``1 - val_fraction`` of every
  work, the text the evaluation text's held-out split was cut from), rebuilt from the corpus archive ``run.json``
  names as the evaluation text is (`precompute.evalset.corpus_split`). The repeated random spans the induction
  recipe inserts into training batches are not in it: they are random, and no n-gram of them is frequent;
- otherwise none, and no head is typed multigram or other.

A sample of it (`sample_windows`: seeded non-overlapping windows) is tokenized, each token decoded alone as the ablation
lens decodes the tokens in context (`token_text`), and interned (`analysis.attention.function_types.intern`): tokens
are compared by their text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from headwatch.analysis.attention.function_types import SAMPLE_SEED, SAMPLE_TOKENS, SAMPLE_WINDOW, intern
from headwatch.precompute.evalset import BYTE_TOKENIZER, EvalTextError, corpus_split, read_utf8


class NgramTextError(ValueError):
    """The n-gram text cannot be had: one line saying what to do."""


def token_text(token_id: int) -> str:
    """A byte token decoded alone as the ablation lens writes the tokens in context: its UTF-8 character where it is
    one, else an escape (``\\xe2``), so every byte has its own text."""
    return bytes([token_id]).decode("utf-8", errors="backslashreplace")


@dataclass(frozen=True)
class NgramText:
    """A sample of the training text as interned token texts.

    Attributes:
        segments: the sample's windows, each ``(n,)`` int64 codes.
        index: token text -> code.
        record: what ``meta.json`` ``types`` records of it (the text, its sha256, the tokenizer, the sample).
    """

    segments: list[np.ndarray]
    index: dict[str, int] = field(repr=False)
    record: dict[str, Any]


def sample_windows(
    ids: np.ndarray, *, tokens: int = SAMPLE_TOKENS, window: int = SAMPLE_WINDOW, seed: int = SAMPLE_SEED
) -> list[np.ndarray]:
    """The whole text when it has at most ``tokens`` tokens; otherwise ``tokens // window`` of its non-overlapping
    windows of ``window`` tokens, drawn with a seeded generator, in text order."""
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) <= tokens:
        return [ids]
    windows = len(ids) // window
    picked = np.sort(np.random.default_rng(seed).choice(windows, size=min(windows, tokens // window), replace=False))
    return [ids[w * window : (w + 1) * window] for w in picked]


def interned(segments: list[np.ndarray], decode: Callable[[int], str]) -> tuple[list[np.ndarray], dict[str, int]]:
    """Token ids as codes of their decoded texts (each distinct id decoded once)."""
    index: dict[str, int] = {}
    distinct = np.unique(np.concatenate(segments)) if segments else np.zeros(0, dtype=np.int64)
    codes = intern([decode(int(i)) for i in distinct], index)
    lut = dict(zip(distinct.tolist(), codes.tolist(), strict=True))
    return [np.array([lut[int(i)] for i in s], dtype=np.int64) for s in segments], index


def _tokenizer(location: str, kwargs: dict[str, Any]) -> tuple[Callable[[str], np.ndarray], Callable[[int], str]] | None:
    """The checkpoints' tokenizer as (encode, decode one id), or None when none loads."""
    from transformers import AutoTokenizer  # the job's heavy dependency, imported only here

    try:
        tok = AutoTokenizer.from_pretrained(location, **kwargs)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(tok) < 8:
        return None
    return (
        lambda text: np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64),
        lambda i: str(tok.decode([i])),
    )


def ngram_text(
    *,
    text_file: str | Path | None,
    run_info: dict[str, Any] | None,
    run_folder: Path | None,
    tokenizer_at: tuple[str, dict[str, Any]] | None,
    byte_tokens: bool,
) -> NgramText | None:
    """The store's n-gram text (see the module docstring), or None when there is none to have.

    Args:
        text_file: ``--types-ngram-text``.
        run_info: the source's ``run.json`` (None: not trained here or not known).
        run_folder: the local run folder (where its corpus archive is looked for).
        tokenizer_at: where the checkpoints' tokenizer is and how to load it (None: byte tokens).
        byte_tokens: the store's forward lens ran on byte tokens (``meta.json`` ``forward`` tokenizer).

    Raises:
        NgramTextError: an unreadable or non-UTF-8 file, no usable tokenizer, or a run's corpus that cannot be had.
    """
    if text_file is not None:
        path = Path(text_file)
        data, text = read_utf8(path, "--types-ngram-text", NgramTextError)
        name = path.name
    elif run_info is not None and "corpus" in run_info and run_folder is not None:
        try:
            data, name = corpus_split(run_info, run_folder, split="train")
        except EvalTextError as exc:
            raise NgramTextError(str(exc).replace("--eval-text", "--types-ngram-text")) from exc
        text = ""
    else:
        return None
    decode: Callable[[int], str] = token_text
    if byte_tokens or tokenizer_at is None:
        ids, tokenizer = np.frombuffer(data, dtype=np.uint8).astype(np.int64), BYTE_TOKENIZER
    else:
        loaded = _tokenizer(*tokenizer_at)
        if loaded is None:
            raise NgramTextError(
                f"no usable tokenizer at {tokenizer_at[0]!r} for the n-gram text; save the model's tokenizer beside "
                "its config (tokenizer.save_pretrained)"
            )
        encode, decode = loaded
        ids, tokenizer = encode(text or data.decode("utf-8", errors="replace")), tokenizer_at[0]
    if len(ids) < 4:
        raise NgramTextError(f"the n-gram text {name!r} has {len(ids)} tokens; it needs at least 4")
    windows = sample_windows(ids)
    segments, index = interned(windows, decode)
    record = {
        "text": name,
        "text_sha256": hashlib.sha256(data).hexdigest(),
        "tokenizer": tokenizer,
        "text_tokens": len(ids),
        "sample_tokens": int(sum(len(w) for w in windows)),
        "sample": f"{len(windows)} seeded non-overlapping windows of {SAMPLE_WINDOW} tokens (seed {SAMPLE_SEED}), "
        f"at most {SAMPLE_TOKENS:,} tokens; the whole text when shorter",
    }
    return NgramText(segments, index, record)
