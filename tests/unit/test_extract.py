"""families.extract and the adapters (headwatch/families/) against the models themselves.

Each test builds a tiny random transformers model, saves it with
``save_pretrained`` (safetensors), extracts W_Q and W_K from the saved tensors,
and compares the per-head q = x @ W_Q[l, h].T and k = x @ W_K[l, h].T with the
q and k the model's own attention modules compute in a real forward pass,
captured before rotary embedding (and, for grouped-query attention, after the
model's own ``repeat_kv`` maps K heads to query heads). Attention biases are
zeroed: the layout excludes them by definition.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers.models.gpt2 import modeling_gpt2
from transformers.models.gpt_neox import modeling_gpt_neox
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.olmo import modeling_olmo
from transformers.models.qwen2 import modeling_qwen2

from headwatch.analysis.errors import CheckpointError, UnknownArchitectureError
from headwatch.families.extract import attention_tensor_names, extract_heads, extract_ov, extract_qk
from headwatch.families.family import ModelShape
from headwatch.families.registry import model_shape

TOL = 1e-5  # max abs error, float32
NO_SPECIAL_TOKENS: dict[str, Any] = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)  # defaults exceed vocab_size
SMALL: dict[str, Any] = dict(
    vocab_size=64, hidden_size=32, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64, **NO_SPECIAL_TOKENS
)

# name -> (config, modeling module whose apply_rotary_pos_emb sees the pre-rotary q and k)
CASES = {
    "gpt_neox": (
        # transformers 5 reads the legacy rotary_pct (as rope_parameters' partial_rotary_factor) from **kwargs
        lambda: transformers.GPTNeoXConfig(**SMALL, num_attention_heads=4, rotary_pct=0.25),
        modeling_gpt_neox,
    ),
    "gpt2": (
        lambda: transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, **NO_SPECIAL_TOKENS),
        None,
    ),
    "llama_gqa": (
        lambda: transformers.LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2),
        modeling_llama,
    ),
    "llama_mha": (
        lambda: transformers.LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=4),
        modeling_llama,
    ),
    "llama_head_dim": (  # head_dim 12 != d_model / n_heads = 8 (n_heads * d_head = 48 != d_model)
        lambda: transformers.LlamaConfig(**SMALL, num_attention_heads=4, num_key_value_heads=2, head_dim=12),
        modeling_llama,
    ),
    "mistral": (
        lambda: transformers.MistralConfig(**SMALL, num_attention_heads=4, num_key_value_heads=1),
        modeling_mistral,
    ),
    "olmo": (lambda: transformers.OlmoConfig(**SMALL, num_attention_heads=4), modeling_olmo),
    "qwen2": (  # has q/k biases by default
        lambda: transformers.Qwen2Config(**SMALL, num_attention_heads=4, num_key_value_heads=2),
        modeling_qwen2,
    ),
}


def _attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    kinds = (
        modeling_gpt_neox.GPTNeoXAttention,
        modeling_gpt2.GPT2Attention,
        modeling_llama.LlamaAttention,
        modeling_mistral.MistralAttention,
        modeling_olmo.OlmoAttention,
        modeling_qwen2.Qwen2Attention,
    )
    return [m for m in model.modules() if isinstance(m, kinds)]


def _saved_random_model(config, path: Path, seed: int) -> transformers.PreTrainedModel:
    """A random model whose heads all differ, saved to ``path``; attention biases zeroed."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.eval()
    attention = {id(p) for m in _attention_modules(model) for p in m.parameters()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in attention and name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0.0, 0.5)
    model.save_pretrained(path)
    return model


def _load_saved(path: Path) -> tuple[ModelShape, dict[str, torch.Tensor]]:
    config = json.loads((path / "config.json").read_text())
    return model_shape(config), load_file(path / "model.safetensors")


def _capture(model: transformers.PreTrainedModel, rotary_module, monkeypatch) -> list[dict[str, torch.Tensor]]:
    """Run a forward pass; per layer, the attention input x and the model's own per-head q and k.

    q is ``(batch, n_heads, seq, d_head)``; k is the same shape: the K head each
    query head attends with (after the model's ``repeat_kv`` under grouped-query attention).
    """
    layers = _attention_modules(model)
    captured: list[dict[str, torch.Tensor]] = []

    def pre_hook(module, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        captured.append({"x": x.detach().clone(), "module": module})

    if rotary_module is not None:
        original = rotary_module.apply_rotary_pos_emb

        def recording_rotary(q, k, *args, **kwargs):
            captured[-1]["q"], captured[-1]["k"] = q.detach().clone(), k.detach().clone()
            return original(q, k, *args, **kwargs)

        monkeypatch.setattr(rotary_module, "apply_rotary_pos_emb", recording_rotary)
    else:  # GPT-2: no rotary; q and k as split into heads reach the attention function
        original = modeling_gpt2.eager_attention_forward

        def recording_attention(module, query, key, *args, **kwargs):
            captured[-1]["q"], captured[-1]["k"] = query.detach().clone(), key.detach().clone()
            return original(module, query, key, *args, **kwargs)

        monkeypatch.setattr(modeling_gpt2, "eager_attention_forward", recording_attention)

    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in layers]
    try:
        ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()

    assert len(captured) == len(layers) == model.config.num_hidden_layers
    for rec in captured:
        assert "q" in rec, "the capture patch was not reached: the modeling code changed"
        groups = getattr(rec["module"], "num_key_value_groups", 1)
        rec["k"] = modeling_llama.repeat_kv(rec["k"], groups)  # the model's own K-head mapping
    return captured


