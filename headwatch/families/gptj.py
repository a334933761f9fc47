"""GPT-J: the family's adapter (`families.family.Family`).

- Attention: separate ``attn.q_proj`` / ``attn.k_proj`` / ``attn.v_proj`` ``(d_model, d_model)`` without biases,
  under ``transformer.h.N``, each head-major (the model views their output as ``(n_heads, d_head)``);
  ``attn.out_proj`` is an ``nn.Linear`` ``(d_model, d_model)`` without bias whose input columns are head-major.
  The rotary embedding (GPT-J's interleaved pairs, on the first ``rotary_dim`` features of each head only) is left
  out, as for every family.
- Blocks: ``attn_q``, ``attn_k``, ``attn_v``, ``attn_out`` (``out_proj``), ``mlp_in`` (``mlp.fc_in``),
  ``mlp_out`` (``mlp.fc_out``).
- Geometry: parallel residual (``x + attn(ln_1 x) + mlp(ln_1 x)``: one LayerNorm feeds both), two MLP matrices
  (``n_inner``, else 4 d_model).
- Forward: none for the batched refined-LLC sampler, which refuses these models by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.families.family import Family, ModelShape, Patterns, Roles, Tensor, check_shape, tensor_pattern

Q_PROJ = tensor_pattern(r"h\.(\d+)\.attn\.q_proj\.weight")
K_PROJ = tensor_pattern(r"h\.(\d+)\.attn\.k_proj\.weight")
V_PROJ = tensor_pattern(r"h\.(\d+)\.attn\.v_proj\.weight")
OUT_PROJ = tensor_pattern(r"h\.(\d+)\.attn\.out_proj\.weight")


class GptJ(Family):
    name = "gptj"
    model_types = ("gptj",)
    attention: ClassVar[Patterns] = {"q": Q_PROJ, "k": K_PROJ, "v": V_PROJ, "o": OUT_PROJ}
    matrix_roles: ClassVar[Roles] = {"qk": ("q", "k"), "ov": ("v", "o")}
    blocks: ClassVar[Patterns] = {
        "attn_q": Q_PROJ,
        "attn_k": K_PROJ,
        "attn_v": V_PROJ,
        "attn_out": OUT_PROJ,
        "mlp_in": tensor_pattern(r"h\.(\d+)\.mlp\.fc_in\.weight"),
        "mlp_out": tensor_pattern(r"h\.(\d+)\.mlp\.fc_out\.weight"),
    }

    def _heads(self, shape: ModelShape, w: Tensor, what: str) -> Tensor:
        h, d, m = shape.n_heads, shape.d_head, shape.d_model
        check_shape(w, (h * d, m), what)
        return w.view(h, d, m)  # (n_heads, d_head, d_model): head-major rows

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        q_proj, k_proj = tensors
        return self._heads(shape, q_proj, "attn.q_proj.weight"), self._heads(shape, k_proj, "attn.k_proj.weight")

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        v_proj, out_proj = tensors
        h, d, m = shape.n_heads, shape.d_head, shape.d_model
        check_shape(out_proj, (m, h * d), "attn.out_proj.weight")
        o_t = out_proj.T.reshape(h, d, m)  # (n_heads, d_head, d_model): W_O[:, h]^T, head-major input columns
        return o_t, self._heads(shape, v_proj, "attn.v_proj.weight")

    def parallel_residual(self, config: Mapping[str, Any]) -> bool:
        return True


GPTJ = GptJ()
