"""A checkpoint's per-head factors, checked finite.

Shared by the pass over each checkpoint (`precompute.job.work.checkpoint_work`) and the overlaps lens,
which reads checkpoints again for pairs it lacks (`precompute.lenses.overlaps.pair_vectors`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from headwatch.analysis.errors import CheckpointError
from headwatch.families.extract import extract_heads
from headwatch.families.family import ModelShape

if TYPE_CHECKING:
    from headwatch.precompute.settings import StoreSettings
    from headwatch.precompute.sources.source import Fetched

# The per-head factors a lens over head pairs reads: both products of every head.
BOTH_PRODUCTS = ("qk", "ov")


def checked_factors(
    shape: ModelShape, tensors: Mapping[str, torch.Tensor], matrices: tuple[str, ...]
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Every per-head factor pair of ``matrices`` (`families.extract.extract_heads`), all finite.

    Raises:
        CheckpointError: non-finite values, or shapes the extraction refuses.
    """
    factors = extract_heads(shape, tensors, matrices=matrices)  # (n_layers, n_heads, d_head, d_model) each
    names = {"qk": ("W_Q", "W_K"), "ov": ("W_O", "W_V")}
    for matrix, pair in factors.items():
        for name, w in zip(names[matrix], pair, strict=True):
            layer = first_non_finite(w)
            if layer is not None:
                raise CheckpointError(f"non-finite values in {name} of layer {layer}; the checkpoint is corrupt or diverged")
    return factors


def pair_scores(
    fetched: Fetched, shape: ModelShape, settings: StoreSettings, compute: Callable[..., torch.Tensor]
) -> torch.Tensor:
    """``compute(qk, ov, dtype=, device=, chunk_elements=)`` on a fetched checkpoint's checked factors of both
    products, under the store's spectrum dtype, device and chunk size (the composition and similarity lenses).

    Raises:
        CheckpointError: the factors are missing, misshapen or non-finite.
    """
    assert fetched.tensors is not None
    factors = checked_factors(shape, fetched.tensors, BOTH_PRODUCTS)
    return compute(
        factors["qk"],
        factors["ov"],
        dtype=getattr(torch, settings.spectrum_dtype),
        device=settings.device,
        chunk_elements=settings.chunk_elements,
    )


def first_non_finite(w: torch.Tensor) -> int | None:
    """The first index along ``w``'s first axis whose entries are not all finite, or None.

    One summing pass finds the candidates (a NaN or an infinity makes a sum non-finite; a
    sum of finite values can overflow only where they are huge), and an exact test of
    those candidates alone decides: many times faster than testing every entry.
    """
    suspect = (~torch.isfinite(w.flatten(1).sum(dim=1))).nonzero().flatten().tolist()
    return next((i for i in suspect if not bool(torch.isfinite(w[i]).all())), None)
