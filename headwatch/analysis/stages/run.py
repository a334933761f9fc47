"""A run's developmental stages, read from every curve a store has and named by what changes across them
(docs/stages.md).

Each curve is cut into stages by the one rule of `analysis.stages` (a boundary where its trend or its rate changes
by more than k standard errors): the whole-model LLC (llc.parquet; under the run's training distribution where the
table keys its rows by one, else the stored estimates on the held-out text; the chains' pooled standard error), the
eval loss and the probe's copy loss (eval_loss.parquet; the jitter around their trend), and per head type the number
of heads holding it (head_types.parquet ``holds``; the jitter, floored at ``count_noise`` heads). The behavioural
curves, the copy loss and the counts, are evidence beside the LLC (Hoogland et al. 2024 check the LLC's stages
against behaviour). Each curve's boundary carries its likelihood ratio (how much better two lines meeting there fit
than one) and its uncertainty, the checkpoints where its cut could sit with chi2 within 1 of its best place.

The run's boundaries merge the curves' own: sorted by step, a boundary joins the group of the first one before it
when it lies at most ``merge`` checkpoints after that group's first boundary (checkpoints of the union of the
curves' steps). A group is one boundary of the run, at the step its boundaries agree on most (the summed likelihood
ratio of those whose uncertainty holds it): not at its earliest step, which on a thinned schedule is often a faint
bend of one curve before the change. Its uncertainty spans its members' intervals, each widened to reach back to the
checkpoint before its step (a change seen at a checkpoint happened somewhere after the one before it), so no
boundary reads as placed to a single step. A group stands as a boundary of the run only on real support: boundaries
of at least two curves, or one curve's with a likelihood ratio above `LONE_SUPPORT` (its largest member's) and a
change of some head's score across it (the name below; one curve's bend across which no head's score changes is
left out however strong, the weakest first, and the names read again over the longer stage); the others are that
curve's bends (its own basis keeps them), not the run's. It is named by what changes across it, in
the stage it opens (from it to the next boundary): per head score (each type's score in head_types.parquet; the loss
increase when the head is ablated, where the store has ablation.parquet; a head without a value at either end is
left out) and direction, the heads whose score changes most, with their mean score before and after (``induction
scores rise in L1 H0, H1, H3, H4, H7: 0.072 -> 0.16``), where the largest change is at least a quarter of the score's
scale (a type's threshold: a rise that stays under it counts; the largest ablation effect of the run); the two
largest changes, in units of their scales, or ``no head's score changes by a quarter of its scale``. A head reaching
a type is an event of its own (the Timeline's head-type lane), not a boundary's name. The run's stages (basis
``run`` of stages.parquet, the one the views shade) lie between those boundaries.
"""

# The docstring above, less its first paragraph, is written into every store's meta.json ``stages.rule`` after
# `analysis.stages.curve`'s (`store_stages`): its text is the stores' text, module paths included.

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from headwatch.analysis.stages.curve import (
    LEVEL_BOUNDARIES,
    LOSS_LIKE_BOUNDARIES,
    START,
    Stage,
    StageRule,
    chain_standard_errors,
    level_stages,
    llc_stages,
    log_axis,
    loss_like_stages,
    loss_noise,
    loss_stages,
    pooled_standard_error,
    standard_errors,
)

DEFAULT_RULE = StageRule()
RUN_BASIS = "run"
COUNT_PREFIX = "heads_"  # the basis of a count of heads holding a type: heads_induction
NO_EVENT = "no head's score changes by a quarter of its scale"
NO_EVENTS = (NO_EVENT, "no event coincides")  # what says a boundary names nothing, in stores made by this rule and earlier
NAMED_HEADS = 6  # heads a name lists per type and direction (then "N more")
NAMED_CHANGES = 2  # changes a boundary's name lists, the largest first
CHANGE_FLOOR = 0.25  # a change names a boundary when it is at least this share of its score's scale
CHANGE_SHARE = 0.5  # a head is named with the largest change when its own is at least this share of it
# The likelihood ratio (chi2 units) above which one curve's boundary alone can be a boundary of the run: about three
# times the largest ratio of any boundary that noise alone makes (noise-only curves of 14 to 67 checkpoints, the
# LLC's rule and the loss's, measured by tests/unit/test_run_stages.py and given in docs/stages.md). The margin allows
# for a curve's noise level being itself estimated (the chains' spread, the jitter): a ratio scales as 1 / sigma^2,
# so a bend of noise reaches it only where sigma is underestimated by a factor of about 1.8 or more.
LONE_SUPPORT = 100.0
# How the names read a type (analysis.findings.held_types.TYPE_LABELS says the same for the views).
TYPE_NAMES = {"previous_token": "previous-token", "induction": "induction", "sink": "sink", "current_token": "current-token"}


