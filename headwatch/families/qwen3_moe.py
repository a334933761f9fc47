"""Qwen3-MoE: the family's adapter (`families.family.Family`), Qwen3's attention (`families.qwen3`) with a
mixture-of-experts MLP.

- Attention (transformers' ``Qwen3MoeAttention``): Qwen3's tensors and per-head QK-norm, folded into W_Q and W_K;
  per-token RMS left out; no norm on the attention's output.
- Blocks: the attention's four projections only, as OLMoE's (the experts' weights, ``mlp.experts.<e>.*``, are not
  one per layer; the layers the config makes dense, ``mlp_only_layers`` or ``decoder_sparse_step``, are left out
  with them).
- Geometry: the ``num_experts_per_tok`` active experts of ``moe_intermediate_size`` as one gated MLP (dense layers
  counted as sparse ones).
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import Patterns
from headwatch.families.geometry import Geometry
from headwatch.families.olmoe import ATTENTION_BLOCKS, active_experts
from headwatch.families.qwen3 import Qwen3


class Qwen3Moe(Qwen3):
    name = "qwen3_moe"
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_moe",)
    blocks: ClassVar[Patterns] = ATTENTION_BLOCKS

    def geometry(self, shape: Any, config: Mapping[str, Any]) -> Geometry:
        return super().geometry(shape, active_experts(shape, config, "moe_intermediate_size"))


QWEN3_MOE = Qwen3Moe()
