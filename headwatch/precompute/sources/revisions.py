"""Checkpoint names -> training steps, checkpoint schedules, and which checkpoints a run takes.

A checkpoint is named like its Hub branch (local folders use the same names):

=========  ================================================  ==========================================================
suite      name                                              meaning
=========  ================================================  ==========================================================
Pythia     ``step<N>``                                       optimizer step N (EleutherAI/pythia-*)
OLMo       ``step<N>-tokens<M>[KMBT]``                       step N, M tokens seen (allenai/OLMo-*, the early OLMo 2
                                                             branches, swiss-ai/Apertus-*; B = 10^9)
OLMo 2/3   ``stage<K>-step<N>[-tokens<M>[KMBT]]``            step N of training stage K (and M tokens seen in that
                                                             stage): OLMo 2's ``stage1-step140000-tokens294B``, OLMo
                                                             3's ``stage1-step1000``, ``stage3-step9000``
OLMo 2/3   ``stage<K>-ingredient<I>-step<N>[-tokens<M>B]``   step N of ingredient (data mix and seed) I of stage K,
                                                             M tokens seen in it (``stage2-ingredient1-step11931-tokens50B``)
SmolLM3    ``stage<K>-step-<N>``                             step N, counted across the stages (HuggingFaceTB/SmolLM3-
                                                             3B-checkpoints: ``stage1-step-3440000`` ..
                                                             ``stage3-step-4720000``): one run
LLM360     ``ckpt_<N>``                                      checkpoint index N (LLM360/Amber, Crystal)
Trainer    ``checkpoint-<N>``                                transformers Trainer's ``output_dir`` sub-folders
=========  ================================================  ==========================================================

Other branch names (``main``, conversion branches) are ignored and listed in the log.

**Training runs.** The names of one source can belong to several training runs whose steps restart and collide: OLMo
2's stage 1 (pretraining; its early, unprefixed ``step<N>-tokens<M>B`` branches included) and each stage-2
ingredient, a separate annealing run from the end of stage 1, counting its steps and tokens from 0; OLMo 3's
stages 1, 2 and 3 (and the 32B's stage-2 ingredients) likewise. A store holds
one run (its checkpoints are keyed by step), so a run reads one: by default the first (`CheckpointRef.run_order`:
the unprefixed and stage-1 names, else the lowest stage and ingredient), and with ``--revisions`` the run those
names belong to (one run only). The log and ``headwatch plan`` say which run is read and which others the source
has (`runs_note`).
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
    "olmo-stage": re.compile(
        r"^stage(?P<stage>\d+)-(?:ingredient(?P<ingredient>\d+)-)?step(?P<step>\d+)"
        r"(?:-tokens(?P<tokens>\d+)(?P<unit>[KMBT]?))?$"
    ),
    # SmolLM3's stages count one step across them (stage1-step-3440000, stage2-step-4200000, ...): one run
    "smollm3-stage": re.compile(r"^stage\d+-step-(?P<step>\d+)$"),
    "llm360": re.compile(r"^ckpt_(?P<step>\d+)$"),
    "trainer": re.compile(r"^checkpoint-(?P<step>\d+)$"),
}
NAME_FORMS = (
    "step<N>, step<N>-tokens<M>, stage<K>-step<N>[-tokens<M>], stage<K>-ingredient<I>-step<N>[-tokens<M>], "
    "stage<K>-step-<N>, ckpt_<N> or checkpoint-<N>"
)


@dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of a suite: its step, its name (Hub branch or folder) and, when the
    name says so, the tokens seen and the training stage and ingredient (OLMo 2/3) it belongs to."""

    step: int
    revision: str
    tokens: int | None = None
    stage: int | None = None
    ingredient: int | None = None

    @property
    def run(self) -> str:
        """The training run the checkpoint belongs to: ``""`` for a name without a stage, else ``stage<K>`` or
        ``stage<K>-ingredient<I>``."""
        if self.stage is None:
            return ""
        return f"stage{self.stage}" + (f"-ingredient{self.ingredient}" if self.ingredient is not None else "")

    @property
    def run_order(self) -> tuple[int, int]:
        """Where the run comes among a source's runs: unprefixed and stage-1 names first (one run: OLMo 2's early
        branches lack the stage prefix), then by stage and ingredient."""
        return (self.stage or 1, -1 if self.ingredient is None else self.ingredient)


