"""Per-head W_Q and W_K from raw checkpoint tensors, one adapter per architecture family.

Every adapter returns the one layout used everywhere after extraction:
``W_Q, W_K: (n_layers, n_heads, d_head, d_model)``, float32, such that the
model's own per-head query (before rotary embedding, without bias) is
``q_h = x @ W_Q[layer, h].T`` for the attention block's (normalized) input x.

Architecture quirks live here and nowhere else:

- GPT-NeoX / Pythia: ``attention.query_key_value.weight`` is ``(3 d_model, d_model)``
  interleaved per head: rows view as ``(n_heads, 3, d_head, d_model)`` with
  ``[h, 0]`` = Q, ``[h, 1]`` = K, ``[h, 2]`` = V. (A flat ``chunk(3)`` would
  mix heads.)
- GPT-2: ``attn.c_attn.weight`` is a Conv1D weight ``(d_model, 3 d_model)``;
  transpose, then rows are ``[Q | K | V]``, each head-major.
- Llama-style (Llama, Mistral, OLMo, Qwen2): separate ``q_proj``/``k_proj``
  (``(n_heads d_head, d_model)`` and ``(n_kv_heads d_head, d_model)``); with
  grouped-query attention K head ``j`` serves the ``n_heads / n_kv_heads``
  consecutive query heads ``j*g .. j*g + g - 1``, so K is repeated per query head.

Tensor names are matched with any module prefix (``gpt_neox.``, ``transformer.``,
``model.`` or none), so both ``*ForCausalLM`` and base-model checkpoints work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from analysis.errors import CheckpointError, UnknownArchitectureError


@dataclass(frozen=True)
class ModelShape:
    """What extraction needs to know about a model, read from its ``config.json``."""

    family: str
    model_type: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int

    def as_meta(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "model_type": self.model_type,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "d_model": self.d_model,
            "d_head": self.d_head,
        }


# model_type (config.json) -> adapter family
FAMILIES: dict[str, str] = {
    "gpt_neox": "gpt_neox",
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "olmo": "llama",
    "qwen2": "llama",
}

# family -> (regex per tensor role); group 1 is the layer index
_PATTERNS: dict[str, dict[str, re.Pattern[str]]] = {
    "gpt_neox": {"qkv": re.compile(r"^(?:.*\.)?layers\.(\d+)\.attention\.query_key_value\.weight$")},
    "gpt2": {"c_attn": re.compile(r"^(?:.*\.)?h\.(\d+)\.attn\.c_attn\.weight$")},
    "llama": {
        "q": re.compile(r"^(?:.*\.)?layers\.(\d+)\.self_attn\.q_proj\.weight$"),
        "k": re.compile(r"^(?:.*\.)?layers\.(\d+)\.self_attn\.k_proj\.weight$"),
    },
}


def _get(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    raise CheckpointError(f"config.json lacks {' / '.join(keys)}; cannot size the attention heads")


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """Read the attention geometry from a transformers ``config.json`` dict.

    d_head is the config's ``head_dim`` when it has one, else d_model / n_heads.

    Raises:
        UnknownArchitectureError: ``model_type`` has no adapter.
        CheckpointError: required sizes are missing or inconsistent.
    """
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise UnknownArchitectureError(
            f"model_type {model_type!r} is not supported; supported: {', '.join(sorted(FAMILIES))}. "
            "Add an adapter in analysis/extract.py for a new family."
        )
    family = FAMILIES[model_type]
    n_layers = int(_get(config, "num_hidden_layers", "n_layer"))
    n_heads = int(_get(config, "num_attention_heads", "n_head"))
    d_model = int(_get(config, "hidden_size", "n_embd"))
    n_kv = int(config.get("num_key_value_heads") or n_heads) if family == "llama" else n_heads
    if config.get("head_dim"):
        d_head = int(config["head_dim"])
    elif d_model % n_heads:
        raise CheckpointError(f"d_model={d_model} is not divisible by n_heads={n_heads} and config has no head_dim")
    else:
        d_head = d_model // n_heads
    if n_heads % n_kv:
        raise CheckpointError(f"n_heads={n_heads} is not a multiple of num_key_value_heads={n_kv}")
    return ModelShape(family, model_type, n_layers, n_heads, n_kv, d_model, d_head)


def attention_tensor_names(shape: ModelShape, names: Iterable[str]) -> list[str]:
    """The checkpoint tensors holding W_Q and W_K, one set per layer, in layer order.

    Args:
        shape: from `model_shape`.
        names: every tensor name in the checkpoint (all shards).

    Raises:
        CheckpointError: a layer's tensor is missing or matched twice.
    """
    found: dict[tuple[str, int], str] = {}
    for name in names:
        for role, pattern in _PATTERNS[shape.family].items():
            m = pattern.match(name)
            if m:
                key = (role, int(m.group(1)))
                if key in found:
                    raise CheckpointError(f"two tensors match layer {key[1]} {role}: {found[key]!r} and {name!r}")
                found[key] = name
    out = []
    for layer in range(shape.n_layers):
        for role in _PATTERNS[shape.family]:
            if (role, layer) not in found:
                raise CheckpointError(
                    f"no {role} weight for layer {layer} of a {shape.model_type} model "
                    f"(expected a name like {_PATTERNS[shape.family][role].pattern!r})"
                )
            out.append(found[(role, layer)])
    return out


def extract_qk(shape: ModelShape, tensors: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head W_Q and W_K from the tensors named by `attention_tensor_names`.

    Args:
        shape: from `model_shape`.
        tensors: name -> tensor, at least the attention tensors.

    Returns:
        ``(W_Q, W_K)``, each ``(n_layers, n_heads, d_head, d_model)`` float32.

    Raises:
        CheckpointError: a tensor has the wrong shape.
    """
    names = attention_tensor_names(shape, tensors.keys())
    per_role = len(_PATTERNS[shape.family])
    qs, ks = [], []
    for layer in range(shape.n_layers):
        layer_tensors = [tensors[n].to(torch.float32) for n in names[layer * per_role : (layer + 1) * per_role]]
        q, k = _ADAPTERS[shape.family](shape, *layer_tensors)
        qs.append(q)
        ks.append(k)
    return torch.stack(qs), torch.stack(ks)