def curve_label(basis: str) -> str:
    """How a boundary's name and the views call a curve: ``LLC``, ``loss``, ``copy loss``, ``number of induction heads``."""
    if basis.startswith(COUNT_PREFIX):
        kind = basis[len(COUNT_PREFIX) :]
        return f"number of {TYPE_NAMES.get(kind, kind)} heads"
    return {"llc": "LLC", "loss": "loss", "copy_loss": "copy loss", RUN_BASIS: "run"}.get(basis, basis)


def count_stages(
    steps: np.ndarray, count: np.ndarray, rule: StageRule = DEFAULT_RULE, *, basis: str
) -> tuple[list[Stage], float]:
    """Stages of the number of heads holding one type: the LLC's rule with the count's noise, the jitter of its
    second differences (`analysis.stages.curve.loss_noise`) floored at ``rule.count_noise`` heads (a count moves by whole
    heads: one head that joins or leaves between two checkpoints is within the noise at k = 3, three are not).

    Returns:
        The stages (boundaries named ``number of induction heads starts rising``, ...) and the noise used.
    """
    noise = loss_noise(count)
    sigma = max(noise if np.isfinite(noise) else 0.0, rule.count_noise)
    names = {key: name.format(c=curve_label(basis)) for key, name in LEVEL_BOUNDARIES.items()}
    return level_stages(np.asarray(steps, np.int64), np.asarray(count, np.float64), sigma, rule, names=names), sigma


def copy_loss_stages(steps: np.ndarray, copy_loss: np.ndarray, rule: StageRule = DEFAULT_RULE) -> tuple[list[Stage], float]:
    """Stages of the probe's copy loss: the loss's rule and noise model, boundaries named ``copy loss drop begins``."""
    noise = loss_noise(copy_loss)
    sigma = max(noise if np.isfinite(noise) else 0.0, 1e-6 * float(np.ptp(copy_loss)), 1e-12)
    names = {key: name.format(c="copy loss") for key, name in LOSS_LIKE_BOUNDARIES.items()}
    return loss_like_stages(np.asarray(steps, np.int64), np.asarray(copy_loss, np.float64), sigma, rule, names=names), sigma


@dataclass(frozen=True)
class Support:
    """One curve's boundary that supports a boundary of the run: the curve's basis, the boundary's name, its step,
    its likelihood ratio (`analysis.stages.curve.boundary_evidence`; NaN when unknown) and its uncertainty (the
    first and last checkpoint its cut could sit at; -1 when unknown)."""

    basis: str
    kind: str
    step: int
    strength: float = float("nan")
    low: int = -1
    high: int = -1

    def text(self) -> str:
        return f"{self.kind} (step {self.step:,})"


@dataclass(frozen=True)
class RunBoundary:
    """One boundary of the run.

    Attributes:
        step: the step of its best-supported boundary (`best_supported`): where the curves place the change most
            firmly, not the earliest of them.
        support: the curves' boundaries merged into it, by step.
        forms: what it is named after: what changes across it (`name_changes`), or `NO_EVENT`.
        low, high: its uncertainty, the first and last checkpoint of the span of its members' intervals, each
            reaching back at least to the checkpoint before the member's step (`group_interval`).
    """

    step: int
    support: tuple[Support, ...]
    forms: str
    low: int = -1
    high: int = -1

    def support_text(self) -> str:
        return "; ".join(s.text() for s in self.support)

    @property
    def first(self) -> int:
        """The earliest step among its supporting boundaries (the group's range is ``first`` to ``last``)."""
        return min(s.step for s in self.support)

    @property
    def last(self) -> int:
        return max(s.step for s in self.support)


