"""The in-context-learning scores of a run as the views and ``headwatch report`` read them: where each score falls
most sharply, and the stage boundary at which the run's induction heads form, to read it beside.

An in-context-learning (ICL) score (Olsson et al. 2022; the refined-LLC study's Figure 10) is the loss at a late
position of a sequence minus the loss at an early one: negative once the model predicts later tokens better for
having seen the earlier ones. The losses lens stores two per checkpoint with their standard errors over sequences
(icl.parquet; docs/store.md): ``text`` on the held-out evaluation text, ``probe`` on the induction probe (the
second copy of a repeated random sequence against the first). This module only reads them and says where they fall;
it imports no plotting.

Sharpest fall: among the pairs of consecutive checkpoints (both with a finite score) between which the score drops
by more than ``NOISE_SE`` standard errors of the difference (the two scores' errors in quadrature), the one over
which it falls fastest per unit of ``log10(1 + step)``, the time axis the run's stages are read on (docs/stages.md),
so that the dense early checkpoints and the sparse late ones are weighed alike. None when no drop exceeds its noise:
a difference of two noisy scores is not read as a fall.

Induction boundary: stages.parquet names each boundary of the run's merged stages by what changes across it
(``induction scores rise in L1 H0, H5: 0.063 -> 0.19; previous-token scores rise in ...``, docs/stages.md). The
candidates are the boundaries whose name leads with a rise of induction scores; where head_emergence.parquet has
induction heads, the candidate nearest the first one's emergence step is taken, else the first candidate, and the
`Boundary` says which rule chose it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.findings.events import stage_bases, stage_rows
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.types import HEAD_EMERGENCE

INDUCTION_RISE = re.compile(r"^\s*induction scores? rises?\b")  # a boundary name that leads with an induction-score rise
NOISE_SE = 2.0  # a fall is a drop larger than this many standard errors of the difference
NO_FALL = f"has no fall beyond its noise (no drop between consecutive checkpoints exceeds {NOISE_SE:g} standard errors)"


@dataclass(frozen=True)
class Fall:
    """Where a score falls most sharply.

    Attributes:
        start, end: the two consecutive checkpoints (steps) between which it falls fastest.
        drop: the score at ``end`` minus the score at ``start`` (negative: a fall), in the score's unit.
        se: the standard error of ``drop`` (the two scores' errors in quadrature), or NaN without errors.
        rate: ``drop`` per unit of ``log10(1 + step)``.
    """

    start: int
    end: int
    drop: float
    se: float
    rate: float

    def text(self, unit: str = "nats") -> str:
        """``steps 1,300 → 1,400 (−1.29 ± 0.05 nats)``."""
        se = f" ± {self.se:.2g}" if math.isfinite(self.se) else ""
        drop = f"{self.drop:+.3g}".replace("-", "−")
        return f"steps {self.start:,} → {self.end:,} ({drop}{se} {unit})"


def sharpest_fall(steps: np.ndarray, score: np.ndarray, se: np.ndarray | None = None) -> Fall | None:
    """The steepest fall of ``score`` between consecutive checkpoints with finite values, per unit of
    ``log10(1 + step)``, among the drops larger than ``NOISE_SE`` standard errors of the difference (a pair whose
    errors are unknown is kept).

    Args:
        steps: ``(S,)`` increasing training steps.
        score: ``(S,)`` the score at each (NaN where not computed).
        se: ``(S,)`` its standard error, or None.

    Returns:
        The `Fall`, or None when fewer than two checkpoints have a value or no drop exceeds its noise.
    """
    steps = np.asarray(steps, dtype=np.float64)
    score = np.asarray(score, dtype=np.float64)
    errors = np.full(score.shape, np.nan) if se is None else np.asarray(se, dtype=np.float64)
    ok = np.flatnonzero(np.isfinite(score))
    if len(ok) < 2:
        return None
    t = np.log10(1.0 + steps[ok])  # (n,) the stages' time axis
    drops = np.diff(score[ok])  # (n - 1,)
    rates = drops / np.diff(t)
    diff_se = np.hypot(errors[ok[:-1]], errors[ok[1:]])  # (n - 1,) the difference's standard error
    beyond = (drops < 0) & ~(-drops <= NOISE_SE * diff_se)  # NaN errors: kept
    if not beyond.any():
        return None
    i = int(np.argmin(np.where(beyond, rates, np.inf)))
    a, b = ok[i], ok[i + 1]
    return Fall(start=int(steps[a]), end=int(steps[b]), drop=float(drops[i]), se=float(diff_se[i]), rate=float(rates[i]))


@dataclass(frozen=True)
class Boundary:
    """The stage boundary at which the run's induction heads form.

    Attributes:
        step: its step (the start of the stage it opens).
        name: its name in stages.parquet (what changes across it).
        why: which rule chose it among the boundaries led by an induction-score rise.
    """

    step: int
    name: str
    why: str


def induction_boundary(stages: pd.DataFrame | None, emergence: pd.DataFrame | None = None) -> Boundary | None:
    """The boundary of ``stages`` (the run's merged stages, stages.parquet) at which induction heads form.

    Args:
        stages: rows with ``stage``, ``start_step``, ``boundary`` (and ``basis``: only ``run`` rows are read when
            it is there).
        emergence: head_emergence.parquet (``type``, ``emergence_step``), or None.

    Returns:
        Among the boundaries (stage > 0) whose name leads with an induction-score rise, the one nearest the first
        induction head's emergence step when ``emergence`` has one (the earlier on a tie), else the first; None
        without a candidate.
    """
    if stages is None or stages.empty:
        return None
    if "basis" in stages.columns and (stages["basis"] == "run").any():
        stages = stages[stages["basis"] == "run"]
    rows = [
        (int(r.start_step), str(r.boundary))
        for r in stages.sort_values("stage").itertuples(index=False)
        if int(r.stage) > 0 and INDUCTION_RISE.search(str(r.boundary))
    ]
    if not rows:
        return None
    first = None
    if emergence is not None and not emergence.empty:
        steps = pd.to_numeric(emergence.loc[emergence["type"] == "induction", "emergence_step"], errors="coerce").dropna()
        first = int(steps.min()) if len(steps) else None
    if first is None:
        step, name = rows[0]
        return Boundary(step, name, "the first boundary led by a rise in induction scores")
    step, name = min(rows, key=lambda r: (abs(r[0] - first), r[0]))
    why = (
        f"of the {len(rows)} boundaries led by a rise in induction scores, the nearest to the first induction head's "
        f"emergence (step {first:,})"
        if len(rows) > 1
        else "the one boundary led by a rise in induction scores"
    )
    return Boundary(step, name, why)


def run_induction_boundary(store: Store, stages: pd.DataFrame | None = None) -> Boundary | None:
    """`induction_boundary` over the store's merged stages (stages.parquet basis ``run``; ``stages`` where it has
    none) and its head emergence."""
    named = stage_rows(store, basis="run") if "run" in stage_bases(store) else stages
    emergence = store.frame(HEAD_EMERGENCE) if store.has(HEAD_EMERGENCE) else None
    return induction_boundary(named, emergence)


def fall_sentence(name: str, fall: Fall | None, boundary: Boundary | None, *, unit: str = "nats") -> str:
    """One sentence: where the score ``name`` falls most sharply beyond its noise, beside the induction boundary.

    ``The probe ICL score falls most sharply over steps 1,300 → 1,400 (−1.29 ± 0.05 nats); induction heads form at
    the stage boundary at step 1,250 (...), 50 steps before the fall's interval starts.``
    """
    head = f"The {name} {NO_FALL}" if fall is None else f"The {name} falls most sharply over {fall.text(unit)}"
    if boundary is None:
        return head + "; no stage boundary of this run leads with a rise in induction scores."
    at = f"induction heads form at the stage boundary at step {boundary.step:,} ({boundary.why})"
    if fall is None:
        return head + f"; {at}."
    b = boundary.step
    if fall.start <= b <= fall.end:
        where = "within that interval"
    elif b < fall.start:
        where = f"{fall.start - b:,} steps before the fall's interval starts"
    else:
        where = f"{b - fall.end:,} steps after the fall's interval ends"
    return head + f"; {at}, {where}."
