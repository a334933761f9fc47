"""The Llama-layout families with norms inside the attention (QK-norm, an output norm), against their own forward pass.

Per family, a tiny model built from its transformers config, every weight random and every norm's gains random (far
from one), in float64, saved with ``save_pretrained`` (safetensors). Its adapter's W_Q and W_K, with the gains folded
(docs/design-notes.md section 7: ``W_QK = (g_q * W_Q)^T (g_k * W_K)``, the per-token RMS left out), are checked
against the queries and keys the model computes: taken from forward hooks on the norms' outputs (before the rotary
embedding), multiplied back by their per-token RMS factors (recomputed from the norms' inputs), they give
``x_i^T W_QK,h x_j`` for the attention's input x, in float64 within 1e-6 of the largest score. Its W_O^T and W_V give
each head's contribution to the attention's output, the output norm's gains folded into W_O where the family has
one (OLMo 2), and their sum is the output norm's output multiplied back by its RMS. The extraction's float32
factors (`extract_heads`) are the adapter's to float32 rounding. transformers' RMSNorms normalise in float32 even in a
float64 model, so the model's side agrees to about 1e-7 of the largest value: the 1e-6 bound holds with a margin of
ten, where an unfolded or misplaced gain (in [0.2, 3]) is off by order one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file

from headwatch.families.extract import attention_tensor_names, extract_heads
from headwatch.families.family import ModelShape
from headwatch.families.registry import family_of, model_geometry, model_shape

TOL = 1e-6  # float64: the bilinear forms against the largest score
SEQ = 7  # differs from every head count, so a (batch, seq, heads, d_head) layout is told from (batch, heads, seq, d_head)
NO_SPECIAL_TOKENS: dict[str, Any] = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
SMALL: dict[str, Any] = dict(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64, **NO_SPECIAL_TOKENS
)


@dataclass(frozen=True)
class Case:
    """A family's planted model: its config; the attention's query and key modules whose outputs are the queries and
    keys before the rotary embedding (the norms, or the projections where there is no QK-norm) and whether they are
    RMSNorms; the decoder layer's norm on the attention's output (None: none)."""

    family: str
    config: Callable[[], Any]
    q: str = "q_norm"
    k: str = "k_norm"
    normed: bool = True
    output_norm: str | None = None


CASES = {
    "olmo2": Case(
        "olmo2",
        lambda: transformers.Olmo2Config(**SMALL, num_attention_heads=4, num_key_value_heads=2),
        output_norm="post_attention_layernorm",
    ),
    "olmo2_head_dim": Case(  # n_heads d_head = 48 != d_model: the norms span the projected width, not d_model
        "olmo2",
        lambda: transformers.Olmo2Config(**SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=12),
        output_norm="post_attention_layernorm",
    ),
    "olmo3": Case(  # OLMo 2's tensors; a sliding-window layer and per-layer-type rotary parameters
        "olmo2",
        lambda: transformers.Olmo3Config(
            **SMALL,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        output_norm="post_attention_layernorm",
    ),
    "olmoe": Case(  # OLMo 2's QK-norm, no output norm, a mixture-of-experts MLP
        "olmoe",
        lambda: transformers.OlmoeConfig(
            **(SMALL | {"intermediate_size": 16}),
            num_attention_heads=4,
            num_key_value_heads=2,
            num_experts=4,
            num_experts_per_tok=2,
        ),
    ),
    "flex_olmo": Case(  # OLMo 2's attention and output norm, OLMoE's experts
        "flex_olmo",
        lambda: transformers.FlexOlmoConfig(
            **(SMALL | {"intermediate_size": 16}),
            num_attention_heads=4,
            num_key_value_heads=2,
            num_experts=4,
            num_experts_per_tok=2,
        ),
        output_norm="post_attention_layernorm",
    ),
    "qwen3_moe": Case(  # Qwen3's attention; layer 1 a dense MLP
        "qwen3_moe",
        lambda: transformers.Qwen3MoeConfig(
            **SMALL,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=12,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            mlp_only_layers=[1],
        ),
    ),
    "qwen3": Case("qwen3", lambda: transformers.Qwen3Config(**SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=12)),
    "apertus": Case("apertus", lambda: transformers.ApertusConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2)),
    "smollm3": Case(  # no QK-norm; layer 1 without the rotary embedding: Llama's adapter, the projections' outputs
        "llama",
        lambda: transformers.SmolLM3Config(**SMALL, num_attention_heads=4, num_key_value_heads=2, no_rope_layers=[1, 0]),
        q="q_proj",
        k="k_proj",
        normed=False,
    ),
}


def _planted(case: Case, path: Path, seed: int) -> tuple[transformers.PreTrainedModel, ModelShape, dict[str, torch.Tensor]]:
    """The case's model in float64, weights random, norm gains in [0.2, 3], attention biases zero; saved to ``path``
    and read back with its shape."""
    torch.manual_seed(seed)
    # experts (OLMoE) in a loop: the grouped matrix product has no float64
    config = case.config()
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", experts_implementation="eager")
    model = model.double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(0.2 + 2.8 * torch.rand_like(p))
            elif "self_attn" in name and name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.5)
    model.save_pretrained(path)
    shape = model_shape(json.loads((path / "config.json").read_text()))
    return model, shape, load_file(path / "model.safetensors")


def _adapter_factors(shape: ModelShape, tensors: dict[str, torch.Tensor], matrix: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the adapter's pair for ``matrix`` from the tensors as saved (float64: `scale_rows` keeps it)."""
    family = family_of(shape)
    roles = [r for r in family.attention if r in family.matrix_roles[matrix]]
    names = attention_tensor_names(shape, tensors, matrices=(matrix,))
    out = []
    for layer in range(shape.n_layers):
        by_role = dict(zip(roles, names[layer * len(roles) : (layer + 1) * len(roles)], strict=True))
        cut = family.qk if matrix == "qk" else family.ov
        out.append(cut(shape, *(tensors[by_role[r]] for r in family.matrix_roles[matrix])))
    return out