def best_supported(group: tuple[Support, ...]) -> Support:
    """The boundary of a merged group that stands for it: the one whose step the group's boundaries agree on most,
    by the summed likelihood ratio of every boundary of the group whose uncertainty holds that step (a boundary
    without one holds its own step only); ties to the largest ratio of its own, then the earlier. Not the earliest:
    a group's first boundary is often a faint bend of one curve just before the change the others see.
    """

    def strength(s: Support) -> float:
        return s.strength if np.isfinite(s.strength) else 0.0

    def holds(s: Support, step: int) -> bool:
        return (s.low <= step <= s.high) if s.low >= 0 else step == s.step

    def agreement(step: int) -> float:
        return sum(strength(s) for s in group if holds(s, step))

    return max(group, key=lambda c: (agreement(c.step), strength(c), -c.step))


def stands(group: tuple[Support, ...]) -> bool:
    """Whether a merged group is a boundary of the run: its boundaries come from at least two curves, or its one
    curve's strongest boundary has a likelihood ratio above `LONE_SUPPORT` (module docstring)."""
    if len({s.basis for s in group}) >= 2:
        return True
    return max((s.strength for s in group if np.isfinite(s.strength)), default=0.0) > LONE_SUPPORT


def group_interval(group: tuple[Support, ...], grid: np.ndarray) -> tuple[int, int]:
    """Where a merged group's change could lie, as checkpoints of ``grid``: from the first to the last of its members'
    intervals (a member without one: its own step), each reaching back at least to the checkpoint before the member's
    step, since a change seen first at a checkpoint happened somewhere after the one before it (the first checkpoint
    has none before it)."""
    lows, highs = [], []
    for s in group:
        low, high = (s.low, s.high) if s.low >= 0 else (s.step, s.step)
        i = int(np.searchsorted(grid, s.step))
        lows.append(min(low, int(grid[max(i - 1, 0)])))
        highs.append(max(high, s.step))
    return min(lows), max(highs)


def merge_boundaries(stages: dict[str, list[Stage]], grid: np.ndarray, *, merge: int) -> list[tuple[Support, ...]]:
    """The curves' boundaries grouped into the run's (module docstring): a boundary joins the group before it when it
    is at most ``merge`` checkpoints of ``grid`` after that group's first boundary (a change between two checkpoints
    shows at either).

    Args:
        stages: basis -> its stages (`analysis.stages.curve.Stage`; the first stage's start is no boundary).
        grid: the checkpoints, increasing (every curve's steps are among them).
        merge: the largest distance, in checkpoints, within one group.

    Returns:
        The groups in order of step, each its boundaries by step then basis.
    """
    found = sorted(
        (
            Support(basis, s.boundary, s.start_step, s.evidence, s.low_step, s.high_step)
            for basis, rows in stages.items()
            for s in rows
            if s.index > 0
        ),
        key=lambda b: (b.step, b.basis),
    )
    index = {int(s): i for i, s in enumerate(grid)}
    groups: list[list[Support]] = []
    for b in found:
        if groups and index[b.step] - index[groups[-1][0].step] <= merge:
            groups[-1].append(b)
        else:
            groups.append([b])
    return [tuple(g) for g in groups]


@dataclass(frozen=True)
class HeadScores:
    """One per-head score over training that names a boundary by its change across it.

    Attributes:
        label: how a name calls it (``induction scores``, ``ablation effects``).
        steps: the checkpoints it is stored at, increasing, shape (S,).
        values: shape (S, n_layers, n_heads).
        scale: the unit its changes are compared in: a type's threshold; the largest ablation effect of the run.
    """

    label: str
    steps: np.ndarray
    values: np.ndarray
    scale: float


def _at(scores: HeadScores, step: int) -> np.ndarray:
    """Each head's score at the last checkpoint at or before ``step`` where it has one (the first checkpoint's before
    any), (n_layers, n_heads); NaN for a head without a value up to there."""
    i = max(int(np.searchsorted(scores.steps, step, side="right")) - 1, 0)
    values = scores.values[: i + 1]  # (i + 1, n_layers, n_heads)
    held = np.isfinite(values)
    last = np.where(held.any(axis=0), i - np.argmax(held[::-1], axis=0), 0)  # (n_layers, n_heads)
    out = np.take_along_axis(values, last[None], axis=0)[0]
    return np.where(held.any(axis=0), out, np.nan)


