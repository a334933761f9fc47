"""The refined LLC under several distributions, as the report reads it: the induction heads' data-refined estimates.

The refined-LLC study (Wang et al.) takes a head's SGLD loss on the training distribution (the weight-refined LLC)
and on other data (data-refined LLCs): an induction head's estimate rises on data full of repeats (its section 4.2),
and the critical points of one induction head's data-refined curve fall where the in-context-learning score with
the other induction head ablated falls (its Figure 10: the score with 1:7 ablated drops where 1:6's data-refined
LLC peaks, and the reverse). Two readings, pure over an opened store, each judged against the noise of what it
compares (a difference counts only beyond `SE_MULTIPLE` = 2 standard errors of the difference):

- an estimate's standard error is its chains' (llc.parquet ``llc_std``, the population standard deviation over the
  C chains of meta.json ``llc.sampler``, / sqrt(C - 1): the sample standard deviation of llc_chains.parquet's
  per-chain estimates / sqrt(C));
- `repeats_over_text`: per induction head (held at the last checkpoint, `analysis.findings.held_types`), at the
  checkpoints with estimates on both ``repeats`` and ``text``, whether the one on repeats exceeds the one on text by
  more than 2 standard errors of their difference (sqrt(se_repeats² + se_text²)), neither being negative (a negative
  estimate is no learning coefficient), and from which step it does so at every later such checkpoint (None: not at
  the last);
- `critical_against_ablation`: per induction head h and data-refined distribution D (any held but ``train``), the
  critical points of h's curve on D: its peaks (`peaks`: an estimate above both neighbours from which the curve
  falls by more than 2 standard errors of the difference on each side before it passes above it again) and its
  sharpest rise (`sharpest_change`: the checkpoint ending the largest increase between consecutive estimates among
  those beyond 2 standard errors of the difference), against, for each other induction head g, the sharpest fall of
  the ICL score with g ablated minus the intact score (ablation.parquet ``icl_probe`` minus icl.parquet's probe
  ``score``, the probe's second copy's mean loss minus its first's: the ICL score's general fall as induction forms
  cancels, leaving what g's absence changes; the checkpoint ending the largest decrease between consecutive
  checkpoints among those beyond 2 standard errors, each difference's standard error sqrt(icl_probe_sem² +
  score_sem²)). A store without the ablation table (``--lenses ablation``) or the ICL scores (``--lenses losses``)
  gets None.

Both say what the runs show, agreeing with the study or not: the distances are reported, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headwatch.analysis.findings.held_types import head_types
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.ablation import ABLATION
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, llc_data_order, llc_data_words
from headwatch.analysis.store.lenses.losses import ICL

ICL_COLUMN = "icl_probe"  # the probe's ICL score with one head ablated (ablation.parquet)
SE_MULTIPLE = 2.0  # a difference counts beyond this many standard errors of it


def induction_heads(store: Store) -> list[tuple[int, int]]:
    """The heads holding the induction type at the store's last checkpoint, layer-major (none without head types)."""
    kinds = head_types(store)
    if kinds is None or "induction" not in kinds.held:
        return []
    last = kinds.held["induction"][-1]  # (n_layers, n_heads)
    return [(int(layer), int(head)) for layer, head in np.argwhere(last)]


def _chains(store: Store) -> int:
    """The chains behind every estimate (meta.json ``llc.sampler``)."""
    return int(((store.meta.llc or {}).get("sampler") or {}).get("chains") or 0)


def _curve(store: Store, data: str, layer: int, head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, estimates, standard errors) of one head's refined LLC under ``data``, at the checkpoints with an
    estimate; the standard error is the chains' (``llc_std / sqrt(C - 1)``; NaN with fewer than 2 chains)."""
    at = {LLC_DATA_COLUMN: data}
    values = store.require(LLC, "llc", at=at)[:, layer, head]
    spread = store.require(LLC, "llc_std", at=at)[:, layer, head]
    chains = _chains(store)
    se = spread / np.sqrt(chains - 1) if chains >= 2 else np.full_like(spread, np.nan)
    have = np.isfinite(values)
    return np.asarray(store.steps)[have], values[have], se[have]


def beyond(difference: np.ndarray, se_a: np.ndarray, se_b: np.ndarray) -> np.ndarray:
    """Whether ``difference`` (a - b) exceeds `SE_MULTIPLE` standard errors of it, sqrt(se_a² + se_b²), upwards
    (a difference without a finite standard error never does)."""
    se = np.sqrt(np.asarray(se_a, dtype=np.float64) ** 2 + np.asarray(se_b, dtype=np.float64) ** 2)
    with np.errstate(invalid="ignore"):
        return np.isfinite(se) & (np.asarray(difference) > SE_MULTIPLE * se)


