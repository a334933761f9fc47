"""Apertus: the family's adapter (`families.family.Family`), Qwen3's per-head QK-norm (`families.qwen3`) on Llama's
attention, with an ungated MLP.

- Attention (transformers' ``ApertusAttention``): ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` as Llama's,
  grouped-query K and V repeated per query head; ``q_norm`` and ``k_norm`` are RMSNorms over one head's ``d_head``
  coordinates (applied after the split into heads, before the rotary embedding), their gains folded into every
  head's rows of W_Q and W_K as Qwen3's, the per-token, per-head RMS left out. The block's norm before the attention
  is ``attention_layernorm`` (not folded, as every family's input norm); nothing normalises the attention's output,
  so W_OV is Llama's.
- Blocks: ``attn_q``, ``attn_k``, ``attn_v``, ``attn_out`` as Llama's; the MLP is ungated, ``mlp_in`` (``up_proj``)
  and ``mlp_out`` (``down_proj``), with the xIELU activation between them.
- Geometry: sequential residual, an MLP of two matrices, ``num_key_value_heads``.
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from typing import ClassVar

from headwatch.families.family import Patterns, tensor_pattern
from headwatch.families.llama import K_PROJ, O_PROJ, Q_PROJ, V_PROJ
from headwatch.families.qwen3 import Qwen3


class Apertus(Qwen3):
    name = "apertus"
    model_types: ClassVar[tuple[str, ...]] = ("apertus",)
    blocks: ClassVar[Patterns] = {
        "attn_q": Q_PROJ,
        "attn_k": K_PROJ,
        "attn_v": V_PROJ,
        "attn_out": O_PROJ,
        "mlp_in": tensor_pattern(r"layers\.(\d+)\.mlp\.up_proj\.weight"),
        "mlp_out": tensor_pattern(r"layers\.(\d+)\.mlp\.down_proj\.weight"),
    }
    gated_mlp = False


APERTUS = Apertus()