def _heads_text(heads: list[tuple[int, int]]) -> str:
    """``L1 H0, H1, H3; L0 H2``: heads grouped by layer, in the order given by layer."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    return ", ".join(f"L{layer} " + ", ".join(f"H{h}" for h in sorted(hs)) for layer, hs in by_layer.items())


def name_changes(start: int, end: int, scores: list[HeadScores]) -> list[tuple[float, str]]:
    """What changes across a boundary: per score and direction, the heads whose score changes most from ``start``
    (the boundary) to ``end`` (the next boundary, or the last checkpoint), in the stage the boundary opens.

    A head's change is ``score(end) - score(start)``, each its last value at or before that step (`_at`); a head
    without a value there is left out. A score and direction count when the largest change of a head
    in that direction is at least `CHANGE_FLOOR` of the score's ``scale`` (a type's threshold: a rise that stays under
    the threshold counts); the heads named are those whose change is at least `CHANGE_SHARE` of that largest one, at
    most `NAMED_HEADS` of them (then ``N more``), with the mean of their scores at ``start`` and at ``end``:
    ``induction scores rise in L1 H0, H1, H3, H4, H7: 0.03 -> 0.18``.

    Returns:
        (the largest change in units of its scale, the text) per score and direction that counts, largest first.
    """
    parts = []
    for score in scores:
        before, after = _at(score, start), _at(score, end)
        delta = after - before  # (n_layers, n_heads)
        for sign, verb in ((1.0, "rise"), (-1.0, "fall")):
            finite = np.isfinite(delta)  # a head without a value at either end is left out
            largest = float(np.max(sign * delta[finite])) if finite.any() else 0.0
            if not (np.isfinite(largest) and score.scale > 0 and largest >= CHANGE_FLOOR * score.scale):
                continue
            picked = np.argwhere(finite & (sign * np.nan_to_num(delta) >= CHANGE_SHARE * largest))  # (m, 2) layer, head
            order = np.argsort(-(sign * delta)[picked[:, 0], picked[:, 1]], kind="stable")
            picked = picked[order]
            shown = sorted((int(a), int(b)) for a, b in picked[:NAMED_HEADS])
            more = f", {len(picked) - NAMED_HEADS} more" if len(picked) > NAMED_HEADS else ""
            was = float(np.mean(before[picked[:, 0], picked[:, 1]]))
            now = float(np.mean(after[picked[:, 0], picked[:, 1]]))
            text = f"{score.label} {verb} in {_heads_text(shown)}{more}: {was:.2g} -> {now:.2g}"
            parts.append((largest / score.scale, text))
    return sorted(parts, key=lambda p: -p[0])


def boundary_name(start: int, end: int, scores: list[HeadScores]) -> str:
    """A boundary's name: the changes across it (`name_changes`), at most `NAMED_CHANGES`, or `NO_EVENT`."""
    parts = name_changes(start, end, scores)
    return "; ".join(text for _, text in parts[:NAMED_CHANGES]) or NO_EVENT


