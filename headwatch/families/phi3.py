"""Phi-3: the family's adapter (`families.family.Family`).

- Attention: one fused ``self_attn.qkv_proj.weight`` ``(n_heads d_head + 2 n_kv_heads d_head, d_model)`` whose
  rows are ``[Q; K; V]`` (not interleaved per head: the model slices its output at ``n_heads d_head`` and
  ``n_heads d_head + n_kv_heads d_head``), each head-major; under grouped-query attention K head ``j`` serves the
  query heads ``j*g .. j*g + g - 1`` (as `families.llama`). ``o_proj`` is an ``nn.Linear``
  ``(d_model, n_heads d_head)``. No QK-norm, no attention biases.
- Blocks: ``attn_qkv`` (the fused ``qkv_proj``), ``attn_out`` (``o_proj``), ``mlp_in`` (the fused
  ``gate_up_proj``, ``(2 d_mlp, d_model)``: the gate's rows then the up projection's, as stored, like the fused
  ``attn_qkv``), ``mlp_out`` (``down_proj``).
- Geometry: sequential residual, a gated MLP (counted as three matrices: gate, up, down), ``num_key_value_heads``.
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import Family, ModelShape, Patterns, Roles, Tensor, check_shape, tensor_pattern

QKV = tensor_pattern(r"layers\.(\d+)\.self_attn\.qkv_proj\.weight")
O_PROJ = tensor_pattern(r"layers\.(\d+)\.self_attn\.o_proj\.weight")


class Phi3(Family):
    name = "phi3"
    model_types = ("phi3",)
    attention: ClassVar[Patterns] = {"qkv": QKV, "o": O_PROJ}
    matrix_roles: ClassVar[Roles] = {"qk": ("qkv",), "ov": ("qkv", "o")}
    blocks: ClassVar[Patterns] = {
        "attn_qkv": QKV,
        "attn_out": O_PROJ,
        "mlp_in": tensor_pattern(r"layers\.(\d+)\.mlp\.gate_up_proj\.weight"),
        "mlp_out": tensor_pattern(r"layers\.(\d+)\.mlp\.down_proj\.weight"),
    }
    gated_mlp = True

    def kv_heads(self, config: Mapping[str, Any], n_heads: int) -> int:
        return int(config.get("num_key_value_heads") or n_heads)

    def _split(self, shape: ModelShape, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V, each ``(n_heads, d_head, d_model)`` (K and V repeated per query head)."""
        h, kv, d, m = shape.n_heads, shape.n_kv_heads, shape.d_head, shape.d_model
        check_shape(qkv, ((h + 2 * kv) * d, m), "qkv_proj.weight")
        q, k, v = qkv.split([h * d, kv * d, kv * d], dim=0)  # (h d, m), (kv d, m), (kv d, m)
        g = h // kv
        # each (n_heads, d_head, d_model); K and V head j repeated for query heads j g .. j g + g - 1
        return q.view(h, d, m), k.view(kv, d, m).repeat_interleave(g, dim=0), v.view(kv, d, m).repeat_interleave(g, dim=0)

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        (qkv,) = tensors
        q, k, _ = self._split(shape, qkv)
        return q, k

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        qkv, o_proj = tensors
        h, d, m = shape.n_heads, shape.d_head, shape.d_model
        check_shape(o_proj, (m, h * d), "o_proj.weight")
        v = self._split(shape, qkv)[2]
        return o_proj.T.reshape(h, d, m), v  # (n_heads, d_head, d_model): W_O[:, h]^T, head-major input columns


PHI3 = Phi3()
