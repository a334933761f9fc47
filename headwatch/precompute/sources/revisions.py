"""Checkpoint names -> training steps, checkpoint schedules, and which checkpoints a run takes.

A checkpoint is named like its Hub branch (local folders use the same names):

=========  ==========================  ====================================================
suite      name                        meaning
=========  ==========================  ====================================================
Pythia     ``step<N>``                 optimizer step N (EleutherAI/pythia-*)
OLMo       ``step<N>-tokens<M>[KMBT]`` step N, M tokens seen (allenai/OLMo-*; B = 10^9)
LLM360     ``ckpt_<N>``                checkpoint index N (LLM360/Amber, Crystal)
Trainer    ``checkpoint-<N>``          transformers Trainer's ``output_dir`` sub-folders
=========  ==========================  ====================================================

Other branch names (``main``, conversion branches) are ignored and listed in the log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from headwatch.analysis.errors import CheckpointError

# One Pythia optimizer step: 1024 sequences x 2048 tokens.
PYTHIA_TOKENS_PER_STEP = 2_097_152

# Pythia's 154 checkpoints. Step 0, then log-spaced steps 1, 2, 4, ..., 512 (doubling:
# dense where the weights move fastest), then linear, every 1000 steps from 1000 to
# 143000 (the final model, also on `main`).
PYTHIA_STEPS: tuple[int, ...] = (0, *(2**i for i in range(10)), *range(1000, 143_001, 1000))
assert len(PYTHIA_STEPS) == 154

_TOKEN_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}

# name pattern -> suite; group "step" is the step, group "tokens"/"unit" the tokens seen
NAME_PATTERNS: dict[str, re.Pattern[str]] = {
    "pythia": re.compile(r"^step(?P<step>\d+)$"),
    "olmo": re.compile(r"^step(?P<step>\d+)-tokens(?P<tokens>\d+)(?P<unit>[KMBT]?)$"),
    "llm360": re.compile(r"^ckpt_(?P<step>\d+)$"),
    "trainer": re.compile(r"^checkpoint-(?P<step>\d+)$"),
}
NAME_FORMS = "step<N>, step<N>-tokens<M>, ckpt_<N> or checkpoint-<N>"


@dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of a suite: its step, its name (Hub branch or folder) and, when the
    name says so, the tokens seen."""

    step: int
    revision: str
    tokens: int | None = None


def parse_name(name: str) -> CheckpointRef | None:
    """The checkpoint a branch or folder name denotes, or None when the name carries no step.

    >>> parse_name("step1000-tokens4B")
    CheckpointRef(step=1000, revision='step1000-tokens4B', tokens=4000000000)
    """
    for pattern in NAME_PATTERNS.values():
        m = pattern.match(name)
        if m:
            groups = m.groupdict()
            tokens = int(groups["tokens"]) * _TOKEN_UNITS[groups["unit"]] if groups.get("tokens") else None
            return CheckpointRef(int(groups["step"]), name, tokens)
    return None


def refs_from_names(names: Iterable[str], *, where: str) -> tuple[list[CheckpointRef], list[str]]:
    """Checkpoints among ``names``, sorted by step, and the names that carry no step.

    Raises:
        CheckpointError: two names denote the same step.
    """
    found: dict[int, CheckpointRef] = {}
    ignored = []
    for name in sorted(names):
        ref = parse_name(name)
        if ref is None:
            ignored.append(name)
            continue
        if ref.step in found:
            raise CheckpointError(
                f"{found[ref.step].revision!r} and {name!r} in {where} both name step {ref.step}; choose one with --revisions"
            )
        found[ref.step] = ref
    return [found[s] for s in sorted(found)], ignored


def parse_revisions(text: str) -> list[CheckpointRef]:
    """``--revisions step0,step1000`` as checkpoints, in step order.

    Raises:
        ValueError: empty, repeated, or a name that carries no step.
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--revisions {text!r} names no revision; give comma-separated names like step0,step1000")
    bad = [n for n in names if parse_name(n) is None]
    if bad:
        raise ValueError(f"--revisions: {', '.join(map(repr, bad))} carry no step; expected names like {NAME_FORMS}")
    refs, _ = refs_from_names(set(names), where="--revisions")
    if len(refs) != len(names):
        raise ValueError(f"--revisions {text!r} names a revision twice")
    return refs


def select(
    available: list[CheckpointRef] | None,
    *,
    revisions: list[CheckpointRef] | None = None,
    every: int | None = None,
) -> tuple[list[CheckpointRef], list[CheckpointRef]]:
    """The checkpoints a run takes, and the requested ones the source does not have.

    Args:
        available: every checkpoint of the source, or None where it cannot be listed
            (the Hub in offline mode): then the requested revisions are taken as given
            and a missing one shows up when it is fetched.
        revisions: ``--revisions``; None takes every available checkpoint.
        every: ``--every N``: keep steps that are multiples of N (step 0 included).

    Returns:
        ``(todo, missing)``, both in step order.

    Raises:
        ValueError: ``every`` is not positive, or nothing can be listed and no revisions were given.
    """
    if every is not None and every < 1:
        raise ValueError(f"--every {every}: expected a positive number of steps")
    missing: list[CheckpointRef]
    if revisions is None:
        if available is None:
            raise ValueError("the checkpoints of this source cannot be listed; pass --revisions")
        todo, missing = list(available), []
    elif available is None:
        todo, missing = list(revisions), []
    else:
        have = {r.revision for r in available}
        todo = [r for r in available if r.revision in {q.revision for q in revisions}]
        missing = [r for r in revisions if r.revision not in have]
    if every is not None:
        todo = [r for r in todo if r.step % every == 0]
        missing = [r for r in missing if r.step % every == 0]
    return todo, missing


def is_pythia(repo_id: str) -> bool:
    """Whether a Hub repo is one of EleutherAI's Pythia suites (known schedule and tokens per step)."""
    return repo_id.lower().startswith("eleutherai/pythia-")


def known_tokens_per_step(repo_id: str) -> int | None:
    """Tokens per optimizer step of a Hub suite that is known to have a fixed one (Pythia), else None."""
    return PYTHIA_TOKENS_PER_STEP if is_pythia(repo_id) else None


def schedule_gaps(available: list[CheckpointRef], schedule: tuple[int, ...] = PYTHIA_STEPS) -> tuple[list[int], list[int]]:
    """Steps of ``schedule`` with no checkpoint, and checkpoints whose step is not in it."""
    steps = {r.step for r in available}
    return sorted(set(schedule) - steps), sorted(steps - set(schedule))