def run_stages_from(
    curves: dict[str, tuple[np.ndarray, np.ndarray, list[Stage]]],
    scores: list[HeadScores],
    rule: StageRule = DEFAULT_RULE,
    *,
    primary: str,
) -> tuple[list[Stage], list[RunBoundary]]:
    """The run's stages between its merged, named boundaries: each group of the curves' boundaries
    (`merge_boundaries`) that `stands` is one boundary of the run at its best-supported member's step
    (`best_supported`), with the span of its members' intervals (`group_interval`), named by what changes across it
    (`boundary_name`).

    Args:
        curves: basis -> (steps, values, stages) of every curve read.
        scores: the per-head scores that name the boundaries (each type's score; the ablation effect).
        rule: the parameters (``merge``).
        primary: the curve whose trend and values each run stage reports (the LLC when it has stages, else the loss).

    Returns:
        The run's stages (``boundary``: what the boundary is named after) and its boundaries, in order.
    """
    grid = np.unique(np.concatenate([np.asarray(c[0], np.int64) for c in curves.values()]))
    groups = [g for g in merge_boundaries({b: c[2] for b, c in curves.items()}, grid, merge=rule.merge) if stands(g)]
    while True:
        kept = [best_supported(g) for g in groups]
        edges = [int(grid[0]), *[k.step for k in kept], int(grid[-1])]
        boundaries = [
            RunBoundary(k.step, g, boundary_name(a, b, scores), *group_interval(g, grid))
            for g, k, a, b in zip(groups, kept, edges[1:-1], edges[2:], strict=True)
        ]
        # A boundary one curve alone sees, across which no head's score changes, is that curve's bend (its own basis
        # keeps it), not the run's, however strong: dropped, the weakest first, and the names read again over the
        # longer stage.
        lone = [i for i, b in enumerate(boundaries) if b.forms == NO_EVENT and len({s.basis for s in b.support}) < 2]
        if not lone:
            break
        groups.pop(min(lone, key=lambda i: best_supported(groups[i]).strength))
    steps, values, stages = curves[primary]
    u = log_axis(steps)
    out = []
    for index, (a, b) in enumerate(pairwise(edges)):
        mid = (log_axis(np.array([a]))[0] + log_axis(np.array([b]))[0]) / 2
        trend = next((s.trend for s in stages if log_axis(np.array([s.end_step]))[0] >= mid), stages[-1].trend)
        start, end = (float(np.interp(log_axis(np.array([x]))[0], u, values)) for x in (a, b))
        out.append(
            Stage(
                index=index,
                start_step=a,
                end_step=b,
                trend=trend,
                start_value=start,
                end_value=end,
                change=end - start,
                change_se=float("nan"),
                boundary=START if index == 0 else boundaries[index - 1].forms,
            )
        )
    return out, boundaries


@dataclass(frozen=True)
class RunStages:
    """A run's stages on every curve read, and the run's own (``meta.json`` ``stages``).

    Attributes:
        llc: stages of the whole-model LLC (empty: no LLC, or too few estimates).
        loss: stages of the loss (empty: no eval loss, or too few checkpoints).
        primary: the basis the dashboard shades: ``run`` when any curve has stages, else None.
        meta: the rule, its parameters, the noise levels and checkpoints used, and notes.
        loss_steps, loss_values: the loss curve (to report each stage's loss change).
        behaviour: the behavioural curves' stages (``copy_loss``, ``heads_<type>``), by basis.
        run: the run's stages, between its merged boundaries (empty when no curve has stages).
        boundaries: the run's boundaries, one per stage of ``run`` after the first.
    """

    llc: list[Stage]
    loss: list[Stage]
    primary: str | None
    meta: dict
    loss_steps: np.ndarray
    loss_values: np.ndarray
    behaviour: dict[str, list[Stage]] = field(default_factory=dict)
    run: list[Stage] = field(default_factory=list)
    boundaries: list[RunBoundary] = field(default_factory=list)

    def bases(self) -> dict[str, list[Stage]]:
        """Every basis with its stages (the run's first), as stages.parquet holds them."""
        return {RUN_BASIS: self.run, "llc": self.llc, "loss": self.loss, **self.behaviour}

    def loss_change(self, stage: Stage) -> float:
        """Eval loss at the stage's end minus at its start (NaN without the loss at both)."""
        where = {int(s): float(v) for s, v in zip(self.loss_steps, self.loss_values, strict=True)}
        a, b = where.get(stage.start_step), where.get(stage.end_step)
        return float("nan") if a is None or b is None else b - a


def _wide(store, frame, column: str) -> tuple[np.ndarray, np.ndarray]:  # store: analysis.store.Store
    """One per-head column of a frame keyed by step, layer and head, as (steps, values (S, n_layers, n_heads))."""
    wide = frame.pivot_table(index="step", columns=["layer", "head"], values=column).sort_index()
    steps = wide.index.to_numpy(np.int64)
    values = np.full((len(steps), store.n_layers, store.n_heads), np.nan)  # (S, n_layers, n_heads)
    for (layer, head), series in wide.items():
        values[:, int(layer), int(head)] = series.to_numpy(np.float64)
    return steps, values