def _max_error(captured, w_q: torch.Tensor, w_k: torch.Tensor) -> tuple[float, float]:
    err_q = err_k = 0.0
    for layer, rec in enumerate(captured):
        # (batch, seq, d_model) x (n_heads, d_head, d_model) -> (batch, n_heads, seq, d_head)
        q = torch.einsum("bsm,hdm->bhsd", rec["x"], w_q[layer])
        k = torch.einsum("bsm,hdm->bhsd", rec["x"], w_k[layer])
        assert q.shape == rec["q"].shape and k.shape == rec["k"].shape
        err_q = max(err_q, (q - rec["q"]).abs().max().item())
        err_k = max(err_k, (k - rec["k"]).abs().max().item())
    return err_q, err_k


@pytest.mark.parametrize("case", list(CASES))
def test_extracted_heads_reproduce_the_models_own_q_and_k(case: str, tmp_path: Path, monkeypatch) -> None:
    make_config, rotary_module = CASES[case]
    config = make_config()
    model = _saved_random_model(config, tmp_path, seed=len(case))
    shape, tensors = _load_saved(tmp_path)
    w_q, w_k = extract_qk(shape, tensors)

    n_heads = config.num_attention_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    assert shape.d_head == d_head and shape.n_heads == n_heads
    assert w_q.shape == w_k.shape == (config.num_hidden_layers, n_heads, d_head, config.hidden_size)
    assert w_q.dtype == w_k.dtype == torch.float32

    if case == "gpt_neox":  # Pythia-style partial rotary: the capture is before it either way
        attention = model.get_submodule("gpt_neox.layers.0.attention")
        assert isinstance(attention, modeling_gpt_neox.GPTNeoXAttention)
        assert 0 < attention.rotary_ndims < d_head

    captured = _capture(model, rotary_module, monkeypatch)
    err_q, err_k = _max_error(captured, w_q, w_k)
    scale = max(rec["q"].abs().max().item() for rec in captured)
    assert scale > 0.5  # the comparison is not between near-zero numbers
    assert err_q < TOL and err_k < TOL, (err_q, err_k)
    # distinct heads: a mix-up of heads could not go unnoticed
    assert (w_q[0, 0] - w_q[0, 1]).abs().max() > 0.1


def test_flat_chunk_split_of_the_neox_fused_weight_fails_the_comparison(tmp_path: Path, monkeypatch) -> None:
    """The bug docs/design-notes.md section 3 warns of: chunk(3) on (3 d_model, d_model) mixes heads. The test must catch it."""
    make_config, rotary_module = CASES["gpt_neox"]
    model = _saved_random_model(make_config(), tmp_path, seed=1)
    shape, tensors = _load_saved(tmp_path)
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    names = attention_tensor_names(shape, tensors)
    flat = [tensors[n].chunk(3, dim=0) for n in names]  # [Q | K | V] blocks: the wrong reading
    w_q = torch.stack([q.reshape(h, d, m) for q, _, _ in flat])
    w_k = torch.stack([k.reshape(h, d, m) for _, k, _ in flat])

    err_q, err_k = _max_error(_capture(model, rotary_module, monkeypatch), w_q, w_k)
    assert err_q > 1000 * TOL and err_k > 1000 * TOL


