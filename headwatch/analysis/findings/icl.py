"""The in-context-learning scores of a run as the views and ``headwatch report`` read them: where each score falls
most sharply, and the stage boundary at which the run's induction heads form, to read it beside.

An in-context-learning (ICL) score (Olsson et al. 2022; the refined-LLC study's Figure 10) is the loss at a late
position of a sequence minus the loss at an early one: negative once the model predicts later tokens better for
having seen the earlier ones. The losses lens stores two per checkpoint with their standard errors over sequences
(icl.parquet; docs/store.md): ``text`` on the held-out evaluation text, ``probe`` on the induction probe (the
second copy of a repeated random sequence against the first). This module only reads them and says where they fall;
it imports no plotting.

Sharpest fall: the pair of consecutive checkpoints (both with a finite score) between which the score falls fastest
per unit of ``log10(1 + step)``, the time axis the run's stages are read on (docs/stages.md), so that the dense early
checkpoints and the sparse late ones are weighed alike. None when the score never falls.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

INDUCTION_BOUNDARY = re.compile(r"\binduction heads? forms?\b")  # how stages.parquet names the stage induction heads open


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
    ``log10(1 + step)``.

    Args:
        steps: ``(S,)`` increasing training steps.
        score: ``(S,)`` the score at each (NaN where not computed).
        se: ``(S,)`` its standard error, or None.

    Returns:
        The `Fall`, or None when fewer than two checkpoints have a value or the score never falls.
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
    i = int(np.argmin(rates))
    if not rates[i] < 0:
        return None
    a, b = ok[i], ok[i + 1]
    return Fall(
        start=int(steps[a]),
        end=int(steps[b]),
        drop=float(drops[i]),
        se=float(math.hypot(errors[a], errors[b])),
        rate=float(rates[i]),
    )


def induction_boundary(stages: pd.DataFrame | None) -> int | None:
    """The step of the first stage boundary at which induction heads form: the start of the first stage whose
    ``boundary`` (stages.parquet, what forms in the stage it opens) names them; None without one."""
    if stages is None or stages.empty:
        return None
    for r in stages.sort_values("stage").itertuples(index=False):
        if int(r.stage) > 0 and INDUCTION_BOUNDARY.search(str(r.boundary)):
            return int(r.start_step)
    return None


def fall_sentence(name: str, fall: Fall | None, boundary: int | None, *, unit: str = "nats") -> str:
    """One sentence: where the score ``name`` falls most sharply, beside the induction boundary.

    ``The probe's ICL score falls most sharply over steps 1,300 → 1,400 (−1.29 ± 0.05 nats); induction heads form at
    the stage boundary at step 1,250, 50 steps before it starts.``
    """
    head = f"The {name} never falls" if fall is None else f"The {name} falls most sharply over {fall.text(unit)}"
    if boundary is None:
        return head + "; no stage boundary of this run names induction heads."
    if fall is None:
        return head + f"; induction heads form at the stage boundary at step {boundary:,}."
    if fall.start <= boundary <= fall.end:
        where = "within that interval"
    elif boundary < fall.start:
        where = f"{fall.start - boundary:,} steps before the fall's interval starts"
    else:
        where = f"{boundary - fall.end:,} steps after the fall's interval ends"
    return head + f"; induction heads form at the stage boundary at step {boundary:,}, {where}."