def type_scores(store) -> list[HeadScores]:  # store: analysis.store.Store
    """Each head type's score over training (head_types.parquet ``score``), its scale the type's threshold
    (meta.json ``types``; the score's largest value over the run where the record lacks it)."""
    from headwatch.analysis.store.lenses.types import ATTENTION_TYPES, HEAD_TYPES_TABLE

    frame = store.frame(HEAD_TYPES_TABLE, columns=["score"])
    if frame is None or not len(frame):
        return []
    # the attention types, decided at every checkpoint (multigram and other heads only at the checkpoints whose
    # tokens in context are kept, chosen from these stages; their scores are in nats, which ablation_scores reads)
    frame = frame[frame["type"].isin(ATTENTION_TYPES)]
    rules = (store.meta.types or {}).get("types") or {}
    out = []
    for kind in sorted(frame["type"].unique()):
        steps, values = _wide(store, frame[frame["type"] == kind], "score")
        threshold = float((rules.get(kind) or {}).get("threshold") or np.nanmax(np.abs(values)))
        out.append(HeadScores(f"{TYPE_NAMES.get(kind, kind.replace('_', '-'))} scores", steps, values, threshold))
    return out


# The ablation lens's columns read as what changes across a boundary (where the store has ablation.parquet), and how
# a name calls them.
ABLATION_EFFECTS = {"text_increase": "ablation effects on the text", "probe_increase": "ablation effects on the probe"}


def ablation_scores(store) -> list[HeadScores]:  # store: analysis.store.Store
    """The loss increase when each head is mean-ablated (ablation.parquet's `ABLATION_EFFECTS` columns, where the store
    has the table and the lens is declared), each its scale the largest increase of any head at any checkpoint. Empty
    otherwise. A head without a row at a checkpoint is NaN there (`name_changes` leaves it out), never zero: a zero
    would read as a rise or fall it never made."""
    from headwatch.analysis.store.lenses.ablation import ABLATION

    if not store.has(ABLATION):
        return []
    wanted = list(ABLATION_EFFECTS)
    frame = store.frame(ABLATION, columns=[*wanted, "method"])
    if frame is None or not len(frame):
        return []
    # one method: the mean ablation where the store holds it (a store may add zero ablation beside it)
    methods = sorted(frame["method"].unique(), key=lambda m: (m != "mean", m))
    frame = frame[frame["method"] == methods[0]]
    out = []
    for column in wanted:
        steps, values = _wide(store, frame, column)
        keep = np.isfinite(values).any(axis=(1, 2))
        scale = float(np.nanmax(np.abs(values[keep]))) if keep.any() else 0.0
        if scale > 0:
            out.append(HeadScores(ABLATION_EFFECTS[column], steps[keep], values[keep], scale))  # NaN: no value there
    return out


HELD_OUT = "held-out text"


def llc_source(store) -> tuple[dict[str, int | str], str]:  # store: analysis.store.Store
    """Which whole-model LLC rows the stages read, and the distribution they were estimated under, in words.

    llc.parquet keys its rows by the distribution the SGLD loss was taken on (its ``data`` column,
    `analysis.store.lenses.llc.LLC_DATA_COLUMN`); the stages read the rows a reader shows by default
    (`analysis.store.lenses.llc.default_llc_data`): the run's training distribution (``train``, the weight-refined
    LLC) where the store holds it, else the held-out text (every estimate of a store written before distributions
    were named, as meta.json ``llc`` ``evaluation`` says), else the first held.

    Returns:
        The ``at`` key for `analysis.store.reader.Store.dense` and the distribution's name in words.
    """
    from headwatch.analysis.store.lenses.llc import (
        DEFAULT_LLC_DATA,
        LLC,
        LLC_DATA_COLUMN,
        LLC_WHOLE_MODEL,
        STORED_BEFORE_DATA,
        data_records,
        default_llc_data,
    )

    keys = store.read(LLC, columns=[])
    name = default_llc_data(keys) if keys is not None else STORED_BEFORE_DATA
    at: dict[str, int | str] = dict(LLC_WHOLE_MODEL) | {LLC_DATA_COLUMN: name}
    record = data_records(store.meta.llc).get(name) or {}
    if name == DEFAULT_LLC_DATA:
        return at, f"the run's training distribution ({record.get('description') or name})"
    if name == STORED_BEFORE_DATA:
        text = ((store.meta.llc or {}).get("evaluation") or {}).get("text")
        return at, f"{HELD_OUT} ({text})" if text else HELD_OUT
    return at, f"{record.get('description') or name} (llc.parquet holds no estimate under the training distribution)"