def test_tiled_instead_of_interleaved_kv_heads_fails_the_comparison(tmp_path: Path, monkeypatch) -> None:
    """Under grouped-query attention K head j serves query heads j*g .. j*g+g-1, not every n_kv-th."""
    make_config, rotary_module = CASES["llama_gqa"]
    model = _saved_random_model(make_config(), tmp_path, seed=2)
    shape, tensors = _load_saved(tmp_path)
    w_q, w_k = extract_qk(shape, tensors)
    kv = shape.n_kv_heads
    tiled = torch.stack([w_k[layer, :: shape.n_heads // kv].repeat(shape.n_heads // kv, 1, 1) for layer in range(2)])

    _, err_k = _max_error(_capture(model, rotary_module, monkeypatch), w_q, tiled)
    assert err_k > 1000 * TOL


def test_base_model_names_without_prefix_and_low_precision_tensors(tmp_path: Path) -> None:
    make_config, _ = CASES["gpt_neox"]
    _saved_random_model(make_config(), tmp_path, seed=3)
    shape, tensors = _load_saved(tmp_path)
    w_q, w_k = extract_qk(shape, tensors)

    base = {n.removeprefix("gpt_neox."): t.to(torch.bfloat16) for n, t in tensors.items()}
    b_q, b_k = extract_qk(shape, base)
    assert b_q.dtype == b_k.dtype == torch.float32
    assert torch.equal(b_q, w_q.to(torch.bfloat16).to(torch.float32))
    assert torch.equal(b_k, w_k.to(torch.bfloat16).to(torch.float32))


def test_pythia_style_buffers_are_not_mistaken_for_weights() -> None:
    shape = model_shape({"model_type": "gpt_neox", "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8})
    names = [
        "gpt_neox.layers.0.attention.bias",
        "gpt_neox.layers.0.attention.masked_bias",
        "gpt_neox.layers.0.attention.rotary_emb.inv_freq",
        "gpt_neox.layers.0.attention.query_key_value.bias",
        "gpt_neox.layers.0.attention.query_key_value.weight",
    ]
    assert attention_tensor_names(shape, names) == ["gpt_neox.layers.0.attention.query_key_value.weight"]


def test_model_shape_reads_head_dim_and_kv_heads() -> None:
    shape = model_shape(
        {
            "model_type": "llama",
            "num_hidden_layers": 3,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "hidden_size": 64,
            "head_dim": 32,
        }
    )
    assert (shape.family, shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.d_model, shape.d_head) == (
        "llama",
        3,
        8,
        2,
        64,
        32,
    )
    gpt2 = model_shape({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 32})
    assert (gpt2.n_layers, gpt2.n_heads, gpt2.n_kv_heads, gpt2.d_model, gpt2.d_head) == (2, 4, 4, 32, 8)


def test_unknown_architecture_is_refused_by_name() -> None:
    with pytest.raises(UnknownArchitectureError, match="mamba"):
        model_shape({"model_type": "mamba", "num_hidden_layers": 2, "hidden_size": 32})
    with pytest.raises(ValueError, match="None"):  # no model_type at all; still a ValueError subclass
        model_shape({"num_hidden_layers": 2})


def test_missing_and_misshapen_tensors_are_checkpoint_errors() -> None:
    shape = model_shape({"model_type": "gpt_neox", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8})
    good = torch.zeros(24, 8)
    with pytest.raises(CheckpointError, match="layer 1"):
        extract_qk(shape, {"gpt_neox.layers.0.attention.query_key_value.weight": good})
    with pytest.raises(CheckpointError, match=r"\(16, 8\)"):
        extract_qk(
            shape,
            {
                "gpt_neox.layers.0.attention.query_key_value.weight": good,
                "gpt_neox.layers.1.attention.query_key_value.weight": torch.zeros(16, 8),
            },
        )
    with pytest.raises(CheckpointError, match="head_dim"):
        model_shape({"model_type": "gpt2", "n_layer": 1, "n_head": 3, "n_embd": 32})


# --- OV circuits: W_OV,h x against the model's own value path and output projection ---------------


def _output_projection(attention: torch.nn.Module) -> torch.nn.Module:
    """The module that maps the concatenated heads to d_model: GPT-NeoX ``dense``, GPT-2 ``c_proj``
    (Conv1D), Llama-style ``o_proj``."""
    for name in ("dense", "c_proj", "o_proj"):
        if hasattr(attention, name):
            return getattr(attention, name)
    raise AssertionError(f"no output projection on {type(attention).__name__}")


def _head_contributions(model: transformers.PreTrainedModel, n_tokens: int = 5) -> list[dict[str, torch.Tensor]]:
    """Per layer, the attention input x ``(n_tokens, d_model)`` and each head's contribution to the
    attention output before the output bias, ``(n_heads, n_tokens, d_model)``, computed by the model.

    Each token is a sequence of its own (length 1), so its attention pattern is one-hot on itself and
    the input of the output projection is exactly the heads' values. Head h's contribution is the
    real output projection applied to that input with every other head's slice zeroed, minus the
    projection of zeros (its bias); the slice of head h is the one the model's own head split fills.
    """
    layers = _attention_modules(model)
    captured: list[dict[str, torch.Tensor]] = []

    def attention_hook(module, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        captured.append({"x": x.detach().clone()})

    def projection_hook(module, args):
        captured[-1]["z"] = args[0].detach().clone()

    handles = [m.register_forward_pre_hook(attention_hook, with_kwargs=True) for m in layers]
    handles += [_output_projection(m).register_forward_pre_hook(projection_hook) for m in layers]
    try:
        ids = torch.randint(0, model.config.vocab_size, (n_tokens, 1), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    out = []
    for attention, rec in zip(layers, captured, strict=True):
        proj = _output_projection(attention)
        z = rec["z"][:, 0]  # (n_tokens, n_heads * d_head)
        n_heads = model.config.num_attention_heads
        d_head = z.shape[-1] // n_heads
        contributions = []
        with torch.no_grad():
            zero = proj(torch.zeros_like(z))
            for head in range(n_heads):
                only = torch.zeros_like(z)
                only[:, head * d_head : (head + 1) * d_head] = z[:, head * d_head : (head + 1) * d_head]
                contributions.append(proj(only) - zero)
        out.append({"x": rec["x"][:, 0], "c": torch.stack(contributions)})
    return out


def _with_output_bias(model: torch.nn.Module) -> None:
    """Give every output projection a non-zero bias, so "before the output bias" is tested."""
    with torch.no_grad():
        for attention in _attention_modules(model):
            bias = getattr(_output_projection(attention), "bias", None)
            if bias is not None:
                bias.normal_(0.0, 1.0)


def _ov_error(records, o_t: torch.Tensor, v: torch.Tensor) -> float:
    err = 0.0
    for layer, rec in enumerate(records):
        w_ov = o_t[layer].transpose(-1, -2) @ v[layer]  # (n_heads, d_model, d_model), W_O[:, h] W_V,h
        mine = torch.einsum("hij,tj->hti", w_ov, rec["x"])  # (n_heads, n_tokens, d_model)
        assert mine.shape == rec["c"].shape
        err = max(err, (mine - rec["c"]).abs().max().item())
    return err


@pytest.mark.parametrize("case", list(CASES))
def test_extracted_ov_circuits_reproduce_each_heads_contribution(case: str, tmp_path: Path) -> None:
    make_config, _ = CASES[case]
    config = make_config()
    model = _saved_random_model(config, tmp_path, seed=10 + len(case))
    shape, tensors = _load_saved(tmp_path)
    o_t, v = extract_ov(shape, tensors)
    assert o_t.shape == v.shape == (shape.n_layers, shape.n_heads, shape.d_head, shape.d_model)
    assert o_t.dtype == v.dtype == torch.float32

    _with_output_bias(model)
    records = _head_contributions(model)
    scale = max(rec["c"].abs().max().item() for rec in records)
    assert scale > 0.5
    err = _ov_error(records, o_t, v)
    assert err < TOL, err
    # both products from one call agree with the single-product extractors
    both = extract_heads(shape, tensors)
    assert torch.equal(both["ov"][0], o_t) and torch.equal(both["qk"][0], extract_qk(shape, tensors)[0])


def test_ov_with_flat_chunk_values_or_wrong_head_columns_fails_the_comparison(tmp_path: Path) -> None:
    """Reading V as the third flat chunk of the fused weight, or W_O's head columns from the wrong
    side (rows instead of input columns), must not pass."""
    make_config, _ = CASES["gpt_neox"]
    model = _saved_random_model(make_config(), tmp_path, seed=5)
    shape, tensors = _load_saved(tmp_path)
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    o_t, v = extract_ov(shape, tensors)
    records = _head_contributions(model)
    names = attention_tensor_names(shape, tensors)
    flat_v = torch.stack([tensors[n].chunk(3, dim=0)[2].reshape(h, d, m) for n in names])
    assert _ov_error(records, o_t, flat_v) > 1000 * TOL
    dense = [n for n in tensors if n.endswith("attention.dense.weight")]
    rows = torch.stack([tensors[n].reshape(h, d, m) for n in sorted(dense)])  # output rows, not input columns
    assert _ov_error(records, rows, v) > 1000 * TOL


def test_ov_tensor_names_and_misshapen_output_projection() -> None:
    shape = ModelShape("gpt2", "gpt2", 1, 2, 2, 8, 4)
    names = ["transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight", "transformer.h.0.mlp.c_proj.weight"]
    assert attention_tensor_names(shape, names) == names[:1]
    assert attention_tensor_names(shape, names, matrices=("ov",)) == names[:2]
    with pytest.raises(ValueError, match="unknown per-head matrices"):
        attention_tensor_names(shape, names, matrices=("layers",))
    tensors = {names[0]: torch.zeros(8, 24), names[1]: torch.zeros(8, 9)}
    with pytest.raises(CheckpointError, match=r"c_proj.weight .*shape \(8, 9\)"):
        extract_ov(shape, tensors)
