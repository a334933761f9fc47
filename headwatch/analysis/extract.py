"""Per-head factors of W_QK and W_OV from raw checkpoint tensors, one adapter per architecture family.

Every adapter returns the one layout used everywhere after extraction:
``W_Q, W_K: (n_layers, n_heads, d_head, d_model)``, float32, such that the
model's own per-head query (before rotary embedding, without bias) is
``q_h = x @ W_Q[layer, h].T`` for the attention block's (normalized) input x.

The OV circuit of head h, ``W_OV,h = W_O[:, h] W_V,h`` (docs/design-notes.md section 7), comes in
the same layout as the pair ``(W_O^T, W_V)``: ``W_O^T[layer, h]`` is the transpose of the
output projection's d_head input columns that read head h, ``W_V[layer, h]`` the
value rows of head h, so ``W_OV,h = W_O^T[layer, h].T @ W_V[layer, h]`` exactly as
``W_QK,h = W_Q[layer, h].T @ W_K[layer, h]``, and ``W_OV,h @ x`` is head h's
contribution to the attention output (before the output bias) for a token that
attends only to itself. `extract_heads` returns both pairs, keyed ``"qk"`` / ``"ov"``.

Architecture quirks live here and nowhere else:

- GPT-NeoX / Pythia: ``attention.query_key_value.weight`` is ``(3 d_model, d_model)``
  interleaved per head: rows view as ``(n_heads, 3, d_head, d_model)`` with
  ``[h, 0]`` = Q, ``[h, 1]`` = K, ``[h, 2]`` = V. (A flat ``chunk(3)`` would
  mix heads.)
  The output projection ``attention.dense.weight`` is an ``nn.Linear`` ``(d_model, n_heads d_head)``
  whose input columns are head-major.
- GPT-2: ``attn.c_attn.weight`` is a Conv1D weight ``(d_model, 3 d_model)``;
  transpose, then rows are ``[Q | K | V]``, each head-major. ``attn.c_proj.weight`` is a
  Conv1D ``(n_heads d_head, d_model)``: its rows are the heads' inputs, so its head-h row
  block is ``W_O^T[h]`` as it stands.
- Llama-style (Llama, Mistral, OLMo, Qwen2): separate ``q_proj``/``k_proj``
  (``(n_heads d_head, d_model)`` and ``(n_kv_heads d_head, d_model)``); with
  grouped-query attention K head ``j`` serves the ``n_heads / n_kv_heads``
  consecutive query heads ``j*g .. j*g + g - 1``, so K is repeated per query head, and
  V likewise; ``o_proj`` is an ``nn.Linear`` ``(d_model, n_heads d_head)``.

Tensor names are matched with any module prefix (``gpt_neox.``, ``transformer.``,
``model.`` or none), so both ``*ForCausalLM`` and base-model checkpoints work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from headwatch.analysis.errors import CheckpointError, UnknownArchitectureError


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

# Per-head products a store can hold: W_QK = W_Q^T W_K and W_OV = W_O[:, h] W_V,h.
HEAD_MATRICES = ("qk", "ov")

# family -> (regex per tensor role); group 1 is the layer index
_PATTERNS: dict[str, dict[str, re.Pattern[str]]] = {
    "gpt_neox": {
        "qkv": re.compile(r"^(?:.*\.)?layers\.(\d+)\.attention\.query_key_value\.weight$"),
        "dense": re.compile(r"^(?:.*\.)?layers\.(\d+)\.attention\.dense\.weight$"),
    },
    "gpt2": {
        "c_attn": re.compile(r"^(?:.*\.)?h\.(\d+)\.attn\.c_attn\.weight$"),
        "c_proj": re.compile(r"^(?:.*\.)?h\.(\d+)\.attn\.c_proj\.weight$"),
    },
    "llama": {
        "q": re.compile(r"^(?:.*\.)?layers\.(\d+)\.self_attn\.q_proj\.weight$"),
        "k": re.compile(r"^(?:.*\.)?layers\.(\d+)\.self_attn\.k_proj\.weight$"),
        "v": re.compile(r"^(?:.*\.)?layers\.(\d+)\.self_attn\.v_proj\.weight$"),
        "o": re.compile(r"^(?:.*\.)?layers\.(\d+)\.self_attn\.o_proj\.weight$"),
    },
}

# family -> matrix -> the tensor roles its adapter reads, in argument order
_ROLES: dict[str, dict[str, tuple[str, ...]]] = {
    "gpt_neox": {"qk": ("qkv",), "ov": ("qkv", "dense")},
    "gpt2": {"qk": ("c_attn",), "ov": ("c_attn", "c_proj")},
    "llama": {"qk": ("q", "k"), "ov": ("v", "o")},
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


def _roles(shape: ModelShape, matrices: Iterable[str]) -> list[str]:
    """The tensor roles the given matrices need, in the family's role order."""
    matrices = tuple(matrices)
    unknown = [m for m in matrices if m not in HEAD_MATRICES]
    if unknown or not matrices:
        raise ValueError(f"unknown per-head matrices {unknown or matrices!r}; choose from {HEAD_MATRICES}")
    wanted = {role for m in matrices for role in _ROLES[shape.family][m]}
    return [role for role in _PATTERNS[shape.family] if role in wanted]


