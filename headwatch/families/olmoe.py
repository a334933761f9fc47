"""OLMoE: the family's adapter (`families.family.Family`), OLMo 2's QK-norm (`families.olmo2`) on Llama's attention,
with a mixture-of-experts MLP.

- Attention (transformers' ``OlmoeAttention``): ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` as Llama's,
  grouped-query K and V repeated per query head; ``q_norm`` and ``k_norm`` are RMSNorms over the whole projected
  width (``(n_heads d_head,)``, ``(n_kv_heads d_head,)``), their gains folded into W_Q's and W_K's rows as OLMo 2's,
  the per-token RMS left out. The block's input norm is before the attention, as Llama's, and nothing normalises the
  attention's output, so W_OV is Llama's. A config's ``clip_qkv`` (a clamp of the normalised queries, keys and
  values in the forward pass) is not in the weights and is left out.
- Blocks: the attention's four projections only (``attn_q``, ``attn_k``, ``attn_v``, ``attn_out``). The MLP is
  ``num_experts`` gated experts per layer (``mlp.experts.<e>.gate_proj`` / ``up_proj`` / ``down_proj``) and a router
  (``mlp.gate``): a block role is one weight per layer, so the experts' weights are not among the blocks, and
  ``layers.parquet`` has no MLP rows for these models.
- Geometry: sequential residual; the MLP a token passes through is ``num_experts_per_tok`` gated experts of
  ``intermediate_size`` each, counted as one gated MLP of their summed width (the router's ``d_model x num_experts``
  product left out); ``num_key_value_heads``.
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import ModelShape, Patterns, Roles, Tensor
from headwatch.families.geometry import Geometry
from headwatch.families.llama import K_PROJ, O_PROJ, Q_PROJ, V_PROJ
from headwatch.families.olmo2 import K_NORM, Q_NORM, Olmo2

# the blocks of a mixture-of-experts family: the attention's projections (an expert's weights are not one per layer)
ATTENTION_BLOCKS: Patterns = {"attn_q": Q_PROJ, "attn_k": K_PROJ, "attn_v": V_PROJ, "attn_out": O_PROJ}


class Olmoe(Olmo2):
    name = "olmoe"
    model_types: ClassVar[tuple[str, ...]] = ("olmoe",)
    attention: ClassVar[Patterns] = {"q": Q_PROJ, "k": K_PROJ, "q_norm": Q_NORM, "k_norm": K_NORM, "v": V_PROJ, "o": O_PROJ}
    matrix_roles: ClassVar[Roles] = {"qk": ("q", "k", "q_norm", "k_norm"), "ov": ("v", "o")}
    blocks: ClassVar[Patterns] = ATTENTION_BLOCKS
    folded_norms = "QK-norm gains (over all heads' width) folded into W_Q, W_K: W_QK = (g_q * W_Q)ᵀ (g_k * W_K)"

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        # no output norm: Llama's cut, past OLMo 2's fold
        return super(Olmo2, self).ov(shape, *tensors)

    def geometry(self, shape: Any, config: Mapping[str, Any]) -> Geometry:
        return super().geometry(shape, active_experts(shape, config))


def active_experts(shape: Any, config: Mapping[str, Any], width: str = "intermediate_size") -> dict[str, Any]:
    """The config with ``intermediate_size`` the summed width of the ``num_experts_per_tok`` experts a token passes
    through (each ``config[width]`` wide), as the cost counts see a mixture of experts: one gated MLP."""
    per_expert = int(config.get(width) or config.get("intermediate_size") or 4 * shape.d_model)
    return {**config, "intermediate_size": int(config.get("num_experts_per_tok") or 1) * per_expert}


OLMOE = Olmoe()