def _check(t: torch.Tensor, expected: tuple[int, ...], what: str) -> None:
    if tuple(t.shape) != expected:
        raise CheckpointError(f"{what} has shape {tuple(t.shape)}, expected {expected} from config.json")


def _neox(shape: ModelShape, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    _check(qkv, (3 * h * d, m), "query_key_value.weight")
    per_head = qkv.view(h, 3, d, m)  # (n_heads, 3, d_head, d_model), interleaved per head
    return per_head[:, 0], per_head[:, 1]


def _gpt2(shape: ModelShape, c_attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    _check(c_attn, (m, 3 * h * d), "c_attn.weight (Conv1D)")
    rows = c_attn.T  # (3 * n_heads * d_head, d_model): [Q | K | V]
    q, k, _ = rows.split(h * d, dim=0)
    return q.reshape(h, d, m), k.reshape(h, d, m)  # (n_heads, d_head, d_model)


def _llama(shape: ModelShape, q_proj: torch.Tensor, k_proj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, kv, d, m = shape.n_heads, shape.n_kv_heads, shape.d_head, shape.d_model
    _check(q_proj, (h * d, m), "q_proj.weight")
    _check(k_proj, (kv * d, m), "k_proj.weight")
    q = q_proj.view(h, d, m)  # (n_heads, d_head, d_model)
    k = k_proj.view(kv, d, m).repeat_interleave(h // kv, dim=0)  # (n_heads, d_head, d_model)
    return q, k


_ADAPTERS = {"gpt_neox": _neox, "gpt2": _gpt2, "llama": _llama}
