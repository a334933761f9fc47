"""The model: a ``GPTNeoXForCausalLM`` shaped and initialised like Pythia.

Pythia's recipe as it matters for attention heads:

- parallel attention and MLP in every block (``use_parallel_residual=True``), biases on,
  untied input and output embeddings, rotary position encoding on 25% of each head's dims;
- "small init" for the input-side weights (embeddings, the fused QKV projection, the
  MLP's first layer and the unembedding): N(0, sigma^2) with sigma^2 = 2 / (5 d_model);
- "wang init" for the two output projections that write into the residual stream
  (attention ``dense`` and ``mlp.dense_4h_to_h``): std = 2 / (n_layers sqrt(d_model));
- biases 0, LayerNorm gain 1 and shift 0.

The initialisation draws from its own seeded generator, so a seed fixes the weights
at step 0 independently of anything else the process has drawn.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from training.settings import ModelSettings

VOCAB_SIZE = 256  # byte-level tokens
# Modules initialised with the wang init (they write into the residual stream).
OUTPUT_PROJECTIONS = ("attention.dense", "mlp.dense_4h_to_h")


def small_init_std(d_model: int) -> float:
    """sqrt(2 / (5 d_model)), Pythia's std for input-side weights."""
    return math.sqrt(2.0 / (5.0 * d_model))


def wang_init_std(n_layers: int, d_model: int) -> float:
    """2 / (n_layers sqrt(d_model)), Pythia's std for the residual output projections."""
    return 2.0 / (n_layers * math.sqrt(d_model))


def build_config(model: ModelSettings) -> GPTNeoXConfig:
    """A transformers config for ``model`` (saved as ``config.json`` in every checkpoint)."""
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


def build_model(model: ModelSettings, *, seed: int) -> GPTNeoXForCausalLM:
    """The step-0 model: built from `build_config`, initialised by `pythia_init`, float32."""
    net = GPTNeoXForCausalLM(build_config(model))
    pythia_init(net, seed=seed)
    return net.float()