def attention_tensor_names(shape: ModelShape, names: Iterable[str], *, matrices: Iterable[str] = ("qk",)) -> list[str]:
    """The checkpoint tensors holding the factors of ``matrices``, one set per layer, in layer order.

    Args:
        shape: from `model_shape`.
        names: every tensor name in the checkpoint (all shards).
        matrices: per-head products to extract (`HEAD_MATRICES`): ``qk`` needs the query and key
            weights, ``ov`` the value weights and the output projection.

    Raises:
        CheckpointError: a layer's tensor is missing or matched twice.
        ValueError: an unknown matrix.
    """
    roles = _roles(shape, matrices)
    patterns = {role: _PATTERNS[shape.family][role] for role in roles}
    found: dict[tuple[str, int], str] = {}
    for name in names:
        for role, pattern in patterns.items():
            m = pattern.match(name)
            if m:
                key = (role, int(m.group(1)))
                if key in found:
                    raise CheckpointError(f"two tensors match layer {key[1]} {role}: {found[key]!r} and {name!r}")
                found[key] = name
    out = []
    for layer in range(shape.n_layers):
        for role in roles:
            if (role, layer) not in found:
                raise CheckpointError(
                    f"no {role} weight for layer {layer} of a {shape.model_type} model "
                    f"(expected a name like {patterns[role].pattern!r})"
                )
            out.append(found[(role, layer)])
    return out


def extract_heads(
    shape: ModelShape, tensors: Mapping[str, torch.Tensor], *, matrices: Iterable[str] = HEAD_MATRICES
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per-head factor pairs of every product in ``matrices``.

    Args:
        shape: from `model_shape`.
        tensors: name -> tensor, at least those `attention_tensor_names` names for ``matrices``.
        matrices: ``qk`` and/or ``ov``.

    Returns:
        matrix -> ``(left, right)``, each ``(n_layers, n_heads, d_head, d_model)`` float32, with the
        product ``left[l, h].T @ right[l, h]``: ``qk`` -> ``(W_Q, W_K)``, ``ov`` -> ``(W_O^T, W_V)``.

    Raises:
        CheckpointError: a tensor is missing or has the wrong shape.
        ValueError: an unknown matrix.
    """
    matrices = tuple(matrices)
    roles = _roles(shape, matrices)
    names = attention_tensor_names(shape, tensors.keys(), matrices=matrices)
    per_layer = len(roles)
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for layer in range(shape.n_layers):
        by_role = dict(zip(roles, (tensors[name] for name in names[layer * per_layer : (layer + 1) * per_layer]), strict=True))
        for m in matrices:
            # The adapters only index and reshape, so they run on the tensors as stored; each
            # factor is converted to float32 once, as it is copied into its place in the output.
            pair = _ADAPTERS[m][shape.family](shape, *(by_role[r] for r in _ROLES[shape.family][m]))
            if m not in out:
                left, right = pair
                out[m] = (
                    torch.empty((shape.n_layers, *left.shape), dtype=torch.float32),
                    torch.empty((shape.n_layers, *right.shape), dtype=torch.float32),
                )
            for dest, t in zip(out[m], pair, strict=True):
                dest[layer].copy_(t)
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
    return extract_heads(shape, tensors, matrices=("qk",))["qk"]


def extract_ov(shape: ModelShape, tensors: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head ``W_O^T`` and ``W_V``: ``W_OV,h = W_O^T[l, h].T @ W_V[l, h]`` (see the module docstring).

    Returns:
        ``(W_O^T, W_V)``, each ``(n_layers, n_heads, d_head, d_model)`` float32.

    Raises:
        CheckpointError: a tensor is missing or has the wrong shape.
    """
    return extract_heads(shape, tensors, matrices=("ov",))["ov"]


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


def _neox_ov(shape: ModelShape, qkv: torch.Tensor, dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    _check(qkv, (3 * h * d, m), "query_key_value.weight")
    _check(dense, (m, h * d), "attention.dense.weight")
    v = qkv.view(h, 3, d, m)[:, 2]  # (n_heads, d_head, d_model), interleaved per head
    o_t = dense.T.reshape(h, d, m)  # (n_heads, d_head, d_model): W_O[:, h]^T, head-major input columns
    return o_t, v


def _gpt2_ov(shape: ModelShape, c_attn: torch.Tensor, c_proj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    _check(c_attn, (m, 3 * h * d), "c_attn.weight (Conv1D)")
    _check(c_proj, (h * d, m), "attn.c_proj.weight (Conv1D)")
    v = c_attn.T.split(h * d, dim=0)[2].reshape(h, d, m)  # (n_heads, d_head, d_model)
    o_t = c_proj.reshape(h, d, m)  # Conv1D (in, out): rows are the heads' inputs, i.e. W_O^T
    return o_t, v


def _llama_ov(shape: ModelShape, v_proj: torch.Tensor, o_proj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, kv, d, m = shape.n_heads, shape.n_kv_heads, shape.d_head, shape.d_model
    _check(v_proj, (kv * d, m), "v_proj.weight")
    _check(o_proj, (m, h * d), "o_proj.weight")
    v = v_proj.view(kv, d, m).repeat_interleave(h // kv, dim=0)  # (n_heads, d_head, d_model)
    o_t = o_proj.T.reshape(h, d, m)  # (n_heads, d_head, d_model)
    return o_t, v


# matrix -> family -> adapter
_ADAPTERS: dict[str, dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]]] = {
    "qk": {"gpt_neox": _neox, "gpt2": _gpt2, "llama": _llama},
    "ov": {"gpt_neox": _neox_ov, "gpt2": _gpt2_ov, "llama": _llama_ov},
}
