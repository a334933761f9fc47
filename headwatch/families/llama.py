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
- Forward (`families.forward`, the ablation lens's): RMSNorm, the rotary embedding over the whole head (transformers'
  own module gives cos and sin, its scaling included), grouped-query attention (the per-head layout repeats each
  K and V head for the query heads it serves), a gated MLP ``down(act(gate x) * up x)``, biases where the
  checkpoint has them (Qwen2's Q, K, V), the tied or untied unembedding. OLMo (a LayerNorm without weights, clipped
  Q, K, V), SmolLM3 (layers without the rotary embedding) and a sliding window are refused by name. The batched
  refined-LLC sampler refuses these models (under grouped-query attention a head does not own its K and V), and
  devinterp's head mask is not checked for them.
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

    # ------------------------------------------------------------------ the functional forward

    functional_forward = True
    dropouts = ("attention_dropout",)
    layer_prefix = "model.layers.{layer}."
    attention_norm = "input_layernorm"
    mlp_norm = "post_attention_layernorm"
    final_norm = "model.norm"
    rms_norm = True
    mlp_projections = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    token_embedding = "model.embed_tokens.weight"

    def check_forward(self, config: Mapping[str, Any]) -> None:
        model_type = config.get("model_type")
        if model_type in ("olmo", "smollm3"):
            raise UnknownArchitectureError(
                f"the functional forward implements Llama, Mistral and Qwen2, not model_type {model_type!r} "
                "(OLMo's weightless LayerNorm and clipped Q, K, V; SmolLM3's layers without the rotary embedding)"
            )
        window = config.get("sliding_window")
        if window and (model_type != "qwen2" or config.get("use_sliding_window")):
            raise UnknownArchitectureError(
                f"the functional forward implements no sliding window (sliding_window {window}); this checkpoint has one"
            )

    def forward_config(self, config: Any) -> ForwardConfig:
        d_head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return ForwardConfig(
            config.num_hidden_layers,
            config.num_attention_heads,
            config.hidden_size,
            config.rms_norm_eps,
            config.hidden_act,
            False,
            d_head=int(d_head),
            n_kv_heads=int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads),
        )

    def rotary_embedding(self, model: Any) -> Any:
        return model.model.rotary_emb

    def head_parameter_names(self, layer: int) -> tuple[str, ...]:
        p = self.layer_prefix.format(layer=layer)
        return tuple(p + f"self_attn.{n}_proj.weight" for n in "qkvo")

    def attention_weights(self, params: Params, layer: int, n_heads: int, d_head: int, d_model: int) -> Params:
        p, H, dh, d = self.layer_prefix.format(layer=layer), n_heads, d_head, d_model
        q = params[p + "self_attn.q_proj.weight"]  # (H dh, d)
        k, v = params[p + "self_attn.k_proj.weight"], params[p + "self_attn.v_proj.weight"]  # (KV dh, d)
        kv = k.shape[0] // dh
        w = {
            "W_q": q.reshape(H, dh, d),
            "W_k": k.reshape(kv, dh, d).repeat_interleave(H // kv, dim=0),  # (H, dh, d): K head j serves j*g..j*g+g-1
            "W_v": v.reshape(kv, dh, d).repeat_interleave(H // kv, dim=0),
        }
        for n in "qkv":
            bias = params.get(p + f"self_attn.{n}_proj.bias")
            heads = H if n == "q" else kv
            w[f"b_{n}"] = (
                q.new_zeros(H, dh) if bias is None else bias.reshape(heads, dh).repeat_interleave(H // heads, dim=0)  # (H, dh)
            )
        w_o = params[p + "self_attn.o_proj.weight"]  # (d, H dh): columns h*dh.. read head h
        w["W_o"] = w_o.reshape(d, H, dh).transpose(0, 1)  # (H, d, dh)
        bias_o = params.get(p + "self_attn.o_proj.bias")
        w["b_o"] = w_o.new_zeros(d) if bias_o is None else bias_o
        return w


LLAMA = Llama()
