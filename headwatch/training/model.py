"""The model: a ``GPTNeoXForCausalLM`` shaped and initialised like Pythia, or a ``GPT2LMHeadModel``.

``ModelSettings.arch`` picks the architecture. ``gpt_neox`` (the default, the reference run):
Pythia's recipe as it matters for attention heads:

- parallel attention and MLP in every block (``use_parallel_residual=True``), biases on,
  untied input and output embeddings, rotary position encoding on 25% of each head's dims;
- "small init" for the input-side weights (embeddings, the fused QKV projection, the
  MLP's first layer and the unembedding): N(0, sigma^2) with sigma^2 = 2 / (5 d_model);
- "wang init" for the two output projections that write into the residual stream
  (attention ``dense`` and ``mlp.dense_4h_to_h``): std = 2 / (n_layers sqrt(d_model));
- biases 0, LayerNorm gain 1 and shift 0.

``gpt2``: GPT-2's architecture and its own initialisation (`gpt2_init`, what transformers'
``GPT2PreTrainedModel`` draws): learned absolute position embeddings (``wpe``) added to the token
embeddings, attention then MLP in sequence (pre-LayerNorm), GELU (tanh approximation), biases on,
tied input and output embeddings; every weight matrix and both embeddings N(0, 0.02^2), the two
residual output projections (``attn.c_proj``, ``mlp.c_proj``) N(0, (0.02 / sqrt(2 n_layers))^2),
biases 0, LayerNorm gain 1 and shift 0. Learned absolute positions let layer 0 form a
previous-token head directly, which an induction head in a later layer needs
(`docs/induction-recipe.md`, finding 2).

The initialisation draws from its own seeded generator, so a seed fixes the weights
at step 0 independently of anything else the process has drawn.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedModel

from headwatch.training.settings import ModelSettings

VOCAB_SIZE = 256  # byte-level tokens
# Modules initialised with the wang init (they write into the residual stream).
OUTPUT_PROJECTIONS = ("attention.dense", "mlp.dense_4h_to_h")
GPT2_INIT_STD = 0.02  # GPT-2's initializer_range
GPT2_OUTPUT_PROJECTIONS = ("attn.c_proj.weight", "mlp.c_proj.weight")


def small_init_std(d_model: int) -> float:
    """sqrt(2 / (5 d_model)), Pythia's std for input-side weights."""
    return math.sqrt(2.0 / (5.0 * d_model))


def wang_init_std(n_layers: int, d_model: int) -> float:
    """2 / (n_layers sqrt(d_model)), Pythia's std for the residual output projections."""
    return 2.0 / (n_layers * math.sqrt(d_model))


def build_config(model: ModelSettings) -> GPTNeoXConfig | GPT2Config:
    """A transformers config for ``model`` (saved as ``config.json`` in every checkpoint)."""
    return gpt2_config(model) if model.arch == "gpt2" else neox_config(model)


def gpt2_config(model: ModelSettings) -> GPT2Config:
    """The ``GPT2Config`` of ``model`` (``arch="gpt2"``)."""
    return GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=model.context,
        n_embd=model.d_model,
        n_layer=model.n_layers,
        n_head=model.n_heads,
        n_inner=model.d_mlp,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        initializer_range=GPT2_INIT_STD,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        use_cache=False,
    )


def neox_config(model: ModelSettings) -> GPTNeoXConfig:
    """The ``GPTNeoXConfig`` of ``model`` (``arch="gpt_neox"``)."""
    return GPTNeoXConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=model.d_model,
        num_hidden_layers=model.n_layers,
        num_attention_heads=model.n_heads,
        intermediate_size=model.d_mlp,
        hidden_act="gelu",
        max_position_embeddings=model.context,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": model.rotary_base,
            "partial_rotary_factor": model.rotary_pct,
        },
        use_parallel_residual=True,
        attention_bias=True,
        tie_word_embeddings=False,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        layer_norm_eps=1e-5,
        initializer_range=small_init_std(model.d_model),
        bos_token_id=None,
        eos_token_id=None,
        use_cache=False,
    )


@torch.no_grad()
def pythia_init(model: GPTNeoXForCausalLM, *, seed: int) -> None:
    """Overwrite every parameter of ``model`` with Pythia's initialisation, in place.

    Args:
        model: a freshly built model (its own random init is discarded).
        seed: seeds the generator that draws the weights.
    """
    config = model.config
    small = small_init_std(config.hidden_size)
    wang = wang_init_std(config.num_hidden_layers, config.hidden_size)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    done: set[str] = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            std = wang if name.endswith(OUTPUT_PROJECTIONS) else small
            module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * std)
            done.add(f"{name}.weight")
            if module.bias is not None:
                module.bias.zero_()
                done.add(f"{name}.bias")
        elif isinstance(module, nn.Embedding):
            module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * small)
            done.add(f"{name}.weight")
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
            done.update((f"{name}.weight", f"{name}.bias"))
    missed = {name for name, _ in model.named_parameters()} - done
    assert not missed, f"parameters left with transformers' default init: {sorted(missed)}"


@torch.no_grad()
def gpt2_init(model: GPT2LMHeadModel, *, seed: int) -> None:
    """Overwrite every parameter of ``model`` with GPT-2's initialisation (module docstring), in place.

    Args:
        model: a freshly built model (its own random init is discarded).
        seed: seeds the generator that draws the weights.
    """
    std = GPT2_INIT_STD
    resid = std / math.sqrt(2 * model.config.n_layer)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for name, param in model.named_parameters():  # the tied lm_head.weight is wte.weight, listed once
        if param.ndim >= 2:
            scale = resid if name.endswith(GPT2_OUTPUT_PROJECTIONS) else std
            param.copy_(torch.randn(param.shape, generator=gen) * scale)
        elif ".ln_" in name and name.endswith(".weight"):
            param.fill_(1.0)
        elif name.endswith(".bias"):
            param.zero_()
        else:
            raise AssertionError(f"no GPT-2 init rule for parameter {name} {tuple(param.shape)}")


def build_model(model: ModelSettings, *, seed: int) -> PreTrainedModel:
    """The step-0 model: built from `build_config`, initialised by `pythia_init` or `gpt2_init`, float32."""
    if model.arch == "gpt2":
        gpt2 = GPT2LMHeadModel(gpt2_config(model))
        gpt2_init(gpt2, seed=seed)
        return gpt2.float()
    net = GPTNeoXForCausalLM(neox_config(model))
    pythia_init(net, seed=seed)
    return net.float()
