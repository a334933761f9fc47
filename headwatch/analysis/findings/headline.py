"""What a run shows, in one headline: which heads formed when (the Overview's card and the Timeline open with it).

Per head type that some head holds at the end of training (head_emergence.parquet; docs/head-types.md): the heads that
emerge first (every head whose emergence step is the type's earliest: two heads that form at one checkpoint are both
first), that step, and how many heads follow and by when. For the first induction heads, the strongest K-composition
source of each at the first checkpoint with composition rows at or after the emergence step (composition.parquet,
layer-major ``[step, layer_a, head_a, layer_b, head_b]``; the score divided by meta.json ``composition.baseline.k``,
the mean score of independent Gaussian heads, when recorded) and the types that source holds there. A type no head
holds at the end is named with its highest score, so "no induction head" is said, not left out.

Every head named comes with the link to its evidence: the head explorer on the head at its emergence step with the
type's score in the statistic tab (`evidence_link`), and for a composition source the Circuits page on the pair at that
step. Pure: reads a `Store`, returns plain records.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headwatch.analysis.findings.events import EVIDENCE_PANEL, Event, evidence_link
from headwatch.analysis.findings.held_types import (
    CONTEXT_STEP,
    TYPE_LABELS,
    TypeSummary,
    head_types,
    peak_effect,
    type_summaries,
)
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.composition import COMPOSITION
from headwatch.analysis.store.lenses.types import FUNCTION_TYPES, HEAD_EMERGENCE, HEAD_TYPES

__all__ = ["EVIDENCE_PANEL", "Source", "TypeHeadline", "circuits_link", "evidence_link", "headline_markdown", "run_headline"]


def circuits_link(run: str, source: tuple[int, int], target: tuple[int, int], step: int) -> str:
    """The Circuits page at ``step`` on K-composition as times random heads, with the target head chosen: its
    strongest sources, ``source`` among them, drawn over training below the matrix."""
    del source  # the page names a head's partners itself; the target and the step are what it needs
    query = (("kind", "k"), ("scale", "random"), ("step", step), ("layer", target[0]), ("head", target[1]))
    return Event(step, "head type", "", "", "circuits", query).link(run)


@dataclass(frozen=True)
class Source:
    """A head's strongest K-composition source at one checkpoint.

    Attributes:
        target: the (layer, head) whose keys read the source's output.
        source: the (layer, head) in an earlier layer with the largest K-composition into ``target``.
        step: the checkpoint read (the first with composition rows at or after the target's emergence).
        score: its K-composition score (0 to 1).
        ratio: ``score`` over the random-heads mean (meta.json ``composition.baseline.k``), or None unrecorded.
        types: the types the source holds at ``step`` (head_types.parquet), in `HEAD_TYPES` order.
    """

    target: tuple[int, int]
    source: tuple[int, int]
    step: int
    score: float
    ratio: float | None
    types: tuple[str, ...]


@dataclass(frozen=True)
class TypeHeadline:
    """One head type's part of the headline.

    Attributes:
        type: ``previous_token``, ``induction`` or ``sink``.
        step: the earliest emergence step over heads; None when no head holds the type at the end.
        first: every head emerging at ``step``, layer-major.
        later: how many heads emerge after ``step`` (and hold the type at the end).
        last_step: the latest emergence step (equal to ``step`` when ``later`` is 0).
        sources: for induction, the strongest K-composition source of each first head (empty without composition).
        peak_score, peak_head, peak_step: the highest score any head reached, whose and when (for a type no head
            holds: its evidence).
    """

    type: str
    step: int | None
    first: tuple[tuple[int, int], ...]
    later: int
    last_step: int | None
    sources: tuple[Source, ...]
    peak_score: float
    peak_head: tuple[int, int]
    peak_step: int | None = None
    peak_untyped: bool = False  # multigram and other: the peak is over heads with no attention type


def run_headline(store: Store) -> list[TypeHeadline] | None:
    """Each head type's headline, the types that formed first by step, then those that did not; None without head
    types (head_emergence.parquet)."""
    summaries = type_summaries(store)
    if summaries is None:
        return None
    out = []
    for s in summaries:
        if not s.emerged:
            out.append(
                TypeHeadline(s.type, None, (), 0, None, (), s.peak_score, s.peak_head, _peak_step(store, s), s.peak_untyped)
            )
            continue
        step = s.emerged[0][2]
        first = tuple(sorted((layer, head) for layer, head, at in s.emerged if at == step))
        sources = tuple(strongest_sources(store, first, step)) if s.type == "induction" else ()
        out.append(
            TypeHeadline(s.type, step, first, len(s.emerged) - len(first), s.emerged[-1][2], sources, s.peak_score, s.peak_head)
        )
    order = {name: i for i, name in enumerate(HEAD_TYPES)}
    return sorted(out, key=lambda t: (t.step is None, t.step or 0, order.get(t.type, len(order))))


def _peak_step(store: Store, summary) -> int | None:
    """The step of a type's highest score (head_emergence.parquet ``peak_step`` of the peak head)."""
    frame = store.frame(HEAD_EMERGENCE)
    if frame is None or "peak_step" not in frame.columns:
        return None
    layer, head = summary.peak_head
    rows = frame[(frame["type"] == summary.type) & (frame["layer"] == layer) & (frame["head"] == head)]
    return int(rows["peak_step"].iloc[0]) if len(rows) and rows["peak_step"].notna().iloc[0] else None


def strongest_sources(store: Store, targets: tuple[tuple[int, int], ...], step: int) -> list[Source]:
    """Each target's strongest K-composition source at the first checkpoint with composition rows at or after
    ``step`` (none without composition.parquet, or when no such checkpoint exists)."""
    if not store.has(COMPOSITION):
        return []
    with_rows = [int(s) for s in store.steps_with(COMPOSITION) if int(s) >= step]
    if not with_rows:
        return []
    at = with_rows[0]
    index = int(np.searchsorted(store.steps, at))
    scores = store.require(COMPOSITION, "k")[index]  # (L_a, H_a, L_b, H_b): source a, target b
    baseline = ((store.meta.composition or {}).get("baseline") or {}).get("k")
    types = head_types(store)
    out = []
    for layer, head in targets:
        column = scores[:, :, layer, head]  # (L_a, H_a), NaN where a is not in an earlier layer
        if not np.isfinite(column).any():
            continue
        a_layer, a_head = (int(i) for i in np.unravel_index(np.nanargmax(column), column.shape))
        score = float(column[a_layer, a_head])
        held = tuple(name for name in HEAD_TYPES if types.held[name][index, a_layer, a_head]) if types is not None else ()
        out.append(
            Source(
                target=(layer, head),
                source=(a_layer, a_head),
                step=at,
                score=score,
                ratio=score / float(baseline) if baseline else None,
                types=held,
            )
        )
    return out


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def headline_markdown(store: Store, run: str) -> list[str]:
    """The headline as Markdown lines, one per head type, every head named a link to its evidence.

    Returns:
        One line per type (``**Induction heads** form at step 1,400: [L1 H0](...), ... at once; 1 more by step 1,500.
        Their strongest K-composition source: [L0 H5](...) (previous-token), 1.94× random heads.``); a single line
        saying the store has no head types when it has none.
    """
    rows = run_headline(store)
    if rows is None:
        return [f"No head types in this store ({HEAD_EMERGENCE.file}): run the types lens on it to see which heads form when."]
    lines = []
    for t in rows:
        name = TYPE_LABELS.get(t.type, t.type)
        if t.step is None and t.type in FUNCTION_TYPES:
            summary = TypeSummary(t.type, 0, None, None, t.peak_score, t.peak_head, [], t.peak_untyped)
            lines.append(f"**No {name} head** at the last checkpoint with tokens in context ({peak_effect(summary)}).")
            continue
        if t.step is None:
            peak = head_name(*t.peak_head)
            if t.peak_step is not None:
                peak = f"[{peak}]({evidence_link(run, *t.peak_head, t.peak_step, t.type)}) at step {t.peak_step:,}"
            lines.append(
                f"**No {name} head** holds its type at the end of training (highest {name} score {t.peak_score:.3g}, {peak})."
            )
            continue
        heads = [f"[{head_name(*h)}]({evidence_link(run, *h, t.step, t.type)})" for h in t.first]
        together = " at once" if len(heads) > 1 else " first"
        later = f"; {t.later} more by step {t.last_step:,}" if t.later else ""
        line = f"**{name.capitalize()} heads** form at step {t.step:,}: {_and(heads)}{together}{later}."
        if t.type in FUNCTION_TYPES:
            line = (
                f"**{name.capitalize()} heads** from step {t.step:,} ({CONTEXT_STEP} they hold the type): "
                f"{_and(heads)}{together}{later}."
            )
        if t.sources:
            line += " " + _sources_text(t.sources, run)
        lines.append(line)
    return lines


def _sources_text(sources: tuple[Source, ...], run: str) -> str:
    """``Their strongest K-composition source at step 1,400: L0 H5 (previous-token) for L1 H0 (1.94× random heads)
    and L1 H5 (1.87×).``, the targets grouped by source, each source a link to the Circuits page."""
    by_source: dict[tuple[int, int], list[Source]] = {}
    for s in sources:
        by_source.setdefault(s.source, []).append(s)
    parts = []
    for source, group in by_source.items():
        kind = ", ".join(TYPE_LABELS.get(x, x) for x in group[0].types) or "no type"
        into = []
        for i, s in enumerate(group):
            unit = ("× random heads" if i == 0 else "×") if s.ratio is not None else ""
            value = f"{s.ratio:.2f}{unit}" if s.ratio is not None else f"score {s.score:.3g}"
            into.append(f"{head_name(*s.target)} ({value})")
        link = circuits_link(run, source, group[0].target, group[0].step)
        parts.append(f"[{head_name(*source)}]({link}) ({kind}) for {_and(into)}")
    whose = "Their" if len(sources) > 1 else "Its"
    return f"{whose} strongest K-composition source at step {sources[0].step:,}: " + "; ".join(parts) + "."
