"""OLMo 2 and OLMo 3: the family's adapter (`families.family.Family`), Llama's layout (`families.llama`) with QK-norm
over the whole projected width and a norm on the attention's output.

- Attention (transformers' ``Olmo2Attention``, ``Olmo3Attention``: the same tensors; OLMo 3 adds sliding-window
  layers and per-layer-type rotary parameters, which the weights do not see): ``q_proj``, ``k_proj``, ``v_proj``,
  ``o_proj`` as Llama's, grouped-query K and V repeated per query head. ``q_norm`` and ``k_norm`` are RMSNorms over
  the whole projected width (``(n_heads d_head,)`` and ``(n_kv_heads d_head,)``, before the split into heads and
  before the rotary embedding): their gains are folded into W_Q's and W_K's rows (``W_QK = (g_q * W_Q)^T (g_k *
  W_K)``), the per-token RMS over all heads together left out (`families.family.scale_rows`).
- No norm before the attention: the block reads the residual stream itself. ``post_attention_layernorm``
  normalises the attention's output (``o_proj``'s, all heads summed) before it is added to the residual: its gains
  are folded into W_O's rows (``W_OV,h = diag(g_o) W_O[:, h] W_V,h``), its per-token RMS left out. (OLMo 2's
  ``post_feedforward_layernorm`` does the same to the MLP's output, which no per-head product reads.)
- Blocks, geometry: Llama's (sequential residual, gated MLP, ``num_key_value_heads``); the norms' gains are not
  block weights.
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from typing import ClassVar

from headwatch.families.family import ModelShape, Patterns, Roles, Tensor, check_shape, scale_rows, tensor_pattern
from headwatch.families.llama import K_PROJ, O_PROJ, Q_PROJ, V_PROJ, Llama

Q_NORM = tensor_pattern(r"layers\.(\d+)\.self_attn\.q_norm\.weight")
K_NORM = tensor_pattern(r"layers\.(\d+)\.self_attn\.k_norm\.weight")
OUTPUT_NORM = tensor_pattern(r"layers\.(\d+)\.post_attention_layernorm\.weight")


class Olmo2(Llama):
    name = "olmo2"
    model_types: ClassVar[tuple[str, ...]] = ("olmo2", "olmo3")
    attention: ClassVar[Patterns] = {
        "q": Q_PROJ,
        "k": K_PROJ,
        "q_norm": Q_NORM,
        "k_norm": K_NORM,
        "v": V_PROJ,
        "o": O_PROJ,
        "o_norm": OUTPUT_NORM,
    }
    matrix_roles: ClassVar[Roles] = {"qk": ("q", "k", "q_norm", "k_norm"), "ov": ("v", "o", "o_norm")}
    folded_norms = (
        "QK-norm gains (over all heads' width) folded into W_Q, W_K: W_QK = (g_q * W_Q)ᵀ (g_k * W_K); the "
        "attention-output norm's gains into W_O"
    )

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        q_proj, k_proj, q_norm, k_norm = tensors
        h, kv, d = shape.n_heads, shape.n_kv_heads, shape.d_head
        check_shape(q_norm, (h * d,), "q_norm.weight")
        check_shape(k_norm, (kv * d,), "k_norm.weight")
        check_shape(q_proj, (h * d, shape.d_model), "q_proj.weight")
        check_shape(k_proj, (kv * d, shape.d_model), "k_proj.weight")
        return super().qk(shape, scale_rows(q_proj, q_norm), scale_rows(k_proj, k_norm))

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        v_proj, o_proj, o_norm = tensors
        check_shape(o_norm, (shape.d_model,), "post_attention_layernorm.weight")
        check_shape(o_proj, (shape.d_model, shape.n_heads * shape.d_head), "o_proj.weight")
        return super().ov(shape, v_proj, scale_rows(o_proj, o_norm))


OLMO2 = Olmo2()
