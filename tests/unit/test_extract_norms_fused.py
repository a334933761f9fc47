"""The Gemma 2, Gemma 3, Phi-3 and GPT-J adapters against the models' own forward passes, in float64.

Each case builds a tiny random model from its transformers config, with RANDOM norm gains (far from Gemma's 0 and
LayerNorm's 1), saves it with ``save_pretrained`` (safetensors), reads the saved tensors and cuts them with the
family's adapter in float64. A forward pass of the model in float64 records, per layer, the attention's input x,
the raw projections and the norms' outputs (hooks, before the rotary embedding). Then:

- queries and keys: the norm's output (Gemma 3's per-head ``q_norm`` / ``k_norm``; the projection itself where a
  family has no QK-norm) multiplied back by its per-token RMS factor ``sqrt(mean(q^2) + eps)`` equals
  ``x @ W_Q'[h].T`` with the gains folded, and the scores ``q_i . k_j`` equal the bilinear form
  ``x_i^T W_QK,h x_j`` of the folded ``W_QK,h = W_Q'[h]^T W_K'[h]``;
- values and outputs: ``x @ W_V[h].T`` is the model's value, and the heads' outputs (``o_proj``'s input) through
  the folded ``W_O'`` give the block's attention output; for Gemma that is the post-attention norm's output
  multiplied back by its per-token RMS factor.

Relative tolerance 1e-6 (largest error over the largest value): Gemma's RMSNorm computes in float32 whatever the
model's dtype, so its outputs carry float32 rounding (~1e-7); the rest is float64. The low-precision case: a
checkpoint saved in bfloat16, whose float32 factors match the float64 cut of the same stored values. The multimodal
Gemma 3 layout is read from a saved ``Gemma3ForConditionalGeneration``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file

from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.families.blocks import extract_blocks
from headwatch.families.extract import attention_tensor_names, extract_heads
from headwatch.families.forward import check_config
from headwatch.families.registry import family_of, model_geometry, model_shape

TOL = 1e-6
NO_SPECIAL_TOKENS: dict[str, Any] = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)
SMALL: dict[str, Any] = dict(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64, **NO_SPECIAL_TOKENS
)


def gemma3_config() -> Any:
    return transformers.Gemma3TextConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=12)


def gemma2_config() -> Any:
    return transformers.Gemma2Config(**SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=12)


def phi3_config() -> Any:
    return transformers.Phi3Config(**SMALL, num_attention_heads=4, num_key_value_heads=2)


def gptj_config() -> Any:
    return transformers.GPTJConfig(
        vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4, **NO_SPECIAL_TOKENS
    )


CONFIGS: dict[str, Callable[[], Any]] = {
    "gemma3": gemma3_config,
    "gemma2": gemma2_config,
    "phi3": phi3_config,
    "gptj": gptj_config,
}


def planted(config: Any, path: Path, seed: int) -> transformers.PreTrainedModel:
    """A random model (every weight and norm gain drawn, biases too), saved to ``path``; returned in float64."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                p.uniform_(-0.7, 1.6)  # Gemma: 1 + w in 0.3 .. 2.6; LayerNorm: w itself, signs included
            else:
                p.normal_(0.0, 0.5)
    model.save_pretrained(path)
    return model.double().eval()


def record(model: Any) -> list[dict[str, torch.Tensor]]:
    """Per layer: the attention's input ``x`` and every submodule output of the attention block (by name), and the
    output projection's input and the post-attention norm's output where there is one."""
    layers: list[dict[str, torch.Tensor]] = []
    handles = []
    blocks = [
        m for name, m in model.named_modules() if name.rsplit(".", 1)[-1].isdigit() and name.rsplit(".", 2)[-2] in ("layers", "h")
    ]
    for block in blocks:
        rec: dict[str, torch.Tensor] = {}
        layers.append(rec)
        attn = getattr(block, "self_attn", None) or block.attn

        def pre(module, args, kwargs, rec=rec):
            rec["x"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
        for sub_name, sub in attn.named_children():

            def out(module, args, output, rec=rec, sub_name=sub_name):
                rec[sub_name] = output.detach().clone()

            def inp(module, args, rec=rec, sub_name=sub_name):
                rec[sub_name + ".in"] = args[0].detach().clone()

            handles.append(sub.register_forward_hook(out))
            handles.append(sub.register_forward_pre_hook(inp))
        post = getattr(block, "post_attention_layernorm", None)
        if post is not None and hasattr(attn, "q_proj") and hasattr(block, "pre_feedforward_layernorm"):  # Gemma

            def post_out(module, args, output, rec=rec):
                rec["post_norm.in"], rec["post_norm"] = args[0].detach().clone(), output.detach().clone()

            handles.append(post.register_forward_hook(post_out))
    try:
        ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    return layers


def rms(t: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps)


def heads(t: torch.Tensor, d_head: int) -> torch.Tensor:
    """``(batch, seq, n d_head)`` -> ``(batch, n, seq, d_head)``."""
    b, s, _ = t.shape
    return t.view(b, s, -1, d_head).transpose(1, 2)


def model_q_k_v(case: str, rec: dict[str, torch.Tensor], config: Any, d_head: int, n_heads: int, n_kv: int):
    """The model's own per-head q, k (RMS factors multiplied back, K heads repeated per query head) and v."""
    g = n_heads // n_kv
    if case == "phi3":
        q, k, v = rec["qkv_proj"].split([n_heads * d_head, n_kv * d_head, n_kv * d_head], dim=-1)
    else:
        q, k, v = rec["q_proj"], rec["k_proj"], rec["v_proj"]
    q, k, v = heads(q, d_head), heads(k, d_head), heads(v, d_head)
    if case == "gemma3":  # the norms' outputs, times their per-token, per-head RMS factor
        eps = config.rms_norm_eps
        q_norm, k_norm = rec["q_norm"], rec["k_norm"]
        assert q_norm.shape == q.shape and k_norm.shape == k.shape
        assert (q_norm - q).abs().max() > 0.1  # the norm did something
        q, k = q_norm * rms(q, eps), k_norm * rms(k, eps)
    return q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)


