"""Checkpoint names and schedules, revision selection, and the one-ahead prefetcher."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from headwatch.analysis.errors import CheckpointError
from headwatch.precompute.job.prefetch import Prefetcher
from headwatch.precompute.sources.revisions import (
    PYTHIA_STEPS,
    CheckpointRef,
    is_pythia,
    parse_name,
    parse_revisions,
    refs_from_names,
    runs_note,
    runs_of,
    schedule_gaps,
    select,
)


def test_names_of_every_suite_parse_to_steps_and_tokens() -> None:
    assert parse_name("step143000") == CheckpointRef(143000, "step143000")
    assert parse_name("step1000-tokens4B") == CheckpointRef(1000, "step1000-tokens4B", 4_000_000_000)
    assert parse_name("step20-tokens84M") == CheckpointRef(20, "step20-tokens84M", 84_000_000)
    assert parse_name("ckpt_359") == CheckpointRef(359, "ckpt_359")
    assert parse_name("checkpoint-500") == CheckpointRef(500, "checkpoint-500")
    for other in ("main", "refs/pr/1", "step", "stepX", "step10-tokens", "ckpt-3", "checkpoint_5", "step1.5"):
        assert parse_name(other) is None, other


# OLMo 2's branch names as allenai/OLMo-2-1124-7B publishes them (its stage-1 steps every 1000 from 150, its three
# stage-2 ingredients each from step 1000 to 11931), and an early branch without the stage prefix.
OLMO2 = [
    "step150-tokens1B",
    "stage1-step15000-tokens63B",
    "stage1-step928646-tokens3896B",
    "stage2-ingredient1-step1000-tokens5B",
    "stage2-ingredient1-step11931-tokens50B",
    "stage2-ingredient2-step1000-tokens5B",
    "stage2-ingredient3-step11931-tokens50B",
    "main",
]


def test_olmo2_stage_and_ingredient_names_parse_to_steps_tokens_and_runs() -> None:
    ref = parse_name("stage1-step140000-tokens294B")
    assert ref == CheckpointRef(140000, "stage1-step140000-tokens294B", 294_000_000_000, stage=1)
    assert ref is not None and ref.run == "stage1"
    ref = parse_name("stage2-ingredient1-step11931-tokens50B")
    assert ref == CheckpointRef(11931, "stage2-ingredient1-step11931-tokens50B", 50_000_000_000, stage=2, ingredient=1)
    assert ref is not None and ref.run == "stage2-ingredient1"
    ref = parse_name("step150-tokens1B")  # an early OLMo 2 branch: no stage prefix, the stage-1 run
    assert ref == CheckpointRef(150, "step150-tokens1B", 1_000_000_000) and ref.run == "" and ref.run_order == (1, -1)
    for other in ("stage-step5-tokens1B", "stage2-ingredient-step5-tokens1B", "stage2-step5-tokens", "stage1-step-5-tokens1B"):
        assert parse_name(other) is None, other


def test_olmo3_smollm3_and_apertus_names() -> None:
    """OLMo 3 (allenai/Olmo-3-1025-7B: stage1-step0 .. stage1-step1413814, stage2-step..., stage3-step...; the 32B's
    stage-2 ingredients) names no tokens and restarts its steps per stage: one run per stage. SmolLM3's checkpoints
    (HuggingFaceTB/SmolLM3-3B-checkpoints) count one step across the stages: one run. Apertus (swiss-ai/Apertus-*)
    uses OLMo's step<N>-tokens<M>B."""
    assert parse_name("stage1-step1000") == CheckpointRef(1000, "stage1-step1000", stage=1)
    assert parse_name("stage2-ingredient1-step500") == CheckpointRef(500, "stage2-ingredient1-step500", stage=2, ingredient=1)
    refs, _ = refs_from_names(["stage1-step0", "stage1-step1413814", "stage2-step1000", "stage3-step9000", "main"], where="olmo3")
    assert {run: [r.step for r in rs] for run, rs in runs_of(refs).items()} == {
        "stage1": [0, 1413814],
        "stage2": [1000],
        "stage3": [9000],
    }
    names = ["stage1-step-3440000", "stage2-step-4200000", "stage3-step-4720000", "it-SFT", "it-mid-training"]
    refs, ignored = refs_from_names(names, where="smollm3")
    assert [r.step for r in refs] == [3440000, 4200000, 4720000] and sorted(ignored) == ["it-SFT", "it-mid-training"]
    assert list(runs_of(refs)) == [""] and runs_note(refs, refs) is None  # one run, as its steps say
    assert parse_name("step1750000-tokens7652B") == CheckpointRef(1750000, "step1750000-tokens7652B", 7_652_000_000_000)


