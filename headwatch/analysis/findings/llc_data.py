"""The refined LLC under several distributions, as the report reads it: the induction heads' data-refined estimates.

The refined-LLC study (Wang et al.) takes a head's SGLD loss on the training distribution (the weight-refined LLC)
and on other data (data-refined LLCs): an induction head's estimate rises on data full of repeats (its section 4.2),
and the critical points of one induction head's data-refined curve fall where the in-context-learning score with
the other induction head ablated falls (its Figure 10: the score with 1:7 ablated drops where 1:6's data-refined
LLC peaks, and the reverse). Two readings, pure over an opened store:

- `repeats_over_text`: per induction head (held at the last checkpoint, `analysis.findings.held_types`), at the
  checkpoints with estimates on both ``repeats`` and ``text``, whether the one on repeats exceeds the one on text
  and from which step it does so at every later such checkpoint (None: not at the last);
- `critical_against_ablation`: per induction head h and data-refined distribution D (any held but ``train``), the
  critical points of h's curve on D, its peaks (an estimate above both neighbours) and its sharpest rise (the
  checkpoint ending the largest increase between consecutive estimates), against, for each other induction head g,
  the sharpest fall of the ICL score with g ablated (the checkpoint ending the largest decrease between consecutive
  checkpoints of ablation.parquet's ``icl_probe``, the probe's second copy's mean loss minus its first's: it falls
  as copying improves). A store without that table (the ablation lens, ``--lenses ablation``) gets None.

Both say what the runs show, agreeing with the study or not: the distances are reported, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headwatch.analysis.findings.held_types import head_types
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import TableSpec
from headwatch.analysis.store.lenses import TABLES
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, llc_data_order

ABLATION_TABLE = "ablation"  # the ablation lens's table (its declaration: analysis.store.lenses.ablation)
ICL_COLUMN = "icl_probe"  # the probe's ICL score with one head ablated


def induction_heads(store: Store) -> list[tuple[int, int]]:
    """The heads holding the induction type at the store's last checkpoint, layer-major (none without head types)."""
    kinds = head_types(store)
    if kinds is None or "induction" not in kinds.held:
        return []
    last = kinds.held["induction"][-1]  # (n_layers, n_heads)
    return [(int(layer), int(head)) for layer, head in np.argwhere(last)]


def _curve(store: Store, data: str, layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, estimates) of one head's refined LLC under ``data``, at the checkpoints with an estimate."""
    values = store.require(LLC, "llc", at={LLC_DATA_COLUMN: data})[:, layer, head]
    have = np.isfinite(values)
    return np.asarray(store.steps)[have], values[have]


@dataclass(frozen=True)
class RepeatsOverText:
    """One induction head's estimate on repeats against its estimate on text.

    Attributes:
        head: ``(layer, head)``.
        steps: the checkpoints with both estimates.
        above: ``(len(steps),)`` whether the estimate on repeats exceeds the one on text there.
        from_step: the first of ``steps`` from which it exceeds at every later one (None: not at the last).
        last_ratio: repeats / text at the last of ``steps``.
    """

    head: tuple[int, int]
    steps: np.ndarray
    above: np.ndarray
    from_step: int | None
    last_ratio: float


def repeats_over_text(store: Store) -> list[RepeatsOverText] | None:
    """`RepeatsOverText` for every induction head; None when the store lacks estimates on repeats or on text."""
    held = llc_data_order(store.read(LLC, columns=[])) if store.has(LLC) else []
    if "repeats" not in held or "text" not in held:
        return None
    out = []
    for layer, head in induction_heads(store):
        s_r, v_r = _curve(store, "repeats", layer, head)
        s_t, v_t = _curve(store, "text", layer, head)
        steps, i_r, i_t = np.intersect1d(s_r, s_t, return_indices=True)
        if not len(steps):
            continue
        above = v_r[i_r] > v_t[i_t]
        below = np.flatnonzero(~above)
        start = 0 if not len(below) else int(below[-1]) + 1
        from_step = int(steps[start]) if start < len(steps) else None
        ratio = float(v_r[i_r][-1] / v_t[i_t][-1]) if v_t[i_t][-1] != 0 else float("nan")
        out.append(RepeatsOverText((layer, head), steps, above, from_step, ratio))
    return out


def peaks(steps: np.ndarray, values: np.ndarray) -> list[int]:
    """The steps of a curve's interior local maxima (an estimate above both neighbours)."""
    inner = (values[1:-1] > values[:-2]) & (values[1:-1] > values[2:])
    return [int(s) for s in steps[1:-1][inner]]


def sharpest_change(steps: np.ndarray, values: np.ndarray, *, sign: int) -> int | None:
    """The step ending the largest increase (``sign`` 1) or decrease (``sign`` -1) between consecutive values."""
    if len(values) < 2:
        return None
    change = sign * np.diff(values)
    return int(steps[1:][int(np.argmax(change))]) if np.max(change) > 0 else None