def _rms(t: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)


def _per_head(t: torch.Tensor, d_head: int) -> torch.Tensor:
    """(batch, seq, n d_head), (batch, seq, n, d_head) or (batch, n, seq, d_head) -> (batch, seq, n, d_head)."""
    if t.ndim == 3:
        return t.view(*t.shape[:2], -1, d_head)
    return t if t.shape[1] == SEQ else t.transpose(1, 2)


def _layers(model: transformers.PreTrainedModel) -> list[Any]:
    return list(model.model.layers)


def _queries_and_keys(model, case: Case, shape: ModelShape) -> list[dict[str, torch.Tensor]]:
    """Per layer: the attention's input x ``(batch, seq, d_model)``, and its queries and keys before the rotary
    embedding with the norms' per-token RMS multiplied back, ``(batch, seq, n_heads, d_head)`` (keys repeated per
    query head as the model's ``repeat_kv`` does)."""
    records: list[dict[str, torch.Tensor]] = [{} for _ in _layers(model)]
    handles = []
    eps = model.config.rms_norm_eps
    for layer, block in enumerate(_layers(model)):
        rec = records[layer]

        def take_x(module, args, kwargs, rec=rec):
            rec["x"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

        handles.append(block.self_attn.register_forward_pre_hook(take_x, with_kwargs=True))
        for key, module_name in (("q", case.q), ("k", case.k)):

            def take(module, args, output, rec=rec, key=key):
                unscaled = output * _rms(args[0], eps) if case.normed else output
                rec[key] = _per_head(unscaled.detach().clone(), shape.d_head)

            handles.append(getattr(block.self_attn, module_name).register_forward_hook(take))
    try:
        ids = torch.randint(0, model.config.vocab_size, (2, SEQ), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    for rec in records:
        assert set(rec) == {"x", "q", "k"}, "a hook was not reached: the modeling code changed"
        rec["k"] = rec["k"].repeat_interleave(shape.n_heads // shape.n_kv_heads, dim=2)
    return records


@pytest.mark.parametrize("name", list(CASES))
def test_folded_w_qk_gives_the_models_own_scores(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    model, shape, tensors = _planted(case, tmp_path, seed=len(name))
    assert shape.family == case.family
    factors = _adapter_factors(shape, tensors, "qk")
    records = _queries_and_keys(model, case, shape)
    for layer, ((w_q, w_k), rec) in enumerate(zip(factors, records, strict=True)):
        assert w_q.dtype == w_k.dtype == torch.float64
        q = torch.einsum("bsm,hdm->bshd", rec["x"], w_q)
        k = torch.einsum("bsm,hdm->bshd", rec["x"], w_k)
        scale = rec["q"].abs().max().item()
        assert scale > 0.5
        assert (q - rec["q"]).abs().max().item() < TOL * scale and (k - rec["k"]).abs().max().item() < TOL * scale, layer
        # the bilinear form x_i^T W_QK,h x_j against the model's own q_i . k_j, every head and pair of positions
        w_qk = torch.einsum("hdm,hdn->hmn", w_q, w_k)  # W_Q^T W_K per head
        mine = torch.einsum("bim,hmn,bjn->bhij", rec["x"], w_qk, rec["x"])
        own = torch.einsum("bihd,bjhd->bhij", rec["q"], rec["k"])
        assert (mine - own).abs().max().item() < TOL * own.abs().max().item(), layer
    if case.normed:  # folding changed something: the unfolded projections do not give the model's queries
        _unfolded_queries_differ(shape, tensors, records[0])
    # the extraction's float32 factors are these
    got = extract_heads(shape, tensors)
    for matrix in ("qk", "ov"):
        for layer, pair in enumerate(_adapter_factors(shape, tensors, matrix)):
            for stored, exact in zip(got[matrix], pair, strict=True):
                assert stored.dtype == torch.float32
                torch.testing.assert_close(stored[layer], exact.float(), rtol=0, atol=0)


def _unfolded_queries_differ(shape: ModelShape, tensors: dict[str, torch.Tensor], rec: dict[str, torch.Tensor]) -> None:
    q_proj = next(t for n, t in tensors.items() if n.endswith("layers.0.self_attn.q_proj.weight"))
    plain = torch.einsum("bsm,hdm->bshd", rec["x"], q_proj.view(shape.n_heads, shape.d_head, shape.d_model))
    assert (plain - rec["q"]).abs().max().item() > 0.1


def _head_contributions(model, case: Case, shape: ModelShape, n_tokens: int = 5) -> list[dict[str, torch.Tensor]]:
    """Per layer, the attention's input x ``(n_tokens, d_model)``, each head's contribution to the output projection's
    output before its bias ``(n_heads, n_tokens, d_model)`` (each token a sequence of its own, so it attends only to
    itself; the other heads' slices of the projection's input zeroed), multiplied by the output norm's gains where the
    family has one; and that norm's output multiplied back by its RMS (``None`` without one)."""
    records: list[dict[str, Any]] = [{} for _ in _layers(model)]
    handles = []
    for layer, block in enumerate(_layers(model)):
        rec = records[layer]

        def take_x(module, args, kwargs, rec=rec):
            rec["x"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

        def take_z(module, args, rec=rec):
            rec["z"] = args[0].detach().clone()

        handles.append(block.self_attn.register_forward_pre_hook(take_x, with_kwargs=True))
        handles.append(block.self_attn.o_proj.register_forward_pre_hook(take_z))
        if case.output_norm is not None:

            def take_norm(module, args, output, rec=rec):
                rec["normed"] = (output * _rms(args[0], module.variance_epsilon)).detach().clone()

            handles.append(getattr(block, case.output_norm).register_forward_hook(take_norm))
    try:
        ids = torch.randint(0, model.config.vocab_size, (n_tokens, 1), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    out = []
    d = shape.d_head
    for block, rec in zip(_layers(model), records, strict=True):
        proj = block.self_attn.o_proj
        z = rec["z"][:, 0]
        gain = getattr(block, case.output_norm).weight.detach() if case.output_norm else torch.ones(shape.d_model)
        heads = []
        with torch.no_grad():
            zero = proj(torch.zeros_like(z))
            for head in range(shape.n_heads):
                only = torch.zeros_like(z)
                only[:, head * d : (head + 1) * d] = z[:, head * d : (head + 1) * d]
                heads.append(gain * (proj(only) - zero))
        normed = rec["normed"][:, 0] if "normed" in rec else None
        out.append({"x": rec["x"][:, 0], "c": torch.stack(heads), "normed": normed})
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_folded_w_ov_gives_each_heads_contribution(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    model, shape, tensors = _planted(case, tmp_path, seed=10 + len(name))
    records = _head_contributions(model, case, shape)
    for layer, ((o_t, v), rec) in enumerate(zip(_adapter_factors(shape, tensors, "ov"), records, strict=True)):
        w_ov = o_t.transpose(-1, -2) @ v  # (n_heads, d_model, d_model)
        mine = torch.einsum("hij,tj->hti", w_ov, rec["x"])
        scale = rec["c"].abs().max().item()
        assert scale > 0.5
        assert (mine - rec["c"]).abs().max().item() < TOL * scale, layer
        if rec["normed"] is not None:  # the heads' folded contributions sum to the norm's output times its RMS
            assert (mine.sum(0) - rec["normed"]).abs().max().item() < TOL * rec["normed"].abs().max().item(), layer
            # and the output norm's gains are what makes it so: W_O as stored is off by them
            o_proj = next(t for n, t in tensors.items() if n.endswith(f"layers.{layer}.self_attn.o_proj.weight"))
            plain = o_proj.T.reshape(shape.n_heads, shape.d_head, shape.d_model).transpose(-1, -2) @ v
            assert (torch.einsum("hij,tj->hti", plain, rec["x"]) - rec["c"]).abs().max().item() > 0.1 * scale


def test_geometry_of_the_mixture_of_experts_and_the_ungated_mlp() -> None:
    """OLMoE's MLP a token passes through is its num_experts_per_tok gated experts; Apertus's MLP has two matrices."""
    olmoe = CASES["olmoe"].config().to_dict()
    geometry = model_geometry(model_shape(olmoe), olmoe)
    assert (geometry.gated, geometry.d_mlp, geometry.kv_heads) == (True, 2 * 16, 2)
    qwen3_moe = CASES["qwen3_moe"].config().to_dict()
    assert model_geometry(model_shape(qwen3_moe), qwen3_moe).d_mlp == 2 * 16  # moe_intermediate_size
    apertus = CASES["apertus"].config().to_dict()
    geometry = model_geometry(model_shape(apertus), apertus)
    assert (geometry.gated, geometry.d_mlp) == (False, 48)


def test_the_model_card_says_what_is_folded() -> None:
    from headwatch.dashboard.model_card import model_card_lines

    def card(family: str) -> list[str]:
        model = SimpleNamespace(id="m", family=family, n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_head=8)
        meta = SimpleNamespace(model=model, done_steps=[0, 1], duplicates=[], mixed=[], failed=[])
        return model_card_lines(meta)  # type: ignore[arg-type]  # a stand-in with the attributes the card reads

    assert any("W_QK = (g_q * W_Q)ᵀ (g_k * W_K)" in line and "W_O" in line for line in card("olmo2"))
    assert any("QK-norm gains (per head) folded into W_Q, W_K" in line for line in card("apertus"))
    assert not any("folded" in line for line in card("llama") + card("gpt_neox"))