@dataclass(frozen=True)
class RepeatsOverText:
    """One induction head's estimate on repeats against its estimate on text.

    Attributes:
        head: ``(layer, head)``.
        steps: the checkpoints with both estimates.
        above: ``(len(steps),)`` whether the estimate on repeats exceeds the one on text by more than 2 standard
            errors of their difference there, neither being negative.
        from_step: the first of ``steps`` from which it does so at every later one (None: not at the last).
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
        s_r, v_r, e_r = _curve(store, "repeats", layer, head)
        s_t, v_t, e_t = _curve(store, "text", layer, head)
        steps, i_r, i_t = np.intersect1d(s_r, s_t, return_indices=True)
        if not len(steps):
            continue
        # a negative estimate is no learning coefficient (`analysis.llc.diagnostics.NEGATIVE_NOTE`): nothing exceeds it
        above = beyond(v_r[i_r] - v_t[i_t], e_r[i_r], e_t[i_t]) & (v_r[i_r] >= 0) & (v_t[i_t] >= 0)
        below = np.flatnonzero(~above)
        start = 0 if not len(below) else int(below[-1]) + 1
        from_step = int(steps[start]) if start < len(steps) else None
        ratio = float(v_r[i_r][-1] / v_t[i_t][-1]) if v_t[i_t][-1] != 0 else float("nan")
        out.append(RepeatsOverText((layer, head), steps, above, from_step, ratio))
    return out


def peaks(steps: np.ndarray, values: np.ndarray, se: np.ndarray) -> list[int]:
    """The steps of a curve's peaks that clear its noise: an interior estimate above both neighbours from which the
    curve falls by more than 2 standard errors of the difference on each side, to an estimate reached before the
    curve passes above the peak again (its prominence, side by side, beyond the noise)."""
    out = []
    for i in range(1, len(values) - 1):
        if not (values[i] > values[i - 1] and values[i] > values[i + 1]):
            continue
        sides = []
        for order in (range(i - 1, -1, -1), range(i + 1, len(values))):
            falls = False
            for j in order:
                if values[j] > values[i]:
                    break
                falls |= bool(beyond(np.array(values[i] - values[j]), se[i], se[j]))
            sides.append(falls)
        if all(sides):
            out.append(int(steps[i]))
    return out


def sharpest_change(steps: np.ndarray, values: np.ndarray, se: np.ndarray, *, sign: int) -> int | None:
    """The step ending the largest increase (``sign`` 1) or decrease (``sign`` -1) between consecutive values among
    those beyond 2 standard errors of the difference (None: none is)."""
    if len(values) < 2:
        return None
    change = sign * np.diff(values)
    clear = beyond(change, se[1:], se[:-1])
    if not clear.any():
        return None
    return int(steps[1:][int(np.argmax(np.where(clear, change, -np.inf)))])


@dataclass(frozen=True)
class CriticalAgainstAblation:
    """Where one induction head's data-refined curve turns, against where the ICL score falls with another ablated.

    Attributes:
        head: ``(layer, head)`` whose curve is read.
        data: the distribution its loss was taken on.
        peaks: its curve's peaks beyond the noise (steps, `peaks`).
        rise: the step ending its sharpest rise beyond the noise (None: none clears it).
        other: the induction head ablated.
        fall: the step ending the sharpest fall beyond the noise of the ICL score with ``other`` ablated minus the
            intact score (None: none clears it).
        nearest: the critical point of the curve (a peak or the sharpest rise) nearest to ``fall``, and how many of the
            run's checkpoints apart they are (None without both).
        compared: the checkpoints with both the ICL score with ``other`` ablated and the intact one.
    """

    head: tuple[int, int]
    data: str
    peaks: list[int]
    rise: int | None
    other: tuple[int, int]
    fall: int | None
    nearest: tuple[int, int] | None
    compared: int


def ablated_minus_intact(store: Store, layer: int, head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, difference, standard error) of the probe ICL score with one head ablated minus the intact score, at
    the checkpoints with both (ablation.parquet ``icl_probe``, icl.parquet's probe ``score``; the standard error
    sqrt(icl_probe_sem² + score_sem²)). The caller knows the store has both tables."""
    ablated = store.require(ABLATION, ICL_COLUMN)[:, layer, head]
    ablated_se = store.require(ABLATION, f"{ICL_COLUMN}_sem")[:, layer, head]
    intact = store.require(ICL, "score", at={"set": "probe"})
    intact_se = store.require(ICL, "score_sem", at={"set": "probe"})
    have = np.isfinite(ablated) & np.isfinite(intact)
    se = np.sqrt(ablated_se**2 + intact_se**2)
    return np.asarray(store.steps)[have], (ablated - intact)[have], se[have]


