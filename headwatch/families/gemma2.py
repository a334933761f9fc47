"""Gemma 2: the family's adapter (`families.family.Family`).

- Attention: Llama's layout (`families.llama`: separate ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj``,
  grouped-query attention, the config's ``head_dim``), no QK-norm. The block normalises the attention's output
  before adding it to the residual stream: ``post_attention_layernorm``, an RMSNorm over d_model scaling by
  ``1 + w`` (Gemma's convention: the stored gain ``w`` is an offset from one). Its gains are folded into W_O:
  ``W_O' = diag(1 + w) W_O``, so ``W_OV,h = W_O'[:, h] W_V,h``; the per-token RMS of the summed attention output
  is left out, as the 1/sqrt(d_head) factor and the rotary embedding are.
- Scalars left out, like 1/sqrt(d_head): the attention scale ``query_pre_attn_scalar ** -0.5`` (in place of
  1/sqrt(d_head)) and the logit soft-capping ``attn_logit_softcapping * tanh(s / attn_logit_softcapping)``, a
  monotone map of each score, applied after the bilinear form W_QK gives.
- Blocks: Llama's (``attn_q``, ``attn_k``, ``attn_v``, ``attn_out``, ``mlp_gate``, ``mlp_in``, ``mlp_out``).
- Geometry: sequential residual, a gated MLP (three matrices), ``num_key_value_heads``.
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import Family, ModelShape, Patterns, Roles, Tensor, check_shape, tensor_pattern
from headwatch.families.llama import LLAMA

POST_ATTENTION_NORM = tensor_pattern(r"layers\.(\d+)\.post_attention_layernorm\.weight")


def fold_output_norm(shape: ModelShape, o_t: Tensor, gain: Tensor) -> Tensor:
    """``W_O^T`` ``(n_heads, d_head, d_model)`` with a Gemma RMSNorm's ``1 + w`` gains over d_model, applied to the
    attention's output, folded in; ``1 + w`` in float32, as Gemma's norm computes it."""
    check_shape(gain, (shape.d_model,), "post_attention_layernorm.weight")
    return o_t * (1 + gain.float())  # (n_heads, d_head, d_model): column i of W_O^T[h] scaled by 1 + w_i


class Gemma2(Family):
    name = "gemma2"
    model_types: ClassVar[tuple[str, ...]] = ("gemma2",)
    attention: ClassVar[Patterns] = {**LLAMA.attention, "o_norm": POST_ATTENTION_NORM}
    matrix_roles: ClassVar[Roles] = {"qk": ("q", "k"), "ov": ("v", "o", "o_norm")}
    blocks: ClassVar[Patterns] = LLAMA.blocks
    gated_mlp = True
    folded_norms = "the post-attention norm's gains (1 + w) folded into W_O"
    neutral_gain = 0.0  # 1 + w = 1

    def kv_heads(self, config: Mapping[str, Any], n_heads: int) -> int:
        return LLAMA.kv_heads(config, n_heads)

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        return LLAMA.qk(shape, *tensors)

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        v_proj, o_proj, o_norm = tensors
        o_t, v = LLAMA.ov(shape, v_proj, o_proj)
        return fold_output_norm(shape, o_t, o_norm), v


GEMMA2 = Gemma2()
