"""Qwen3: the family's adapter (`families.family.Family`), Llama's layout (`families.llama`) with QK-norm per head.

- Attention (transformers' ``Qwen3Attention``): ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` as Llama's,
  grouped-query K and V repeated per query head, ``head_dim`` from the config. ``q_norm`` and ``k_norm`` are
  RMSNorms over one head's ``d_head`` coordinates (gains ``(d_head,)``, shared by every head, after the split into
  heads and before the rotary embedding): their gains are folded into every head's rows of W_Q and W_K
  (``W_QK,h = (g_q * W_Q,h)^T (g_k * W_K,h)``), the per-token, per-head RMS left out
  (`families.family.scale_rows`). The block's input norm is before the attention, as Llama's; no norm on its output.
- Blocks, geometry: Llama's (sequential residual, gated MLP, ``num_key_value_heads``).
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from typing import ClassVar

from headwatch.families.family import ModelShape, Patterns, Roles, Tensor, check_shape, scale_rows, tensor_pattern
from headwatch.families.llama import K_PROJ, O_PROJ, Q_PROJ, V_PROJ, Llama

Q_NORM = tensor_pattern(r"layers\.(\d+)\.self_attn\.q_norm\.weight")
K_NORM = tensor_pattern(r"layers\.(\d+)\.self_attn\.k_norm\.weight")


class Qwen3(Llama):
    name = "qwen3"
    model_types: ClassVar[tuple[str, ...]] = ("qwen3",)
    attention: ClassVar[Patterns] = {"q": Q_PROJ, "k": K_PROJ, "q_norm": Q_NORM, "k_norm": K_NORM, "v": V_PROJ, "o": O_PROJ}
    matrix_roles: ClassVar[Roles] = {"qk": ("q", "k", "q_norm", "k_norm"), "ov": ("v", "o")}
    folded_norms = "QK-norm gains (per head) folded into W_Q, W_K: W_QK = (g_q * W_Q)ᵀ (g_k * W_K)"

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        q_proj, k_proj, q_norm, k_norm = tensors
        h, kv, d = shape.n_heads, shape.n_kv_heads, shape.d_head
        check_shape(q_norm, (d,), "q_norm.weight")
        check_shape(k_norm, (d,), "k_norm.weight")
        check_shape(q_proj, (h * d, shape.d_model), "q_proj.weight")
        check_shape(k_proj, (kv * d, shape.d_model), "k_proj.weight")
        # row head*d + i of a projection is coordinate i of its head: the gains repeated once per head
        return super().qk(shape, scale_rows(q_proj, q_norm.repeat(h)), scale_rows(k_proj, k_norm.repeat(kv)))


QWEN3 = Qwen3()