def store_stages(store, rule: StageRule = DEFAULT_RULE) -> RunStages:  # store: analysis.store.Store
    """The stages of a store's run, from its llc.parquet (whole-model rows; llc_chains.parquet for the
    spread and flags when present), eval_loss.parquet (the loss and the probe's copy loss) and head_types.parquet /
    head_emergence.parquet (the counts of heads per type, the emergence steps that name the boundaries).

    Raises:
        StoreError: a table is unreadable.
    """
    from headwatch.analysis.llc.diagnostics import store_flags
    from headwatch.analysis.stages import curve as stage_rule
    from headwatch.analysis.store.lenses.attention import EVAL_LOSS
    from headwatch.analysis.store.lenses.llc import LLC, LLC_CHAINS
    from headwatch.analysis.store.lenses.types import ATTENTION_TYPES, HEAD_TYPES_TABLE

    notes: list[str] = []
    meta: dict = {
        "rule": (stage_rule.__doc__ or "").split("\n\n", 1)[1].strip() + "\n\n" + (__doc__ or "").split("\n\n", 1)[1].strip(),
        "parameters": rule.as_dict(),
        "axis": "log10(1 + step)",
    }
    curves: dict[str, tuple[np.ndarray, np.ndarray, list[Stage]]] = {}
    llc: list[Stage] = []
    llc_meta: dict = {"present": store.has(LLC)}
    if store.has(LLC):
        at, distribution = llc_source(store)
        llc_meta["distribution"] = distribution
        values = store.require(LLC, "llc", at=at)
        keep = np.isfinite(values)
        if store.has(LLC_CHAINS):
            se = chain_standard_errors(store.require(LLC_CHAINS, "llc", at=at))
            llc_meta["spread_from"] = "llc_chains.parquet: sample standard deviation of the chains' estimates / sqrt(C)"
            flags = store_flags(store)
            if flags is not None:
                diverged = keep & (flags[1] == "diverged")
                if diverged.any():
                    notes.append(f"left out diverged whole-model estimates at steps {store.steps[diverged].tolist()}")
                    llc_meta["left_out_diverged"] = [int(s) for s in store.steps[diverged]]
                keep &= ~diverged
        else:
            chains = int(((store.meta.llc or {}).get("sampler") or {}).get("chains") or 0)
            se = standard_errors(llc_std=store.require(LLC, "llc_std", at=at), chains=chains)
            llc_meta["spread_from"] = f"llc.parquet llc_std (population, {chains} chains) / sqrt(C - 1)"
        sigma = pooled_standard_error(se[keep])
        steps = store.steps[keep]
        llc_meta |= {"steps": [int(s) for s in steps], "pooled_se": sigma, "k_pooled_se": rule.k * sigma}
        if len(steps) < rule.min_points:
            notes.append(f"the whole-model LLC has {len(steps)} estimate(s); stages need {rule.min_points}")
        elif not (np.isfinite(sigma) and sigma > 0):
            notes.append("the whole-model LLC has no spread over chains; its stages cannot be told from noise")
        else:
            llc = llc_stages(steps, values[keep], sigma, rule)
            curves["llc"] = (steps, values[keep], llc)
            negative = steps[values[keep] < 0]
            if len(negative):
                # a note of meta.json ``stages.notes``: the stores' text, module path included (the rule is
                # `analysis.llc.diagnostics`)
                notes.append(
                    f"negative whole-model estimates at steps {negative.tolist()}: those checkpoints are not local minima "
                    "of the sampled loss, so the number there measures SGLD's descent (analysis/llc_diagnostics.py)"
                )
    else:
        notes.append("the store has no llc.parquet: stages are read from the loss and behaviour (run --lenses llc for the LLC's)")
    loss_meta: dict = {"present": store.has(EVAL_LOSS)}
    behaviour_meta: dict = {}
    loss: list[Stage] = []
    behaviour: dict[str, list[Stage]] = {}
    loss_steps = np.zeros(0, dtype=np.int64)
    loss_values = np.zeros(0)
    frame = store.frame(EVAL_LOSS)
    if frame is not None:
        finite = frame[np.isfinite(frame["loss"].to_numpy())]
        loss_steps, loss_values = finite["step"].to_numpy(np.int64), finite["loss"].to_numpy(np.float64)
        noise = loss_noise(loss_values)
        loss_meta |= {"steps": len(loss_steps), "noise": noise, "noise_from": "1.4826 MAD(second differences) / sqrt(6)"}
        loss = loss_stages(loss_steps, loss_values, rule, sigma=noise)
        if loss:
            curves["loss"] = (loss_steps, loss_values, loss)
        copy = frame[np.isfinite(frame["probe_copy_loss"].to_numpy())]
        if len(copy) >= rule.min_points:
            copy_steps, copy_values = copy["step"].to_numpy(np.int64), copy["probe_copy_loss"].to_numpy(np.float64)
            found, sigma = copy_loss_stages(copy_steps, copy_values, rule)
            behaviour["copy_loss"] = found
            curves["copy_loss"] = (copy_steps, copy_values, found)
            behaviour_meta["copy_loss"] = {"steps": len(copy_steps), "noise": sigma, "noise_from": loss_meta["noise_from"]}
        else:
            notes.append("eval_loss.parquet has no probe copy loss: no copy-loss stages (run --lenses attention again)")
    else:
        notes.append("the store has no eval_loss.parquet (run --lenses attention): no loss stages")
    scores: list[HeadScores] = []
    held = store.frame(HEAD_TYPES_TABLE, columns=["holds"])
    if held is not None and len(held):
        counts = held[held["holds"]].groupby(["type", "step"]).size()
        steps = np.sort(held["step"].unique()).astype(np.int64)
        # the attention types, decided at every checkpoint (multigram and other heads only where tokens in context
        # are kept, which are chosen from these stages)
        for kind in sorted(set(held["type"].unique()) & set(ATTENTION_TYPES)):
            count = (
                counts[kind].reindex(steps, fill_value=0).to_numpy(np.float64) if kind in counts.index else np.zeros(len(steps))
            )
            if not count.any() or len(steps) < rule.min_points:
                continue
            basis = COUNT_PREFIX + kind
            found, sigma = count_stages(steps, count, rule, basis=basis)
            behaviour[basis] = found
            curves[basis] = (steps, count, found)
            behaviour_meta[basis] = {
                "steps": len(steps),
                "noise": sigma,
                "noise_from": f"max(jitter, {rule.count_noise:g} heads)",
            }
        scores = type_scores(store)
    else:
        notes.append("the store has no head types (run the types lens): boundaries are not named by the heads' scores")
    scores += ablation_scores(store)
    run: list[Stage] = []
    boundaries: list[RunBoundary] = []
    shaded = "llc" if llc else ("loss" if loss else None)
    if shaded is not None:
        run, boundaries = run_stages_from(curves, scores, rule, primary=shaded)
    primary = RUN_BASIS if run else None
    if primary is None:
        notes.append("no stages: neither an LLC nor a loss curve with enough checkpoints")
    meta |= {
        "llc": llc_meta,
        "loss": loss_meta,
        "behaviour": behaviour_meta,
        "run": {
            "trend_from": shaded,
            "boundaries": [
                {"step": b.step, "low": b.low, "high": b.high, "forms": b.forms, "support": [vars(s) for s in b.support]}
                for b in boundaries
            ],
        },
        "primary": primary,
        "notes": notes,
    }
    return RunStages(
        llc=llc,
        loss=loss,
        primary=primary,
        meta=meta,
        loss_steps=loss_steps,
        loss_values=loss_values,
        behaviour=behaviour,
        run=run,
        boundaries=boundaries,
    )
