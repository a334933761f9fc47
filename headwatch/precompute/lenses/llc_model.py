"""The language model as a pure function of its parameters, for the batched refined-LLC sampler.

`precompute.lenses.llc_sampler` moves one head's weights per lane, or every weight, and needs the loss
as a function of them that `torch.func.vmap` can batch over lanes. This module writes GPT-2's and
GPT-NeoX's forward pass (the families whose head masks `precompute.lenses.llc` knows) as functions of
a ``{name: tensor}`` dict named as the checkpoint's ``named_parameters()``, in one per-head layout:

    W_q, W_k, W_v: (n_heads, d_head, d_model)   q = x W_q^T + b_q
    b_q, b_k, b_v: (n_heads, d_head)
    W_o:           (n_heads, d_model, d_head)   attn = sum_h o_h W_o[h]^T + b_o
    b_o:           (d_model,)

The two families' quirks (GPT-2's Conv1D ``c_attn`` with Q | K | V columns, GPT-NeoX's
``query_key_value`` rows interleaved per head, its partial rotary embedding and parallel residual)
are read here and nowhere else; a head's weights in this layout are exactly the entries devinterp's
``create_param_masks(model, "l{layer}h{head}")`` moves (tests/integration/test_llc_sampler.py checks
the logits against the model's own and the head against devinterp's mask).

The identity the sampler relies on: a layer's attention output is a sum over heads,
``attn = b_o + sum_h o_h W_o[h]^T``, and head h's output o_h depends only on its own Q, K, V weights.
So with every other weight at w*, moving head h changes the layer's attention output by
``o_h' W_o'[h]^T - o_h W_o[h]^T``: the rest of the layer's attention (`Frozen.others`) is computed
once, and nothing below the layer changes (`Frozen.inputs`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from headwatch.analysis.errors import UnknownArchitectureError

Params = dict[str, torch.Tensor]
HEAD_KEYS = ("W_q", "W_k", "W_v", "b_q", "b_k", "b_v", "W_o")
# The config's dropout probabilities per family (devinterp samples in train mode, where they apply).
DROPOUTS = {"gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"), "gpt_neox": ("attention_dropout", "hidden_dropout")}


@dataclass(frozen=True)
class Architecture:
    """What the pure forward pass needs besides the parameters.

    Attributes:
        family: ``gpt2`` or ``gpt_neox``.
        n_layers, n_heads, d_model, d_head: the shape.
        eps: the layer norms' epsilon.
        act: the MLP's activation (transformers' own function for the config's name).
        parallel_residual: GPT-NeoX's ``x + attn(ln1 x) + mlp(ln2 x)`` (else ``h = x + attn(ln1 x); h + mlp(ln2 h)``).
        rotary: ``(cos, sin)``, each ``(T_max, rotary_dims)``, GPT-NeoX's rotary embedding (None for GPT-2).
        tied: the unembedding is the token embedding (GPT-2's ``tie_word_embeddings``).
    """

    family: Literal["gpt2", "gpt_neox"]
    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    eps: float
    act: Callable[[torch.Tensor], torch.Tensor]
    parallel_residual: bool
    rotary: tuple[torch.Tensor, torch.Tensor] | None
    tied: bool

    def prefix(self, layer: int) -> str:
        return f"transformer.h.{layer}." if self.family == "gpt2" else f"gpt_neox.layers.{layer}."

    def head_parameter_names(self, layer: int) -> tuple[str, ...]:
        """The checkpoint's parameters that hold a head of ``layer`` (devinterp's mask keys, in its order)."""
        p = self.prefix(layer)
        if self.family == "gpt2":
            return (p + "attn.c_attn.weight", p + "attn.c_attn.bias", p + "attn.c_proj.weight")
        return (p + "attention.query_key_value.weight", p + "attention.query_key_value.bias", p + "attention.dense.weight")

    def attention_weights(self, params: Params, layer: int) -> Params:
        """Every head's attention weights of ``layer`` in the per-head layout (module docstring), and ``b_o``."""
        p, H, dh, d = self.prefix(layer), self.n_heads, self.d_head, self.d_model
        if self.family == "gpt2":
            w = params[p + "attn.c_attn.weight"]  # (d_model, 3 d_model): x W, columns Q | K | V, each heads in order
            b = params[p + "attn.c_attn.bias"]  # (3 d_model,)
            w3 = w.reshape(d, 3, H, dh).permute(1, 2, 3, 0)  # (3, n_heads, d_head, d_model)
            b3 = b.reshape(3, H, dh)  # (3, n_heads, d_head)
            w_o = params[p + "attn.c_proj.weight"].reshape(H, dh, d).transpose(1, 2)  # rows h*dh.. read head h: (H, d, dh)
            b_o = params[p + "attn.c_proj.bias"]
        else:
            w3 = params[p + "attention.query_key_value.weight"].reshape(H, 3, dh, d).transpose(0, 1)  # (3, H, dh, d)
            b3 = params[p + "attention.query_key_value.bias"].reshape(H, 3, dh).transpose(0, 1)  # (3, H, dh)
            w_o = params[p + "attention.dense.weight"].reshape(d, H, dh).transpose(0, 1)  # columns h*dh.. read head h: (H, d, dh)
            b_o = params[p + "attention.dense.bias"]
        return {"W_q": w3[0], "W_k": w3[1], "W_v": w3[2], "b_q": b3[0], "b_k": b3[1], "b_v": b3[2], "W_o": w_o, "b_o": b_o}

    def head(self, params: Params, layer: int, head: int) -> Params:
        """Head ``head`` of ``layer``: `HEAD_KEYS`, each without the heads axis (a copy)."""
        w = self.attention_weights(params, layer)
        return {k: w[k][head].clone() for k in HEAD_KEYS}

    # --- the pieces of the forward pass -------------------------------------------------------

    def _ln(self, params: Params, name: str, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.d_model,), params[name + ".weight"], params[name + ".bias"], self.eps)

    def embed(self, params: Params, ids: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` ids -> ``(B, T, d_model)`` the first layer's input."""
        if self.family == "gpt2":
            T = ids.shape[-1]
            return params["transformer.wte.weight"][ids] + params["transformer.wpe.weight"][:T]
        return params["gpt_neox.embed_in.weight"][ids]

    def ln_attn(self, params: Params, layer: int, x: torch.Tensor) -> torch.Tensor:
        return self._ln(params, self.prefix(layer) + ("ln_1" if self.family == "gpt2" else "input_layernorm"), x)

    def heads_output(self, ln_x: torch.Tensor, w: Params) -> torch.Tensor:
        """Causal attention of the heads in ``w`` (with or without the heads axis) on ``(B, T, d_model)``:
        ``(B, [n_heads,] T, d_head)``, each head's o_h before the output projection (scale 1/sqrt(d_head))."""
        many = w["W_q"].dim() == 3
        eq = "btd,hed->bhte" if many else "btd,ed->bte"
        q, k, v = (
            torch.einsum(eq, ln_x, w[f"W_{n}"]) + (w[f"b_{n}"][:, None, :] if many else w[f"b_{n}"]) for n in "qkv"
        )  # (B, [H,] T, d_head)
        if self.rotary is not None:
            q, k = self._rotate(q), self._rotate(k)
        T = ln_x.shape[-2]
        scores = q @ k.transpose(-1, -2) * self.d_head**-0.5  # (B, [H,] T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=ln_x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        """GPT-NeoX's rotary embedding on the first ``rotary_dims`` of d_head (rotate_half convention)."""
        assert self.rotary is not None
        cos, sin = self.rotary
        T, r = x.shape[-2], cos.shape[-1]
        cos, sin = cos[:T], sin[:T]  # (T, r)
        rot, rest = x[..., :r], x[..., r:]
        half = torch.cat((-rot[..., r // 2 :], rot[..., : r // 2]), dim=-1)
        return torch.cat((rot * cos + half * sin, rest), dim=-1)

    def project(self, o: torch.Tensor, w: Params) -> torch.Tensor:
        """``(B, [H,] T, d_head)`` -> each head's contribution ``o_h W_o[h]^T``: ``(B, [H,] T, d_model)``."""
        eq = "bhte,hde->bhtd" if w["W_o"].dim() == 3 else "bte,de->btd"
        return torch.einsum(eq, o, w["W_o"])

    def mlp(self, params: Params, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The MLP of ``layer`` on its layer-normed input."""
        p = self.prefix(layer)
        if self.family == "gpt2":
            h = self.act(x @ params[p + "mlp.c_fc.weight"] + params[p + "mlp.c_fc.bias"])  # Conv1D: x W + b
            return h @ params[p + "mlp.c_proj.weight"] + params[p + "mlp.c_proj.bias"]
        h = self.act(F.linear(x, params[p + "mlp.dense_h_to_4h.weight"], params[p + "mlp.dense_h_to_4h.bias"]))
        return F.linear(h, params[p + "mlp.dense_4h_to_h.weight"], params[p + "mlp.dense_4h_to_h.bias"])

    def ln_mlp(self, params: Params, layer: int, x: torch.Tensor) -> torch.Tensor:
        return self._ln(params, self.prefix(layer) + ("ln_2" if self.family == "gpt2" else "post_attention_layernorm"), x)

    def finish_layer(
        self, params: Params, layer: int, x: torch.Tensor, attn: torch.Tensor, mlp_of_x: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The layer's output from its input ``x`` and its attention output ``attn`` (``mlp_of_x``: the
        parallel residual's ``mlp(ln2 x)`` when already computed)."""
        if self.parallel_residual:
            m = mlp_of_x if mlp_of_x is not None else self.mlp(params, layer, self.ln_mlp(params, layer, x))
            return x + attn + m
        h = x + attn
        return h + self.mlp(params, layer, self.ln_mlp(params, layer, h))

    def layer(self, params: Params, layer: int, x: torch.Tensor) -> torch.Tensor:
        """One whole layer at ``params``: ``(B, T, d_model)`` -> ``(B, T, d_model)``."""
        w = self.attention_weights(params, layer)
        o = self.heads_output(self.ln_attn(params, layer, x), w)  # (B, H, T, d_head)
        attn = self.project(o, w).sum(dim=1) + w["b_o"]  # (B, T, d_model)
        return self.finish_layer(params, layer, x, attn)

    def logits(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output -> ``(B, T, vocab)``."""
        gpt2 = self.family == "gpt2"
        h = self._ln(params, "transformer.ln_f" if gpt2 else "gpt_neox.final_layer_norm", x)
        if self.tied:
            return h @ params["transformer.wte.weight" if gpt2 else "gpt_neox.embed_in.weight"].T
        return h @ params["lm_head.weight" if "lm_head.weight" in params else "embed_out.weight"].T  # (older GPT-NeoX: embed_out)

    def loss_from(self, params: Params, layer: int, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy (nats/token) from ``x``, the input of ``layer`` (n_layers: the last output)."""
        for above in range(layer, self.n_layers):
            x = self.layer(params, above, x)
        return token_loss(self.logits(params, x), ids).mean()

    def loss(self, params: Params, ids: torch.Tensor) -> torch.Tensor:
        """The model's mean next-token cross-entropy on ``(B, T)`` ids (devinterp's per-token loss, averaged)."""
        return self.loss_from(params, 0, self.embed(params, ids), ids)


def token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``(B, T-1)`` per-token cross-entropy of the next token (devinterp's ``lm_cross_entropy_loss``)."""
    logp = torch.log_softmax(logits[..., :-1, :], dim=-1)
    return -logp.gather(-1, ids[..., 1:, None])[..., 0]


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The MLP activation ``name`` (a transformers ``ACT2FN`` key); GPT-2's ``gelu_new`` (the tanh
    approximation, written out as six element-wise operations) as torch's fused ``gelu(approximate="tanh")``,
    the same formula in one kernel forward and one backward."""
    from transformers.activations import ACT2FN

    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return functools.partial(F.gelu, approximate="tanh")
    if name == "gelu":
        return F.gelu
    return ACT2FN[name]


def check_config(cfg: Mapping[str, Any]) -> None:
    """Refuse a checkpoint config (``config.json``'s dict) this forward pass does not implement.

    Raises:
        UnknownArchitectureError: another family, dropout (devinterp samples in train mode, where it
            applies), or an option of GPT-2 or GPT-NeoX not written here.
    """
    family = cfg.get("model_type")
    if family not in DROPOUTS:
        raise UnknownArchitectureError(f"the batched refined-LLC sampler has no forward pass for model_type {family!r}")
    dropout = {n: cfg.get(n) for n in DROPOUTS[family] if cfg.get(n)}
    if dropout:
        raise UnknownArchitectureError(
            "the batched refined-LLC sampler has no dropout, and devinterp samples in train mode: "
            f"{', '.join(f'{k} {v}' for k, v in dropout.items())}"
        )
    if family == "gpt2" and (
        cfg.get("scale_attn_by_inverse_layer_idx") or not cfg.get("scale_attn_weights", True) or cfg.get("add_cross_attention")
    ):
        raise UnknownArchitectureError(
            "the batched refined-LLC sampler implements GPT-2 with scale_attn_weights and without "
            "scale_attn_by_inverse_layer_idx or cross-attention; this checkpoint differs"
        )
    if family == "gpt_neox" and not cfg.get("attention_bias", True):
        raise UnknownArchitectureError("the batched refined-LLC sampler implements GPT-NeoX with attention biases")


def architecture(model: Any) -> Architecture:
    """The `Architecture` of a transformers GPT-2 or GPT-NeoX causal LM.

    Raises:
        UnknownArchitectureError: what `check_config` refuses.
    """
    cfg = model.config
    check_config(cfg.to_dict())
    family = cfg.model_type
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if family == "gpt2":
        d = cfg.n_embd
        return Architecture(
            "gpt2",
            cfg.n_layer,
            cfg.n_head,
            d,
            d // cfg.n_head,
            cfg.layer_norm_epsilon,
            activation(cfg.activation_function),
            False,
            None,
            tied,
        )
    d, T = cfg.hidden_size, cfg.max_position_embeddings
    positions = torch.arange(T, device=model.device)[None]
    with torch.no_grad():
        cos, sin = model.gpt_neox.rotary_emb(torch.zeros(1, device=model.device), positions)  # (1, T, rotary_dims)
    return Architecture(
        "gpt_neox",
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        d,
        d // cfg.num_attention_heads,
        cfg.layer_norm_eps,
        activation(cfg.hidden_act),
        bool(cfg.use_parallel_residual),
        (cos[0].float(), sin[0].float()),
        tied,
    )


def parameters(model: torch.nn.Module) -> Params:
    """The model's parameters by name, detached (a tied weight appears once, as in ``named_parameters``)."""
    return {name: p.detach() for name, p in model.named_parameters()}