def rel(err: torch.Tensor, ref: torch.Tensor) -> float:
    return float(err.abs().max() / ref.abs().max())


@pytest.mark.parametrize("case", list(CONFIGS))
def test_folded_factors_reproduce_the_models_own_q_k_scores_and_outputs(case: str, tmp_path: Path) -> None:
    config = CONFIGS[case]()
    model = planted(config, tmp_path, seed=len(case))
    shape = model_shape(json.loads((tmp_path / "config.json").read_text()))
    assert family_of(shape).name == case
    tensors = {k: v.double() for k, v in load_file(tmp_path / "model.safetensors").items()}
    family = family_of(shape)
    names = {}  # layer -> role -> tensor name, as extraction finds them
    roles = [r for r in family.attention if r in {x for m in ("qk", "ov") for x in family.matrix_roles[m]}]
    found = attention_tensor_names(shape, tensors, matrices=("qk", "ov"))
    for layer in range(shape.n_layers):
        names[layer] = dict(zip(roles, found[layer * len(roles) : (layer + 1) * len(roles)], strict=True))
    recorded = record(model)
    assert len(recorded) == shape.n_layers
    for layer, rec in enumerate(recorded):
        by_role = {role: tensors[name] for role, name in names[layer].items()}
        w_q, w_k = family.qk(shape, *(by_role[r] for r in family.matrix_roles["qk"]))
        o_t, w_v = family.ov(shape, *(by_role[r] for r in family.matrix_roles["ov"]))
        assert w_q.dtype == torch.float64 and w_q.shape == (shape.n_heads, shape.d_head, shape.d_model)
        x = rec["x"]
        q, k, v = model_q_k_v(case, rec, config, shape.d_head, shape.n_heads, shape.n_kv_heads)
        mine_q = torch.einsum("bsm,hdm->bhsd", x, w_q)
        mine_k = torch.einsum("bsm,hdm->bhsd", x, w_k)
        mine_v = torch.einsum("bsm,hdm->bhsd", x, w_v)
        assert rel(mine_q - q, q) < TOL and rel(mine_k - k, k) < TOL and rel(mine_v - v, v) < TOL, case
        w_qk = torch.einsum("hdm,hdn->hmn", w_q, w_k)  # W_QK,h = W_Q'[h]^T W_K'[h]
        scores = torch.einsum("bhsd,bhtd->bhst", q, k)
        bilinear = torch.einsum("bsm,hmn,btn->bhst", x, w_qk, x)
        assert rel(bilinear - scores, scores) < TOL, case
        # the heads' outputs through W_O' (folded): the attention's output as the block adds it
        o_in = rec[("o_proj" if case != "gptj" else "out_proj") + ".in"]  # (batch, seq, n_heads d_head)
        out = torch.einsum("bhsd,hdm->bsm", heads(o_in, shape.d_head), o_t)
        if case.startswith("gemma"):
            want = rec["post_norm"] * rms(rec["post_norm.in"], config.rms_norm_eps)
            assert rel(rec["post_norm"] - rec["post_norm.in"], want) > 0.1  # the gains are not ones
        else:
            want = rec["o_proj" if case != "gptj" else "out_proj"]
        assert rel(out - want, want) < TOL, case
    # the same cut through the generic extraction, float32
    got = extract_heads(shape, load_file(tmp_path / "model.safetensors"))
    assert got["qk"][0].dtype == torch.float32 and got["qk"][0].shape == (
        shape.n_layers,
        shape.n_heads,
        shape.d_head,
        shape.d_model,
    )
    # every block weight found, 2-D
    blocks = extract_blocks(shape, tensors)
    assert set(blocks) == set(family.blocks) and all(len(ws) == shape.n_layers for ws in blocks.values())
    geometry = model_geometry(shape, json.loads((tmp_path / "config.json").read_text()))
    assert geometry.parallel == (case == "gptj") and geometry.gated == (case != "gptj")
    with pytest.raises(UnknownArchitectureError, match=f"no forward pass for model_type '{shape.model_type}'"):
        check_config(json.loads((tmp_path / "config.json").read_text()))


