"""GPT-NeoX (Pythia): the family's adapter (`families.family.Family`).

- Attention: ``attention.query_key_value.weight`` is ``(3 d_model, d_model)`` interleaved per head: rows view as
  ``(n_heads, 3, d_head, d_model)`` with ``[h, 0]`` = Q, ``[h, 1]`` = K, ``[h, 2]`` = V (a flat ``chunk(3)``
  would mix heads). The output projection ``attention.dense.weight`` is an ``nn.Linear``
  ``(d_model, n_heads d_head)`` whose input columns are head-major.
- Blocks: ``attn_qkv`` (the fused ``attention.query_key_value``), ``attn_out`` (``attention.dense``), ``mlp_in``
  (``mlp.dense_h_to_4h``), ``mlp_out`` (``mlp.dense_4h_to_h``).
- Geometry: parallel residual unless ``use_parallel_residual`` is false (``x + attn(ln1 x) + mlp(ln2 x)``).
- Forward: rotary embedding on the first ``rotary_dims`` of each head (transformers' own module gives cos and
  sin), ``nn.Linear`` MLP, untied ``embed_out`` (``lm_head`` in newer checkpoints); devinterp's head mask is the
  head's interleaved Q, K, V rows with their biases and its d_head input columns of ``attention.dense``.
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

QKV = tensor_pattern(r"layers\.(\d+)\.attention\.query_key_value\.weight")
DENSE = tensor_pattern(r"layers\.(\d+)\.attention\.dense\.weight")


class GptNeoX(Family):
    name = "gpt_neox"
    model_types = ("gpt_neox",)
    attention: ClassVar[Patterns] = {"qkv": QKV, "dense": DENSE}
    matrix_roles: ClassVar[Roles] = {"qk": ("qkv",), "ov": ("qkv", "dense")}
    blocks: ClassVar[Patterns] = {
        "attn_qkv": QKV,
        "attn_out": DENSE,
        "mlp_in": tensor_pattern(r"layers\.(\d+)\.mlp\.dense_h_to_4h\.weight"),
        "mlp_out": tensor_pattern(r"layers\.(\d+)\.mlp\.dense_4h_to_h\.weight"),
    }
    devinterp_head_mask = True
    functional_forward = True
    batched_forward = True

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        (qkv,) = tensors
        h, d, m = shape.n_heads, shape.d_head, shape.d_model
        check_shape(qkv, (3 * h * d, m), "query_key_value.weight")
        per_head = qkv.view(h, 3, d, m)  # (n_heads, 3, d_head, d_model), interleaved per head
        return per_head[:, 0], per_head[:, 1]

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        qkv, dense = tensors
        h, d, m = shape.n_heads, shape.d_head, shape.d_model
        check_shape(qkv, (3 * h * d, m), "query_key_value.weight")
        check_shape(dense, (m, h * d), "attention.dense.weight")
        v = qkv.view(h, 3, d, m)[:, 2]  # (n_heads, d_head, d_model), interleaved per head
        o_t = dense.T.reshape(h, d, m)  # (n_heads, d_head, d_model): W_O[:, h]^T, head-major input columns
        return o_t, v

    def parallel_residual(self, config: Mapping[str, Any]) -> bool:
        return bool(config.get("use_parallel_residual", True))

    # ------------------------------------------------------------------ the functional forward

    dropouts = ("attention_dropout", "hidden_dropout")
    layer_prefix = "gpt_neox.layers.{layer}."
    attention_norm = "input_layernorm"
    mlp_norm = "post_attention_layernorm"
    final_norm = "gpt_neox.final_layer_norm"
    mlp_projections = ("mlp.dense_h_to_4h", "mlp.dense_4h_to_h")
    token_embedding = "gpt_neox.embed_in.weight"
    unembedding = ("lm_head.weight", "embed_out.weight")  # older GPT-NeoX checkpoints: embed_out

    def check_forward(self, config: Mapping[str, Any]) -> None:
        if not config.get("attention_bias", True):
            raise UnknownArchitectureError("the batched refined-LLC sampler implements GPT-NeoX with attention biases")

    def forward_config(self, config: Any) -> ForwardConfig:
        return ForwardConfig(
            config.num_hidden_layers,
            config.num_attention_heads,
            config.hidden_size,
            config.layer_norm_eps,
            config.hidden_act,
            bool(config.use_parallel_residual),
        )

    def rotary_embedding(self, model: Any) -> Any:
        return model.gpt_neox.rotary_emb

    def head_parameter_names(self, layer: int) -> tuple[str, ...]:
        p = self.layer_prefix.format(layer=layer)
        return (p + "attention.query_key_value.weight", p + "attention.query_key_value.bias", p + "attention.dense.weight")

    def attention_weights(self, params: Params, layer: int, n_heads: int, d_head: int, d_model: int) -> Params:
        p, H, dh, d = self.layer_prefix.format(layer=layer), n_heads, d_head, d_model
        w3 = params[p + "attention.query_key_value.weight"].reshape(H, 3, dh, d).transpose(0, 1)  # (3, H, dh, d)
        b3 = params[p + "attention.query_key_value.bias"].reshape(H, 3, dh).transpose(0, 1)  # (3, H, dh)
        w_o = params[p + "attention.dense.weight"].reshape(d, H, dh).transpose(0, 1)  # columns h*dh.. read head h: (H, d, dh)
        b_o = params[p + "attention.dense.bias"]
        return {"W_q": w3[0], "W_k": w3[1], "W_v": w3[2], "b_q": b3[0], "b_k": b3[1], "b_v": b3[2], "W_o": w_o, "b_o": b_o}


GPT_NEOX = GptNeoX()
