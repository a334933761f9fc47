"""A model's geometry as the cost counts see it: layers, heads, widths, vocabulary, residual, MLP and key/value heads.

Each family's adapter reads it from a checkpoint's ``config.json`` (`families.family.Family.geometry`, asked for
through `families.registry.model_geometry`); ``headwatch plan`` counts a checkpoint's multiply-adds from it
(`precompute.costs`). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Geometry:
    """A model's geometry as the cost counts see it: layers, heads, widths, vocabulary, parallel residual, a gated
    MLP (three matrices, the llama family) and its key/value heads (fewer than the query heads under grouped-query
    attention; None: as many)."""

    n_layers: int
    n_heads: int
    d_model: int
    d_mlp: int
    vocab: int
    parallel: bool
    gated: bool = False
    kv_heads: int | None = None

    @property
    def dense(self) -> int:
        """A block's weight products per token: the attention's projections (Q and the output d_model^2 each, K and
        V d_model x their heads' width) and the MLP's two matrices (three gated)."""
        kv_width = (self.kv_heads or self.n_heads) * (self.d_model // self.n_heads)
        return 2 * self.d_model**2 + 2 * self.d_model * kv_width + self.mlp

    @property
    def mlp(self) -> int:
        return (3 if self.gated else 2) * self.d_model * self.d_mlp
