"""GPT-2: the family's adapter (`families.family.Family`).

- Attention: ``attn.c_attn.weight`` is a Conv1D weight ``(d_model, 3 d_model)``; transposed, its rows are
  ``[Q | K | V]``, each head-major. ``attn.c_proj.weight`` is a Conv1D ``(n_heads d_head, d_model)``: its rows are
  the heads' inputs, so its head-h row block is ``W_O^T[h]`` as it stands.
- Blocks: ``attn_qkv`` (``attn.c_attn``), ``attn_out`` (``attn.c_proj``), ``mlp_in`` (``mlp.c_fc``), ``mlp_out``
  (``mlp.c_proj``), all Conv1D ``(in, out)``.
- Geometry: sequential residual, two MLP matrices (``n_inner``, else 4 d_model).
- Forward: learned positions, Conv1D MLP, the unembedding tied to ``wte`` where ``tie_word_embeddings``; only with
  ``scale_attn_weights`` and without ``scale_attn_by_inverse_layer_idx`` or cross-attention. devinterp's head mask
  is the head's Q, K, V columns of ``c_attn`` with their biases and its d_head rows of ``c_proj``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.families.family import (
    Family,
    ForwardConfig,
    ModelShape,
    Params,
    Patterns,
    Roles,
    Tensor,
    check_shape,
    tensor_pattern,
)

C_ATTN = tensor_pattern(r"h\.(\d+)\.attn\.c_attn\.weight")
C_PROJ = tensor_pattern(r"h\.(\d+)\.attn\.c_proj\.weight")


class Gpt2(Family):
    name = "gpt2"
    model_types = ("gpt2",)
    attention: ClassVar[Patterns] = {"c_attn": C_ATTN, "c_proj": C_PROJ}
    matrix_roles: ClassVar[Roles] = {"qk": ("c_attn",), "ov": ("c_attn", "c_proj")}
    blocks: ClassVar[Patterns] = {
        "attn_qkv": C_ATTN,
        "attn_out": C_PROJ,
        "mlp_in": tensor_pattern(r"h\.(\d+)\.mlp\.c_fc\.weight"),
        "mlp_out": tensor_pattern(r"h\.(\d+)\.mlp\.c_proj\.weight"),
    }
    devinterp_head_mask = True
    functional_forward = True
    batched_forward = True

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        (c_attn,) = tensors
        h, d, m = shape.n_heads, shape.d_head, shape.d_model
        check_shape(c_attn, (m, 3 * h * d), "c_attn.weight (Conv1D)")
        rows = c_attn.T  # (3 * n_heads * d_head, d_model): [Q | K | V]
        q, k, _ = rows.split(h * d, dim=0)
        return q.reshape(h, d, m), k.reshape(h, d, m)  # (n_heads, d_head, d_model)

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        c_attn, c_proj = tensors
        h, d, m = shape.n_heads, shape.d_head, shape.d_model
        check_shape(c_attn, (m, 3 * h * d), "c_attn.weight (Conv1D)")
        check_shape(c_proj, (h * d, m), "attn.c_proj.weight (Conv1D)")
        v = c_attn.T.split(h * d, dim=0)[2].reshape(h, d, m)  # (n_heads, d_head, d_model)
        o_t = c_proj.reshape(h, d, m)  # Conv1D (in, out): rows are the heads' inputs, i.e. W_O^T
        return o_t, v

    # ------------------------------------------------------------------ the functional forward

    dropouts = ("resid_pdrop", "embd_pdrop", "attn_pdrop")
    layer_prefix = "transformer.h.{layer}."
    attention_norm = "ln_1"
    mlp_norm = "ln_2"
    final_norm = "transformer.ln_f"
    mlp_projections = ("mlp.c_fc", "mlp.c_proj")
    conv1d = True
    token_embedding = "transformer.wte.weight"
    position_embedding = "transformer.wpe.weight"

    def check_forward(self, config: Mapping[str, Any]) -> None:
        if (
            config.get("scale_attn_by_inverse_layer_idx")
            or not config.get("scale_attn_weights", True)
            or config.get("add_cross_attention")
        ):
            raise UnknownArchitectureError(
                "the batched refined-LLC sampler implements GPT-2 with scale_attn_weights and without "
                "scale_attn_by_inverse_layer_idx or cross-attention; this checkpoint differs"
            )

    def forward_config(self, config: Any) -> ForwardConfig:
        return ForwardConfig(
            config.n_layer, config.n_head, config.n_embd, config.layer_norm_epsilon, config.activation_function, False
        )

    def head_parameter_names(self, layer: int) -> tuple[str, ...]:
        p = self.layer_prefix.format(layer=layer)
        return (p + "attn.c_attn.weight", p + "attn.c_attn.bias", p + "attn.c_proj.weight")

    def attention_weights(self, params: Params, layer: int, n_heads: int, d_head: int, d_model: int) -> Params:
        p, H, dh, d = self.layer_prefix.format(layer=layer), n_heads, d_head, d_model
        w = params[p + "attn.c_attn.weight"]  # (d_model, 3 d_model): x W, columns Q | K | V, each heads in order
        b = params[p + "attn.c_attn.bias"]  # (3 d_model,)
        w3 = w.reshape(d, 3, H, dh).permute(1, 2, 3, 0)  # (3, n_heads, d_head, d_model)
        b3 = b.reshape(3, H, dh)  # (3, n_heads, d_head)
        w_o = params[p + "attn.c_proj.weight"].reshape(H, dh, d).transpose(1, 2)  # rows h*dh.. read head h: (H, d, dh)
        b_o = params[p + "attn.c_proj.bias"]
        return {"W_q": w3[0], "W_k": w3[1], "W_v": w3[2], "b_q": b3[0], "b_k": b3[1], "b_v": b3[2], "W_o": w_o, "b_o": b_o}


GPT2 = Gpt2()