@dataclass(frozen=True)
class CriticalAgainstAblation:
    """Where one induction head's data-refined curve turns, against where the ICL score falls with another ablated.

    Attributes:
        head: ``(layer, head)`` whose curve is read.
        data: the distribution its loss was taken on.
        peaks: its curve's peaks (steps).
        rise: the step ending its sharpest rise (None: it never rises).
        other: the induction head ablated.
        fall: the step ending the sharpest fall of the ICL score with ``other`` ablated (None: it never falls).
        nearest: the critical point of the curve (a peak or the sharpest rise) nearest to ``fall``, and how many of the
            run's checkpoints apart they are (None without both).
    """

    head: tuple[int, int]
    data: str
    peaks: list[int]
    rise: int | None
    other: tuple[int, int]
    fall: int | None
    nearest: tuple[int, int] | None


def ablation_spec() -> TableSpec | None:
    """The ablation lens's table where this version declares it."""
    return TABLES.get(ABLATION_TABLE)


def critical_against_ablation(store: Store) -> list[CriticalAgainstAblation] | None:
    """`CriticalAgainstAblation` for every ordered pair of distinct induction heads and every data-refined
    distribution; None when the store has no ablation table with the ICL score (or it is not declared here)."""
    spec = ablation_spec()
    if spec is None or ICL_COLUMN not in spec.schema.names or not store.has(spec) or not store.has(LLC):
        return None
    icl = store.require(spec, ICL_COLUMN)  # (S, n_layers, n_heads)
    steps = np.asarray(store.steps)
    position = {int(s): i for i, s in enumerate(steps)}
    heads = induction_heads(store)
    refined = [d for d in llc_data_order(store.read(LLC, columns=[])) if d != "train"]
    out = []
    for data in refined:
        for layer, head in heads:
            s, v = _curve(store, data, layer, head)
            tops, rise = peaks(s, v), sharpest_change(s, v, sign=1)
            points = sorted(set(tops) | ({rise} if rise is not None else set()))
            for other in heads:
                if other == (layer, head):
                    continue
                score = icl[:, other[0], other[1]]
                have = np.isfinite(score)
                fall = sharpest_change(steps[have], score[have], sign=-1)
                nearest = None
                if fall is not None and points:
                    near = min(points, key=lambda p: (abs(position[p] - position[fall]), p))
                    nearest = (near, abs(position[near] - position[fall]))
                out.append(CriticalAgainstAblation((layer, head), data, tops, rise, other, fall, nearest))
    return out


def repeats_sentences(rows: list[RepeatsOverText] | None) -> list[str]:
    """`repeats_over_text` in words, one sentence per induction head."""
    if rows is None:
        return [
            "This store has no refined LLCs on both repeats and text: add them with `--lenses llc --llc-data "
            "text,repeats` (docs/precompute.md, 'The distributions')."
        ]
    if not rows:
        return ["No head holds the induction type at the last checkpoint (or none has estimates on both)."]
    out = []
    for r in rows:
        n, k = len(r.steps), int(r.above.sum())
        when = (
            f"from step {r.from_step:,} on (every later estimate)"
            if r.from_step is not None
            else "not at the last estimated checkpoint"
        )
        out.append(
            f"{head_name(*r.head)}: its estimate on repeats exceeds its estimate on text at {k} of {n} checkpoints, "
            f"{when}; at the last, repeats / text = {r.last_ratio:.3g}."
        )
    return out


def ablation_sentences(rows: list[CriticalAgainstAblation] | None, steps: np.ndarray) -> list[str]:
    """`critical_against_ablation` in words, one sentence per (head, distribution, other head)."""
    if rows is None:
        return [
            "This store has no ablation table with the ICL score under single-head ablation (the ablation lens, "
            "`--lenses ablation`), so where the data-refined curves turn cannot be set against the fall of the ICL "
            "score with the other induction heads ablated (the study's Figure 10)."
        ]
    if not rows:
        return ["Fewer than two induction heads at the last checkpoint: no head's curve to set against another's ablation."]
    out = []
    for r in rows:
        turns = ", ".join(f"{p:,}" for p in r.peaks) or "none"
        rise = f"{r.rise:,}" if r.rise is not None else "none"
        if r.fall is None:
            where = "the ICL score never falls between checkpoints with it ablated"
        else:
            where = f"the ICL score with {head_name(*r.other)} ablated falls most at step {r.fall:,}"
            if r.nearest is not None:
                where += f"; the nearest of the curve's critical points is step {r.nearest[0]:,}, {r.nearest[1]} checkpoints away"
        out.append(
            f"{head_name(*r.head)} on {r.data}: peaks at {turns}, sharpest rise at step {rise}; {where} "
            f"(of {len(steps)} checkpoints)."
        )
    return out
