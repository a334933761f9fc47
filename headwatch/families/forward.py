"""The language model as a pure function of its parameters, for the batched refined-LLC sampler and the ablation lens.

`precompute.lenses.llc_sampler` moves one head's weights per lane, or every weight, and needs the loss
as a function of them that `torch.func.vmap` can batch over lanes; `precompute.lenses.ablation` replaces one head's
output per lane. This module writes the forward pass of a family whose adapter declares one
(`families.family.Family.functional_forward`: GPT-2, GPT-NeoX and the Llama family, grouped-query attention included;
the sampler takes those with `Family.batched_forward`, GPT-2 and GPT-NeoX) as functions of
a ``{name: tensor}`` dict named as the checkpoint's ``named_parameters()``, in one per-head layout:

    W_q, W_k, W_v: (n_heads, d_head, d_model)   q = x W_q^T + b_q
    b_q, b_k, b_v: (n_heads, d_head)
    W_o:           (n_heads, d_model, d_head)   attn = sum_h o_h W_o[h]^T + b_o
    b_o:           (d_model,)

Each family's quirks (GPT-2's Conv1D ``c_attn`` with Q | K | V columns, GPT-NeoX's ``query_key_value`` rows
interleaved per head, its partial rotary embedding and parallel residual, Llama's RMSNorm, gated MLP and K, V heads
shared by groups of query heads, repeated per query head in this layout) are declared in its adapter
(`families.gpt2`, `families.gpt_neox`, `families.llama`: parameter names, the cut into this layout, the norms, the
residual, the MLP's orientation and gate, the embeddings); a head's weights in this layout are exactly the entries devinterp's
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
from typing import Any

import torch
import torch.nn.functional as F

from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.families.family import Family
from headwatch.families.registry import MODEL_TYPES

Params = dict[str, torch.Tensor]
HEAD_KEYS = ("W_q", "W_k", "W_v", "b_q", "b_k", "b_v", "W_o")


@dataclass(frozen=True)
class Architecture:
    """What the pure forward pass needs besides the parameters.

    Attributes:
        family: the family's adapter (`families.family.Family`), which names the parameters and cuts the heads.
        n_layers, n_heads, d_model, d_head: the shape.
        eps: the layer norms' epsilon.
        act: the MLP's activation (transformers' own function for the config's name).
        parallel_residual: GPT-NeoX's ``x + attn(ln1 x) + mlp(ln2 x)`` (else ``h = x + attn(ln1 x); h + mlp(ln2 h)``).
        rotary: ``(cos, sin)``, each ``(T_max, rotary_dims)``, the rotary embedding (None: learned positions).
        tied: the unembedding is the token embedding (``tie_word_embeddings``).
    """

    family: Family
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
        return self.family.layer_prefix.format(layer=layer)

    def head_parameter_names(self, layer: int) -> tuple[str, ...]:
        """The checkpoint's parameters that hold a head of ``layer`` (devinterp's mask keys, in its order)."""
        return self.family.head_parameter_names(layer)

    def attention_weights(self, params: Params, layer: int) -> Params:
        """Every head's attention weights of ``layer`` in the per-head layout (module docstring), and ``b_o``."""
        return self.family.attention_weights(params, layer, self.n_heads, self.d_head, self.d_model)

    def head(self, params: Params, layer: int, head: int) -> Params:
        """Head ``head`` of ``layer``: `HEAD_KEYS`, each without the heads axis (a copy)."""
        w = self.attention_weights(params, layer)
        return {k: w[k][head].clone() for k in HEAD_KEYS}

    # --- the pieces of the forward pass -------------------------------------------------------

    def _ln(self, params: Params, name: str, x: torch.Tensor) -> torch.Tensor:
        if self.family.rms_norm:  # x / sqrt(mean x^2 + eps) * w
            return F.rms_norm(x, (self.d_model,), params[name + ".weight"], self.eps)
        return F.layer_norm(x, (self.d_model,), params[name + ".weight"], params[name + ".bias"], self.eps)

    def embed(self, params: Params, ids: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` ids -> ``(B, T, d_model)`` the first layer's input."""
        x = params[self.family.token_embedding][ids]
        if self.family.position_embedding is not None:
            T = ids.shape[-1]
            x = x + params[self.family.position_embedding][:T]
        return x

    def ln_attn(self, params: Params, layer: int, x: torch.Tensor) -> torch.Tensor:
        return self._ln(params, self.prefix(layer) + self.family.attention_norm, x)

    def heads_output(self, ln_x: torch.Tensor, w: Params) -> torch.Tensor:
        """Causal attention of the heads in ``w`` (with or without the heads axis) on ``(B, T, d_model)``:
        ``(B, [n_heads,] T, d_head)``, each head's o_h before the output projection (scale 1/sqrt(d_head))."""
        return self.heads_attention(ln_x, w)[0]

    def heads_attention(self, ln_x: torch.Tensor, w: Params) -> tuple[torch.Tensor, torch.Tensor]:
        """`heads_output` and the attention probabilities ``(B, [n_heads,] T, T)`` (query, key) it weighs the
        values with."""
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
        alpha = torch.softmax(scores, dim=-1)
        return alpha @ v, alpha

    def queries_keys(self, ln_x: torch.Tensor, w: Params) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries and keys of every head in ``w`` on ``(B, T, d_model)``: each ``(B, n_heads, T, d_head)``,
        rotated where the family rotates them (`heads_attention`'s, without the values)."""
        q, k = (torch.einsum("btd,hed->bhte", ln_x, w[f"W_{n}"]) + w[f"b_{n}"][:, None, :] for n in "qk")
        if self.rotary is not None:
            q, k = self._rotate(q), self._rotate(k)
        return q, k

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        """The rotary embedding on the first ``rotary_dims`` of d_head (GPT-NeoX's rotate_half convention)."""
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

    def packed_attention(self, params: Params, layer: int) -> Params:
        """`attention_weights` of ``layer`` packed for one matrix product each: ``W_qkv`` ``(3 n_heads d_head,
        d_model)`` (Q, K, V, each heads in order) and ``b_qkv``, ``W_o`` ``(d_model, n_heads d_head)`` and ``b_o``;
        ``W_o_heads`` the per-head ``(n_heads, d_model, d_head)``."""
        w = self.attention_weights(params, layer)
        H, dh, d = self.n_heads, self.d_head, self.d_model
        return {
            "W_qkv": torch.stack((w["W_q"], w["W_k"], w["W_v"])).reshape(3 * H * dh, d),
            "b_qkv": torch.stack((w["b_q"], w["b_k"], w["b_v"])).reshape(3 * H * dh),
            "W_o": w["W_o"].transpose(0, 1).reshape(d, H * dh),
            "W_o_heads": w["W_o"],
            "b_o": w["b_o"],
        }

    def packed_heads(self, ln_x: torch.Tensor, packed: Params) -> torch.Tensor:
        """`heads_output` from `packed_attention`'s weights: ``(B, T, d_model)`` -> ``(B, n_heads, T, d_head)``, Q, K
        and V in one product and the causal attention in torch's fused kernel (no probabilities kept)."""
        B, T, _ = ln_x.shape
        H, dh = self.n_heads, self.d_head
        qkv = F.linear(ln_x, packed["W_qkv"], packed["b_qkv"]).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # (B, H, T, d_head)
        if self.rotary is not None:
            q, k = self._rotate(q), self._rotate(k)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=dh**-0.5)

    def packed_merge(self, o: torch.Tensor, packed: Params) -> torch.Tensor:
        """``(B, n_heads, T, d_head)`` -> the layer's attention output ``sum_h o_h W_o[h]^T + b_o`` in one product."""
        B, H, T, dh = o.shape
        return F.linear(o.transpose(1, 2).reshape(B, T, H * dh), packed["W_o"], packed["b_o"])

    def packed_layer(self, params: Params, layer: int, x: torch.Tensor, packed: Params) -> torch.Tensor:
        """`layer` with `packed_attention`'s weights (the same function, fewer and larger products)."""
        o = self.packed_heads(self.ln_attn(params, layer, x), packed)
        return self.finish_layer(params, layer, x, self.packed_merge(o, packed))

    def mlp(self, params: Params, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The MLP of ``layer`` on its layer-normed input."""
        p = self.prefix(layer)
        names = [p + name for name in self.family.mlp_projections]

        def apply(name: str, y: torch.Tensor) -> torch.Tensor:
            bias = params.get(name + ".bias")
            weight = params[name + ".weight"]
            # Conv1D's (in, out) weight, x W + b, as a linear map of its transpose: the bias added in the product
            return F.linear(y, weight.T if self.family.conv1d else weight, bias)

        if len(names) == 3:  # gated: down(act(gate x) * up x)
            gate, up, down = names
            return apply(down, self.act(apply(gate, x)) * apply(up, x))
        up, down = names
        return apply(down, self.act(apply(up, x)))

    def mlp_first(self, params: Params, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The first matrix of an MLP of two (not gated) in linear orientation, ``(d_mlp, d_model)``, and its bias."""
        assert len(self.family.mlp_projections) == 2, "a gated MLP has two first matrices"
        name = self.prefix(layer) + self.family.mlp_projections[0]
        weight = params[name + ".weight"]
        return (weight.T if self.family.conv1d else weight), params.get(name + ".bias")

    def mlp_rest(self, params: Params, layer: int, pre: torch.Tensor) -> torch.Tensor:
        """An MLP of two matrices from its first matrix's output ``pre`` (bias included): ``down(act(pre))``."""
        name = self.prefix(layer) + self.family.mlp_projections[1]
        weight = params[name + ".weight"]
        return F.linear(self.act(pre), weight.T if self.family.conv1d else weight, params.get(name + ".bias"))

    def norm_parameters(self, params: Params, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The gain and the bias (None under RMSNorm) of ``layer``'s MLP norm."""
        name = self.prefix(layer) + self.family.mlp_norm
        return params[name + ".weight"], params.get(name + ".bias")

    def ln_mlp(self, params: Params, layer: int, x: torch.Tensor) -> torch.Tensor:
        return self._ln(params, self.prefix(layer) + self.family.mlp_norm, x)

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
        h = self._ln(params, self.family.final_norm, x)
        if self.tied:
            return h @ params[self.family.token_embedding].T
        names = self.family.unembedding
        return h @ params[next((n for n in names if n in params), names[-1])].T

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


def check_functional(cfg: Mapping[str, Any], *, who: str = "the functional forward") -> Family:
    """Refuse a checkpoint config (``config.json``'s dict) the functional forward does not implement.

    Returns:
        the family's adapter.

    Raises:
        UnknownArchitectureError: a family without one (`families.family.Family.functional_forward`), or an option
            of the family it does not implement (`Family.check_forward`); ``who`` names what needs it.
    """
    model_type = cfg.get("model_type")
    family = MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    if family is None or not family.functional_forward:
        raise UnknownArchitectureError(f"{who} has no forward pass for model_type {model_type!r}")
    family.check_forward(cfg)
    return family


def check_config(cfg: Mapping[str, Any]) -> Family:
    """Refuse a checkpoint config (``config.json``'s dict) this forward pass does not implement.

    Returns:
        the family's adapter.

    Raises:
        UnknownArchitectureError: a family without a batched forward (`families.family.Family.batched_forward`),
            dropout (devinterp samples in train mode, where it applies), or an option of the family the forward
            does not implement (`Family.check_forward`).
    """
    model_type = cfg.get("model_type")
    family = MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    if family is None or not family.batched_forward:
        raise UnknownArchitectureError(f"the batched refined-LLC sampler has no forward pass for model_type {model_type!r}")
    dropout = {n: cfg.get(n) for n in family.dropouts if cfg.get(n)}
    if dropout:
        raise UnknownArchitectureError(
            "the batched refined-LLC sampler has no dropout, and devinterp samples in train mode: "
            f"{', '.join(f'{k} {v}' for k, v in dropout.items())}"
        )
    family.check_forward(cfg)
    return family


def architecture(model: Any, *, sampler: bool = True) -> Architecture:
    """The `Architecture` of a transformers causal LM of a family with a functional forward (GPT-2, GPT-NeoX, Llama).

    Args:
        model: the causal LM.
        sampler: for the refined-LLC sampler, which moves a head's weights and samples as devinterp does, in train
            mode: what `check_config` refuses is refused (a family without `batched_forward`, dropout); False: the
            functional forward alone, run in eval mode (the ablation lens: `check_functional`).

    Raises:
        UnknownArchitectureError: what `check_config` (or, without ``sampler``, `check_functional`) refuses.
    """
    cfg = model.config
    family = check_config(cfg.to_dict()) if sampler else check_functional(cfg.to_dict())
    fc = family.forward_config(cfg)
    rotary = None
    embedding = family.rotary_embedding(model)
    if embedding is not None:
        positions = torch.arange(cfg.max_position_embeddings, device=model.device)[None]
        with torch.no_grad():
            cos, sin = embedding(torch.zeros(1, device=model.device), positions)  # (1, T, rotary_dims)
        rotary = (cos[0].float(), sin[0].float())
    return Architecture(
        family,
        fc.n_layers,
        fc.n_heads,
        fc.d_model,
        fc.d_head or fc.d_model // fc.n_heads,
        fc.eps,
        activation(fc.activation),
        fc.parallel_residual,
        rotary,
        bool(getattr(cfg, "tie_word_embeddings", False)),
    )


def parameters(model: torch.nn.Module) -> Params:
    """The model's parameters by name, detached (a tied weight appears once, as in ``named_parameters``)."""
    return {name: p.detach() for name, p in model.named_parameters()}