def parse_name(name: str) -> CheckpointRef | None:
    """The checkpoint a branch or folder name denotes, or None when the name carries no step.

    >>> parse_name("step1000-tokens4B")
    CheckpointRef(step=1000, revision='step1000-tokens4B', tokens=4000000000, stage=None, ingredient=None)
    """
    for pattern in NAME_PATTERNS.values():
        m = pattern.match(name)
        if m:
            groups = m.groupdict()
            tokens = int(groups["tokens"]) * _TOKEN_UNITS[groups["unit"]] if groups.get("tokens") else None
            stage, ingredient = (int(groups[k]) if groups.get(k) else None for k in ("stage", "ingredient"))
            return CheckpointRef(int(groups["step"]), name, tokens, stage, ingredient)
    return None


def runs_of(refs: Iterable[CheckpointRef]) -> dict[str, list[CheckpointRef]]:
    """Checkpoints by training run (`CheckpointRef.run`), the runs in `CheckpointRef.run_order`, each in step order;
    the unprefixed and stage-1 names are one run, under its stage-1 label where it has one."""
    runs: dict[tuple[int, int], list[CheckpointRef]] = {}
    for ref in refs:
        runs.setdefault(ref.run_order, []).append(ref)
    labelled = {}
    for order in sorted(runs):
        members = sorted(runs[order], key=lambda r: r.step)
        labelled[max(r.run for r in members)] = members
    return labelled


def runs_note(todo: list[CheckpointRef], available: list[CheckpointRef] | None) -> str | None:
    """Which training run a selection reads and which others the source has, for the log and ``headwatch plan``;
    None where the source has one run without a stage name."""
    runs = runs_of(available if available is not None else todo)
    if not todo or list(runs) == [""]:
        return None
    order = todo[0].run_order  # the run's label as the source's names give it (stage1, also for unprefixed names)
    label = next((run for run, refs in runs.items() if refs[0].run_order == order), todo[0].run)
    others = [f"{run or 'unprefixed'} ({len(refs)} checkpoints)" for run, refs in runs.items() if run != label]
    return f"training run read: {label or 'unprefixed names'}" + (
        f"; the source also has {', '.join(others)}: name one's revisions with --revisions to read it" if others else ""
    )


def refs_from_names(names: Iterable[str], *, where: str) -> tuple[list[CheckpointRef], list[str]]:
    """Checkpoints among ``names``, sorted by training run (`CheckpointRef.run_order`) then step, and the names that
    carry no step.

    Raises:
        CheckpointError: two names denote the same step of one run.
    """
    found: dict[tuple[tuple[int, int], int], CheckpointRef] = {}
    ignored = []
    for name in sorted(names):
        ref = parse_name(name)
        if ref is None:
            ignored.append(name)
            continue
        key = (ref.run_order, ref.step)
        if key in found:
            raise CheckpointError(
                f"{found[key].revision!r} and {name!r} in {where} both name step {ref.step}; choose one with --revisions"
            )
        found[key] = ref
    return [found[k] for k in sorted(found)], ignored


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
    runs = runs_of(refs)
    if len(runs) > 1:
        labels = ", ".join(r or "unprefixed" for r in runs)
        raise ValueError(
            f"--revisions {text!r} names checkpoints of {len(runs)} training runs ({labels}), whose steps restart; "
            "a store holds one run: name one run's revisions"
        )
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

    Without ``revisions`` the first training run of ``available`` is taken (`runs_of`; the module's docstring).

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
        runs = runs_of(available)
        todo, missing = (next(iter(runs.values())) if runs else []), []
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