def critical_against_ablation(store: Store) -> list[CriticalAgainstAblation] | None:
    """`CriticalAgainstAblation` for every ordered pair of distinct induction heads and every data-refined
    distribution; None when the store lacks the ablation table, the ICL scores or the refined LLC."""
    if not (store.has(ABLATION) and store.has(ICL) and store.has(LLC)):
        return None
    position = {int(s): i for i, s in enumerate(store.steps)}
    heads = induction_heads(store)
    falls, compared = {}, {}
    for other in heads:
        s, d, e = ablated_minus_intact(store, *other)
        falls[other], compared[other] = sharpest_change(s, d, e, sign=-1), len(s)
    refined = [d for d in llc_data_order(store.read(LLC, columns=[])) if d != "train"]
    out = []
    for data in refined:
        for layer, head in heads:
            s, v, e = _curve(store, data, layer, head)
            tops, rise = peaks(s, v, e), sharpest_change(s, v, e, sign=1)
            points = sorted(set(tops) | ({rise} if rise is not None else set()))
            for other in heads:
                if other == (layer, head):
                    continue
                fall = falls[other]
                nearest = None
                if fall is not None and points:
                    near = min(points, key=lambda p: (abs(position[p] - position[fall]), p))
                    nearest = (near, abs(position[near] - position[fall]))
                out.append(CriticalAgainstAblation((layer, head), data, tops, rise, other, fall, nearest, compared[other]))
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
            f"{head_name(*r.head)}: its refined LLC {llc_data_words('repeats')} exceeds its refined LLC "
            f"{llc_data_words('text')} by more than {SE_MULTIPLE:g} standard errors of the difference at {k} of {n} "
            f"checkpoints, {when}; at the last, repeats / text = {r.last_ratio:.3g}"
            + (
                " (one of the two estimates is negative there: no learning coefficient, see 'Can the refined LLCs be trusted?')."
                if r.last_ratio < 0
                else "."
            )
        )
    return out


def ablation_lines(rows: list[CriticalAgainstAblation] | None, steps: np.ndarray) -> list[str]:
    """`critical_against_ablation`'s falls in words: one Markdown list item per ablated induction head, where the ICL
    score with it ablated minus the intact score falls most (the fall depends on the ablated head alone; the curves
    set against it are `critical_table`'s)."""
    if rows is None:
        return [
            "This store lacks the ICL score under single-head ablation (ablation.parquet, `--lenses ablation`) or the "
            "intact ICL score (icl.parquet, `--lenses losses`), so where the data-refined curves turn cannot be set "
            "against the fall of the ICL score with another induction head ablated (the study's Figure 10)."
        ]
    if not rows:
        return ["Fewer than two induction heads at the last checkpoint: no head's curve to set against another's ablation."]
    out = []
    for other, (fall, compared) in _falls(rows).items():
        name = head_name(*other)
        if compared < 2:
            said = f"With {name} ablated, no fall to read: `--lenses ablation,losses` at every checkpoint adds both ICL scores"
        elif fall is None:
            said = f"With {name} ablated, the probe ICL score minus the intact score never falls beyond the noise"
        else:
            said = f"With {name} ablated, the probe ICL score minus the intact score falls most at step {fall:,}"
        out.append(f"- {said} (both scores at {compared} of {len(steps)} checkpoints).")
    return out


def critical_table(rows: list[CriticalAgainstAblation] | None) -> list[dict[str, str]]:
    """`critical_against_ablation` as table rows, one per (induction head, data-refined distribution): its curve's
    peaks and sharpest rise and, for each ablated head whose ICL score falls beyond the noise, the curve's critical
    point nearest that fall and how many checkpoints apart ("–" in the head's own column; "none" without a critical
    point). Empty without rows."""
    if not rows:
        return []
    with_fall = [other for other, (fall, _) in _falls(rows).items() if fall is not None]
    table: dict[tuple[tuple[int, int], str], dict[str, str]] = {}
    for r in rows:
        row = table.setdefault(
            (r.head, r.data),
            {
                "head": head_name(*r.head),
                "refined LLC": llc_data_words(r.data),
                "peaks": ", ".join(f"{p:,}" for p in r.peaks) or "none",
                "sharpest rise": f"{r.rise:,}" if r.rise is not None else "none",
                **{_nearest_column(other): "–" for other in with_fall},
            },
        )
        if r.other in with_fall:
            row[_nearest_column(r.other)] = (
                f"{r.nearest[0]:,} ({r.nearest[1]} checkpoint{'' if r.nearest[1] == 1 else 's'} away)"
                if r.nearest is not None
                else "none"
            )
    return list(table.values())


def _falls(rows: list[CriticalAgainstAblation]) -> dict[tuple[int, int], tuple[int | None, int]]:
    """Each ablated head's (fall, checkpoints compared), the heads in order."""
    return {r.other: (r.fall, r.compared) for r in sorted(rows, key=lambda r: r.other)}


def _nearest_column(other: tuple[int, int]) -> str:
    """The table's column of the critical point nearest the fall with ``other`` ablated."""
    return f"nearest to the fall with {head_name(*other)} ablated"
