"""Gemma 3 (text): the family's adapter (`families.family.Family`).

- Attention: Gemma 2's (`families.gemma2`: Llama's tensors, the post-attention norm's ``1 + w`` gains folded
  into W_O, ``query_pre_attn_scalar`` and soft-capping left out as scalars) plus QK-norm **per head**:
  ``q_norm`` and ``k_norm`` are RMSNorms over each head's d_head features (one gain vector ``(d_head,)`` shared
  by the heads), applied after ``q_proj`` / ``k_proj`` and before the rotary embedding, scaling by ``1 + w``. Their
  gains are folded into W_Q and W_K: ``W_Q'[h] = diag(1 + w_q) W_Q[h]``, likewise K, so
  ``W_QK,h = W_Q'[h]^T W_K'[h]``; each query's and key's per-token, per-head RMS is left out, as 1/sqrt(d_head)
  and the rotary embedding are.
- Checkpoints: ``gemma3_text`` (the text-only 1B, ``Gemma3ForCausalLM``: ``model.layers.N...``) and ``gemma3``
  (the multimodal 4B and larger, ``Gemma3ForConditionalGeneration``): their sizes are under ``text_config``
  (`text_config`, with ``Gemma3TextConfig``'s defaults for the sizes it omits), their language model's tensors
  under ``language_model.`` (``model.language_model.layers.N...`` as transformers 5 saves them,
  ``language_model.model.layers.N...`` in older checkpoints: transformers' ``conversion_mapping`` renames the
  latter), beside a vision tower whose encoder layers also have ``self_attn.q_proj``: the patterns skip
  ``vision_tower.``.
- Blocks: Llama's. Geometry: sequential residual, a gated MLP. Forward: none for the batched refined-LLC sampler.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import ModelShape, Patterns, Roles, Tensor, check_shape
from headwatch.families.gemma2 import Gemma2

# Gemma3TextConfig's defaults (transformers 5.23, configuration_gemma3.py) for the sizes a multimodal
# config.json's text_config may omit (it lists what differs from them).
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
}


def text_pattern(name: str) -> re.Pattern[str]:
    """`families.family.tensor_pattern` for the language model's tensors only: any module prefix but the vision
    tower's (``vision_tower.`` or ``model.vision_tower.``)."""
    return re.compile(r"^(?!(?:model\.)?vision_tower\.)(?:.*\.)?" + name + "$")


def _attn(tensor: str) -> re.Pattern[str]:
    return text_pattern(r"layers\.(\d+)\.self_attn\." + tensor + r"\.weight")


def fold_head_norm(shape: ModelShape, w: Tensor, gain: Tensor, heads: int, what: str) -> Tensor:
    """A projection ``(heads d_head, d_model)`` as ``(heads, d_head, d_model)`` with a per-head Gemma RMSNorm's
    ``1 + w`` gains ``(d_head,)`` folded into each head's rows (``1 + w`` in float32, as the norm computes it)."""
    check_shape(gain, (shape.d_head,), what)
    return w.view(heads, shape.d_head, shape.d_model) * (1 + gain.float())[None, :, None]  # (heads, d_head, d_model)


class Gemma3(Gemma2):
    name = "gemma3"
    model_types: ClassVar[tuple[str, ...]] = ("gemma3_text", "gemma3")
    attention: ClassVar[Patterns] = {
        "q": _attn("q_proj"),
        "k": _attn("k_proj"),
        "q_norm": _attn("q_norm"),
        "k_norm": _attn("k_norm"),
        "v": _attn("v_proj"),
        "o": _attn("o_proj"),
        "o_norm": text_pattern(r"layers\.(\d+)\.post_attention_layernorm\.weight"),
    }
    matrix_roles: ClassVar[Roles] = {"qk": ("q", "k", "q_norm", "k_norm"), "ov": ("v", "o", "o_norm")}
    folded_norms = (
        "QK-norm gains (1 + w of q_norm, k_norm) folded into W_Q, W_K; the post-attention norm's gains (1 + w) into W_O"
    )
    blocks: ClassVar[Patterns] = {
        "attn_q": _attn("q_proj"),
        "attn_k": _attn("k_proj"),
        "attn_v": _attn("v_proj"),
        "attn_out": _attn("o_proj"),
        "mlp_gate": text_pattern(r"layers\.(\d+)\.mlp\.gate_proj\.weight"),
        "mlp_in": text_pattern(r"layers\.(\d+)\.mlp\.up_proj\.weight"),
        "mlp_out": text_pattern(r"layers\.(\d+)\.mlp\.down_proj\.weight"),
    }

    def text_config(self, config: Mapping[str, Any]) -> Mapping[str, Any]:
        if config.get("model_type") != "gemma3":
            return config
        return {**TEXT_DEFAULTS, **(config.get("text_config") or {}), "model_type": config["model_type"]}

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        q_proj, k_proj, q_norm, k_norm = tensors
        h, kv, d, m = shape.n_heads, shape.n_kv_heads, shape.d_head, shape.d_model
        check_shape(q_proj, (h * d, m), "q_proj.weight")
        check_shape(k_proj, (kv * d, m), "k_proj.weight")
        q = fold_head_norm(shape, q_proj, q_norm, h, "q_norm.weight")  # (n_heads, d_head, d_model)
        k = fold_head_norm(shape, k_proj, k_norm, kv, "k_norm.weight").repeat_interleave(h // kv, dim=0)  # likewise
        return q, k


GEMMA3 = Gemma3()
