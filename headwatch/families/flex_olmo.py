"""FlexOlmo: the family's adapter (`families.family.Family`), OLMo 2's attention (`families.olmo2`) with OLMoE's
mixture-of-experts MLP (`families.olmoe`).

- Attention (transformers' ``FlexOlmoAttention``): OLMo 2's tensors and norms: QK-norm over the whole projected
  width folded into W_Q and W_K, no norm before the attention, ``post_attention_layernorm`` on the attention's output
  folded into W_O's rows; per-token RMS left out.
- Blocks: the attention's four projections only, as OLMoE's (the experts' weights are not one per layer).
- Geometry: OLMoE's (the ``num_experts_per_tok`` active gated experts as one gated MLP).
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import Patterns
from headwatch.families.geometry import Geometry
from headwatch.families.olmo2 import Olmo2
from headwatch.families.olmoe import ATTENTION_BLOCKS, active_experts


class FlexOlmo(Olmo2):
    name = "flex_olmo"
    model_types: ClassVar[tuple[str, ...]] = ("flex_olmo",)
    blocks: ClassVar[Patterns] = ATTENTION_BLOCKS

    def geometry(self, shape: Any, config: Mapping[str, Any]) -> Geometry:
        return super().geometry(shape, active_experts(shape, config))


FLEX_OLMO = FlexOlmo()