def test_multimodal_gemma3_is_read_through_its_text_config_and_language_model_prefix(tmp_path: Path) -> None:
    """A ``Gemma3ForConditionalGeneration`` (a vision tower whose encoder layers also have ``self_attn.q_proj``):
    the sizes come from ``text_config``, the tensors from the language model only, under the prefix transformers
    saves (``language_model.model.``) and the one it loads into (``model.language_model.``) alike."""
    text = {k: v for k, v in SMALL.items()} | dict(num_attention_heads=4, num_key_value_heads=2, head_dim=12)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=14)
    config = transformers.Gemma3Config(
        text_config=text,
        vision_config=vision,
        mm_tokens_per_image=4,
        image_token_index=63,
        boi_token_index=61,
        eoi_token_index=62,
    )
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "gemma3" and "num_hidden_layers" not in saved
    shape = model_shape(saved)
    assert (shape.family, shape.model_type, shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.d_model, shape.d_head) == (
        "gemma3",
        "gemma3",
        2,
        4,
        2,
        32,
        12,
    )
    tensors = load_file(tmp_path / "model.safetensors")
    assert any(k.startswith("vision_tower.") and k.endswith("self_attn.q_proj.weight") for k in tensors)
    got = extract_heads(shape, tensors)
    attn = model.model.language_model.layers[1].self_attn
    h, d, m = 4, 12, 32
    want_q = attn.q_proj.weight.view(h, d, m) * (1 + attn.q_norm.weight)[None, :, None]
    assert torch.allclose(got["qk"][0][1], want_q, rtol=0, atol=1e-6)
    renamed = {
        k.replace("language_model.model.", "model.language_model.").replace("vision_tower.", "model.vision_tower."): v
        for k, v in tensors.items()
    }
    again = extract_heads(shape, renamed)
    assert all(torch.equal(a, b) for m_ in ("qk", "ov") for a, b in zip(got[m_], again[m_], strict=True))
    assert set(extract_blocks(shape, renamed)) == set(family_of(shape).blocks)
    geometry = model_geometry(shape, saved)
    assert (geometry.d_mlp, geometry.vocab, geometry.kv_heads) == (48, 64, 2)
    # a config.json that lists only the sizes differing from Gemma3TextConfig's defaults (8 heads, 4 KV heads, 256)
    sparse = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34}}
    assert model_shape(sparse).as_meta() | {"family": "gemma3"} == {
        "family": "gemma3",
        "model_type": "gemma3",
        "n_layers": 34,
        "n_heads": 8,
        "n_kv_heads": 4,
        "d_model": 2560,
        "d_head": 256,
    }


@pytest.mark.parametrize("case", list(CONFIGS))
def test_bfloat16_checkpoints_fold_their_gains_in_float32(case: str, tmp_path: Path) -> None:
    """A checkpoint saved in bfloat16 (as published ones are): the factors extraction writes (float32) equal the
    adapter's cut of the same stored values in float64 to float32's precision, so ``1 + w`` is not rounded to
    bfloat16 (that would be an error of about 4e-3)."""
    model = planted(CONFIGS[case](), tmp_path / "f32", seed=3)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    shape = model_shape(json.loads((tmp_path / "bf16" / "config.json").read_text()))
    stored = load_file(tmp_path / "bf16" / "model.safetensors")
    assert {t.dtype for t in stored.values()} == {torch.bfloat16}
    got = extract_heads(shape, stored)
    want = extract_heads_float64(shape, {k: v.double() for k, v in stored.items()})
    for m in ("qk", "ov"):
        for factor, reference in zip(got[m], want[m], strict=True):
            assert factor.dtype == torch.float32
            assert rel(factor.double() - reference, reference) < TOL, (case, m)


def extract_heads_float64(shape: Any, tensors: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The adapter's cut of every layer in float64, stacked: ``(n_layers, n_heads, d_head, d_model)`` each."""
    family = family_of(shape)
    roles = [r for r in family.attention if r in {x for m in ("qk", "ov") for x in family.matrix_roles[m]}]
    names = attention_tensor_names(shape, tensors, matrices=("qk", "ov"))
    out: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {"qk": [], "ov": []}
    for layer in range(shape.n_layers):
        by_role = {r: tensors[n] for r, n in zip(roles, names[layer * len(roles) : (layer + 1) * len(roles)], strict=True)}
        out["qk"].append(family.qk(shape, *(by_role[r] for r in family.matrix_roles["qk"])))
        out["ov"].append(family.ov(shape, *(by_role[r] for r in family.matrix_roles["ov"])))
    return {m: (torch.stack([a for a, _ in pairs]), torch.stack([b for _, b in pairs])) for m, pairs in out.items()}
