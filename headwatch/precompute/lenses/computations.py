"""Every lens's compute side, by lens name: the class a run builds for each lens it computes.

A lens is declared once (`analysis.store.lenses`); its computation (`precompute.job.context.Computation`) is a class
of its module here whose ``lens`` is that declaration. `COMPUTATIONS` holds the built-in ones; a lens declared
elsewhere (a test's, a plugin's) joins with `joined`, which adds its declaration to `analysis.store.lenses.LENSES`
and its computation here for the ``with`` block. Importing this module imports torch (through the lenses'
modules): ``headwatch info`` and ``headwatch plan`` read the declarations alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from headwatch.analysis.store.lenses import LENSES
from headwatch.analysis.store.lenses.declaration import Lens
from headwatch.precompute.job.context import Computation
from headwatch.precompute.lenses.ablation import AblationComputation
from headwatch.precompute.lenses.attention import AttentionComputation
from headwatch.precompute.lenses.composition import CompositionComputation
from headwatch.precompute.lenses.embeddings import EmbeddingsComputation
from headwatch.precompute.lenses.essential import EssentialComputation
from headwatch.precompute.lenses.layers import LayersComputation
from headwatch.precompute.lenses.llc import LlcComputation
from headwatch.precompute.lenses.losses import LossesComputation
from headwatch.precompute.lenses.overlaps import OverlapsComputation
from headwatch.precompute.lenses.similarity import SimilarityComputation
from headwatch.precompute.lenses.stages import StagesComputation
from headwatch.precompute.lenses.types import TypesComputation

BUILT_IN: tuple[type[Computation], ...] = (
    AttentionComputation,
    LossesComputation,
    LlcComputation,
    OverlapsComputation,
    LayersComputation,
    CompositionComputation,
    SimilarityComputation,
    TypesComputation,
    EmbeddingsComputation,
    EssentialComputation,
    StagesComputation,
    AblationComputation,
)
COMPUTATIONS: dict[str, type[Computation]] = {computation.lens.name: computation for computation in BUILT_IN}
assert set(COMPUTATIONS) == {lens.name for lens in LENSES}, "a declared lens has no computation, or the reverse"


@contextmanager
def joined(computation: type[Computation]) -> Iterator[Lens]:
    """For the ``with`` block, the lens of ``computation`` (its ``lens``, declared elsewhere) is one of `LENSES`
    (`analysis.store.lenses.Lenses.joined`: its tables, its record, its options) and ``computation`` computes it.

    Raises:
        ValueError: a lens, table or record of its name is declared already.
    """
    with LENSES.joined(computation.lens) as lens:
        COMPUTATIONS[lens.name] = computation
        try:
            yield lens
        finally:
            del COMPUTATIONS[lens.name]
