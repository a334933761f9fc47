"""Llama-style models (Llama, Mistral, OLMo, Qwen2, SmolLM3): the family's adapter (`families.family.Family`).

SmolLM3's attention is Llama's tensors exactly (no QK-norm); its layers without the rotary embedding
(``no_rope_layers``) change nothing in W_QK, which is read before the rotary embedding in every layer.

- Attention: separate ``q_proj`` / ``k_proj`` (``(n_heads d_head, d_model)`` and ``(n_kv_heads d_head, d_model)``);
  under grouped-query attention K head ``j`` serves the ``n_heads / n_kv_heads`` consecutive query heads
  ``j*g .. j*g + g - 1``, so K is repeated per query head, and V likewise; ``o_proj`` is an ``nn.Linear``
  ``(d_model, n_heads d_head)``. d_head is the config's ``head_dim`` where it has one.
- Blocks: ``attn_q``, ``attn_k``, ``attn_v`` (``q_proj``, ``k_proj``, ``v_proj``, K and V with ``n_kv_heads``
  heads), ``attn_out`` (``o_proj``), ``mlp_gate`` (``gate_proj``), ``mlp_in`` (``up_proj``), ``mlp_out``
  (``down_proj``).
- Geometry: sequential residual, a gated MLP (three matrices), ``num_key_value_heads``.
- Forward: none for the batched refined-LLC sampler, which refuses these models by name; devinterp's head mask is
  not checked for them either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import Family, ModelShape, Patterns, Roles, Tensor, check_shape, tensor_pattern

Q_PROJ = tensor_pattern(r"layers\.(\d+)\.self_attn\.q_proj\.weight")
K_PROJ = tensor_pattern(r"layers\.(\d+)\.self_attn\.k_proj\.weight")
V_PROJ = tensor_pattern(r"layers\.(\d+)\.self_attn\.v_proj\.weight")
O_PROJ = tensor_pattern(r"layers\.(\d+)\.self_attn\.o_proj\.weight")


class Llama(Family):
    name = "llama"
    model_types: ClassVar[tuple[str, ...]] = ("llama", "mistral", "olmo", "qwen2", "smollm3")
    attention: ClassVar[Patterns] = {"q": Q_PROJ, "k": K_PROJ, "v": V_PROJ, "o": O_PROJ}
    matrix_roles: ClassVar[Roles] = {"qk": ("q", "k"), "ov": ("v", "o")}
    blocks: ClassVar[Patterns] = {
        "attn_q": Q_PROJ,
        "attn_k": K_PROJ,
        "attn_v": V_PROJ,
        "attn_out": O_PROJ,
        "mlp_gate": tensor_pattern(r"layers\.(\d+)\.mlp\.gate_proj\.weight"),
        "mlp_in": tensor_pattern(r"layers\.(\d+)\.mlp\.up_proj\.weight"),
        "mlp_out": tensor_pattern(r"layers\.(\d+)\.mlp\.down_proj\.weight"),
    }
    gated_mlp = True

    def kv_heads(self, config: Mapping[str, Any], n_heads: int) -> int:
        return int(config.get("num_key_value_heads") or n_heads)

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        q_proj, k_proj = tensors
        h, kv, d, m = shape.n_heads, shape.n_kv_heads, shape.d_head, shape.d_model
        check_shape(q_proj, (h * d, m), "q_proj.weight")
        check_shape(k_proj, (kv * d, m), "k_proj.weight")
        q = q_proj.view(h, d, m)  # (n_heads, d_head, d_model)
        k = k_proj.view(kv, d, m).repeat_interleave(h // kv, dim=0)  # (n_heads, d_head, d_model)
        return q, k

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        v_proj, o_proj = tensors
        h, kv, d, m = shape.n_heads, shape.n_kv_heads, shape.d_head, shape.d_model
        check_shape(v_proj, (kv * d, m), "v_proj.weight")
        check_shape(o_proj, (m, h * d), "o_proj.weight")
        v = v_proj.view(kv, d, m).repeat_interleave(h // kv, dim=0)  # (n_heads, d_head, d_model)
        o_t = o_proj.T.reshape(h, d, m)  # (n_heads, d_head, d_model)
        return o_t, v


LLAMA = Llama()
