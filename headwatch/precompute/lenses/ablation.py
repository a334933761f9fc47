"""The ablation lens's computation (`analysis.store.lenses.ablation` declares its tables).

This commit declares the lens; its batched computation follows in the next ones and refuses to run until then.
"""

from __future__ import annotations

from headwatch.analysis.store.lenses.ablation import ABLATION_LENS
from headwatch.precompute.job.context import BaseComputation, ComputationSetup


class AblationComputation(BaseComputation):
    """The ablation lens (not computable in this commit: refuses to run)."""

    lens = ABLATION_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        raise ValueError("--lenses ablation: its computation is not in this build yet; run without it")
