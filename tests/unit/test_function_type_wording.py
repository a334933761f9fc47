"""How the headline and the type sentences word multigram and other heads (`analysis.findings.headline`,
`analysis.findings.held_types`): their best score is the ablation effect, so its peak is taken over heads with no
attention type (a previous-token head's ablation effect is no multigram score); and their emergence step is the first
checkpoint with tokens in context at which the head holds the type, not an exact onset. Checked on planted
head_emergence tables whose answers are written here."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pandas as pd

from headwatch.analysis.findings.headline import headline_markdown
from headwatch.analysis.findings.held_types import type_sentences, type_summaries


def _store(rows: list[tuple[int, int, str, int | None, float]]) -> Any:
    frame = pd.DataFrame(rows, columns=["layer", "head", "type", "emergence_step", "peak_score"])
    frame["emergence_step"] = frame["emergence_step"].astype("Int64")
    frame["peak_step"] = 100
    types = {"types": {"previous_token": {}, "current_token": {}, "multigram": {}, "other": {}}, "function": True}
    return SimpleNamespace(frame=lambda table: frame, meta=SimpleNamespace(types=types), has=lambda table: False, path="S")


# L0 H5 a previous-token head whose ablation costs 0.358 nats; L1 H2 an untyped head costing 0.05; L1 H3 0.02.
PLANTED = [
    (0, 5, "previous_token", 1250, 0.98),
    (1, 2, "previous_token", None, 0.1),
    (1, 3, "previous_token", None, 0.1),
    (0, 5, "multigram", None, 0.358),
    (1, 2, "multigram", None, 0.05),
    (1, 3, "multigram", None, 0.02),
    (0, 5, "other", None, 0.358),
    (1, 2, "other", None, 0.05),
    (1, 3, "other", None, 0.02),
]


def test_the_multigram_peak_is_over_heads_with_no_attention_type() -> None:
    summaries = {s.type: s for s in type_summaries(_store(PLANTED)) or []}
    assert summaries["multigram"].peak_head == (1, 2) and summaries["multigram"].peak_score == 0.05
    assert summaries["multigram"].peak_untyped
    assert summaries["previous_token"].peak_head == (0, 5) and not summaries["previous_token"].peak_untyped
    lines = " ".join(headline_markdown(_store(PLANTED), "r"))
    assert "0.358" not in lines and "L0 H5" not in lines.split("**No multigram head**")[1]
    assert (
        "**No multigram head** at the last checkpoint with tokens in context (largest ablation effect of a head "
        "with no attention type 0.05 nats, L1 H2)" in lines
    )
    sentences = " ".join(type_sentences(_store(PLANTED)))
    assert (
        "No head is a multigram head at the last checkpoint with tokens in context (largest ablation effect of a "
        "head with no attention type 0.05 nats, L1 H2)." in sentences
    )


def test_when_every_head_holds_an_attention_type_the_peak_says_it_is_of_any_head() -> None:
    rows = [(0, 5, "previous_token", 1250, 0.98), (0, 5, "multigram", None, 0.358)]
    summaries = {s.type: s for s in type_summaries(_store(rows)) or []}
    assert summaries["multigram"].peak_head == (0, 5) and not summaries["multigram"].peak_untyped
    assert "largest ablation effect of any head 0.358 nats, L0 H5" in " ".join(type_sentences(_store(rows)))


def test_a_multigram_emergence_reads_as_the_first_checkpoint_with_tokens_in_context() -> None:
    rows = [*PLANTED[:3], (1, 2, "multigram", 1500, 0.05), (1, 3, "multigram", None, 0.02)]
    lines = " ".join(headline_markdown(_store(rows), "r"))
    assert (
        "**Multigram heads** from step 1,500 (the first checkpoint with tokens in context at which they hold the type):" in lines
    )
    assert "**Previous-token heads** form at step 1,250" in lines  # attention types keep their wording
    sentences = " ".join(type_sentences(_store(rows)))
    assert "L1 H2 from step 1,500 (from: the first checkpoint with tokens in context at which the head holds it)." in sentences


def test_the_timeline_lane_says_a_multigram_emergence_is_at_a_checkpoint_with_tokens_in_context() -> None:
    from headwatch.analysis.findings.events import type_events

    rows = [*PLANTED[:3], (1, 2, "multigram", 1500, 0.05), (1, 3, "multigram", None, 0.02)]
    events = {e.label: e for e in type_events(_store(rows))}
    multigram = events["first multigram head: L1 H2"]
    assert multigram.detail == (
        "holds the type from step 1,500 (the first checkpoint with tokens in context at which it holds it) to the end"
    )
    assert events["first previous-token head: L0 H5"].detail == "holds the type from step 1,250 to the end"