def test_olmo2_runs_are_kept_apart_and_the_first_is_read_by_default() -> None:
    refs, ignored = refs_from_names(OLMO2, where="allenai/OLMo-2-1124-7B")  # steps 1000 and 11931 repeat across runs
    assert ignored == ["main"]
    runs = runs_of(refs)
    assert list(runs) == ["stage1", "stage2-ingredient1", "stage2-ingredient2", "stage2-ingredient3"]
    assert [r.step for r in runs["stage1"]] == [150, 15000, 928646]  # the unprefixed branch belongs to stage 1
    assert [r.tokens for r in runs["stage2-ingredient1"]] == [5_000_000_000, 50_000_000_000]
    todo, missing = select(refs)
    assert [r.revision for r in todo] == ["step150-tokens1B", "stage1-step15000-tokens63B", "stage1-step928646-tokens3896B"]
    assert missing == []
    assert runs_note(todo, refs) == (
        "training run read: stage1; the source also has stage2-ingredient1 (2 checkpoints), stage2-ingredient2 "
        "(1 checkpoints), stage2-ingredient3 (1 checkpoints): name one's revisions with --revisions to read it"
    )
    wanted = parse_revisions("stage2-ingredient1-step11931-tokens50B,stage2-ingredient1-step1000-tokens5B")
    todo, missing = select(refs, revisions=wanted)
    assert [r.step for r in todo] == [1000, 11931] and missing == []
    assert (runs_note(todo, refs) or "").startswith("training run read: stage2-ingredient1; the source also has stage1 (3")
    early = parse_revisions("step150-tokens1B")  # an unprefixed name: the stage-1 run
    assert (runs_note(select(refs, revisions=early)[0], refs) or "").startswith(
        "training run read: stage1; the source also has stage2-ingredient1"
    )
    with pytest.raises(ValueError, match=r"2 training runs \(stage2-ingredient1, stage2-ingredient2\)"):
        parse_revisions("stage2-ingredient1-step1000-tokens5B,stage2-ingredient2-step1000-tokens5B")
    with pytest.raises(CheckpointError, match="both name step 1000"):
        refs_from_names(["stage1-step1000-tokens4B", "step1000-tokens4B"], where="repo")  # one run, one step twice
    pythia, _ = refs_from_names(["step0", "step1"], where="repo")
    assert runs_note(pythia, pythia) is None  # one run without stage names: nothing to say


def test_pythia_schedule_is_154_log_then_linear_steps() -> None:
    assert len(PYTHIA_STEPS) == 154
    assert PYTHIA_STEPS[:12] == (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
    assert PYTHIA_STEPS[-1] == 143000
    assert all(b - a == 1000 for a, b in itertools.pairwise(PYTHIA_STEPS[11:]))
    assert is_pythia("EleutherAI/pythia-1.4b-deduped") and not is_pythia("allenai/OLMo-1B")
    refs, _ = refs_from_names([f"step{s}" for s in PYTHIA_STEPS if s != 4000] + ["step7", "main"], where="test")
    assert schedule_gaps(refs) == ([4000], [7])


def test_refs_from_names_sorts_by_step_and_refuses_two_names_for_one_step() -> None:
    refs, ignored = refs_from_names(["step10", "main", "step2", "step1000"], where="repo")
    assert [r.step for r in refs] == [2, 10, 1000] and ignored == ["main"]
    with pytest.raises(CheckpointError, match=r"'checkpoint-10' and 'step10' .* both name step 10"):
        refs_from_names(["step10", "checkpoint-10"], where="repo")


def test_revisions_option_is_parsed_and_checked() -> None:
    assert [r.revision for r in parse_revisions(" step4, step0 ,step1000")] == ["step0", "step4", "step1000"]
    with pytest.raises(ValueError, match="'main' carry no step"):
        parse_revisions("step0,main")
    with pytest.raises(ValueError, match="no revision"):
        parse_revisions(" , ")
    with pytest.raises(ValueError, match="twice"):
        parse_revisions("step0,step0")


def test_select_by_revisions_and_every() -> None:
    available, _ = refs_from_names([f"step{s}" for s in (0, 1, 2, 4, 1000, 2000, 3000)], where="test")
    todo, missing = select(available)
    assert todo == available and missing == []
    todo, missing = select(available, every=1000)
    assert [r.step for r in todo] == [0, 1000, 2000, 3000]
    wanted = parse_revisions("step2,step5,step2000")
    todo, missing = select(available, revisions=wanted)
    assert [r.revision for r in todo] == ["step2", "step2000"] and [r.revision for r in missing] == ["step5"]
    todo, missing = select(None, revisions=wanted)  # offline: taken as given, checked when fetched
    assert todo == wanted and missing == []
    with pytest.raises(ValueError, match="--revisions"):
        select(None)
    with pytest.raises(ValueError, match="positive"):
        select(available, every=0)


def test_prefetcher_fetches_one_ahead_never_two() -> None:
    events: list[tuple[str, int]] = []
    lock = threading.Lock()

    def note(what: str, i: int) -> None:
        with lock:
            events.append((what, i))

    def fetch(i: int) -> int:
        note("fetch", i)
        time.sleep(0.02)
        if i == 2:
            raise CheckpointError("bad checkpoint 2")
        note("fetched", i)
        return i * 10

    results: list[int | str] = []
    with Prefetcher(fetch, [0, 1, 2, 3]) as pre:
        for i, result in pre:
            try:
                results.append(result())
            except CheckpointError as exc:
                results.append(str(exc))
            note("compute", i)
            time.sleep(0.1)  # the next fetch runs meanwhile
            note("computed", i)
    assert results == [0, 10, "bad checkpoint 2", 30]  # an error belongs to its item only
    at = {e: k for k, e in enumerate(events)}
    for i in range(3):
        assert at[("fetch", i + 1)] < at[("computed", i)], "fetching i+1 overlaps computing i"
    for i in range(2):
        assert at[("fetch", i + 2)] > at[("computed", i)], "never two fetches ahead"
