"""Every 2-D weight of each transformer block, by role, as the checkpoint stores it.

The whole-layer matrices (docs/design-notes.md section 7) are taken as stored: no splitting
into heads, no transposing of GPT-2's Conv1D weights (singular values do not depend
on the orientation), biases and norms left out. One role table per family, the same
families as `analysis.extract`:

- GPT-NeoX / Pythia: ``attn_qkv`` (the fused, per-head interleaved
  ``attention.query_key_value``), ``attn_out`` (``attention.dense``), ``mlp_in``
  (``mlp.dense_h_to_4h``), ``mlp_out`` (``mlp.dense_4h_to_h``);
- GPT-2: ``attn_qkv`` (``attn.c_attn``), ``attn_out`` (``attn.c_proj``), ``mlp_in``
  (``mlp.c_fc``), ``mlp_out`` (``mlp.c_proj``), all Conv1D ``(in, out)``;
- Llama-style: ``attn_q``, ``attn_k``, ``attn_v`` (``q_proj``, ``k_proj``, ``v_proj``,
  K and V with ``n_kv_heads`` heads), ``attn_out`` (``o_proj``), ``mlp_gate``
  (``gate_proj``), ``mlp_in`` (``up_proj``), ``mlp_out`` (``down_proj``).

Names match with any module prefix, as in `analysis.extract`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import torch

from headwatch.analysis.errors import CheckpointError
from headwatch.analysis.extract import ModelShape
from headwatch.analysis.store.lenses.layers import LAYER_ROLES

_L = r"^(?:.*\.)?"

# family -> role -> tensor-name pattern (group 1: the layer index), in display order
BLOCK_PATTERNS: dict[str, dict[str, re.Pattern[str]]] = {
    "gpt_neox": {
        "attn_qkv": re.compile(_L + r"layers\.(\d+)\.attention\.query_key_value\.weight$"),
        "attn_out": re.compile(_L + r"layers\.(\d+)\.attention\.dense\.weight$"),
        "mlp_in": re.compile(_L + r"layers\.(\d+)\.mlp\.dense_h_to_4h\.weight$"),
        "mlp_out": re.compile(_L + r"layers\.(\d+)\.mlp\.dense_4h_to_h\.weight$"),
    },
    "gpt2": {
        "attn_qkv": re.compile(_L + r"h\.(\d+)\.attn\.c_attn\.weight$"),
        "attn_out": re.compile(_L + r"h\.(\d+)\.attn\.c_proj\.weight$"),
        "mlp_in": re.compile(_L + r"h\.(\d+)\.mlp\.c_fc\.weight$"),
        "mlp_out": re.compile(_L + r"h\.(\d+)\.mlp\.c_proj\.weight$"),
    },
    "llama": {
        "attn_q": re.compile(_L + r"layers\.(\d+)\.self_attn\.q_proj\.weight$"),
        "attn_k": re.compile(_L + r"layers\.(\d+)\.self_attn\.k_proj\.weight$"),
        "attn_v": re.compile(_L + r"layers\.(\d+)\.self_attn\.v_proj\.weight$"),
        "attn_out": re.compile(_L + r"layers\.(\d+)\.self_attn\.o_proj\.weight$"),
        "mlp_gate": re.compile(_L + r"layers\.(\d+)\.mlp\.gate_proj\.weight$"),
        "mlp_in": re.compile(_L + r"layers\.(\d+)\.mlp\.up_proj\.weight$"),
        "mlp_out": re.compile(_L + r"layers\.(\d+)\.mlp\.down_proj\.weight$"),
    },
}

# Every role any family has, in display order (a store's roles are a subset): the store format's list.
ROLES: tuple[str, ...] = LAYER_ROLES


def block_roles(family: str) -> tuple[str, ...]:
    """The roles a family's blocks have, in display order."""
    return tuple(BLOCK_PATTERNS[family])


def block_tensor_names(shape: ModelShape, names: Iterable[str]) -> dict[tuple[int, str], str]:
    """The checkpoint tensor of every (layer, role), in layer then role order.

    Args:
        shape: from `analysis.extract.model_shape`.
        names: every tensor name in the checkpoint (all shards).

    Raises:
        CheckpointError: a layer lacks a role's tensor, or two tensors match one.
    """
    patterns = BLOCK_PATTERNS[shape.family]
    found: dict[tuple[int, str], str] = {}
    for name in names:
        for role, pattern in patterns.items():
            m = pattern.match(name)
            if m:
                key = (int(m.group(1)), role)
                if key in found:
                    raise CheckpointError(f"two tensors match layer {key[0]} {role}: {found[key]!r} and {name!r}")
                found[key] = name
    out = {}
    for layer in range(shape.n_layers):
        for role, pattern in patterns.items():
            if (layer, role) not in found:
                raise CheckpointError(
                    f"no {role} weight for layer {layer} of a {shape.model_type} model (expected a name like {pattern.pattern!r})"
                )
            out[(layer, role)] = found[(layer, role)]
    return out


def extract_blocks(shape: ModelShape, tensors: Mapping[str, torch.Tensor]) -> dict[str, list[torch.Tensor]]:
    """Each role's weights, one ``(rows, cols)`` tensor per layer as stored (not copied).

    Args:
        shape: the model.
        tensors: name -> tensor, at least those of `block_tensor_names`.

    Raises:
        CheckpointError: a tensor is not 2-D, or one layer's shape differs from another's.
    """
    names = block_tensor_names(shape, tensors.keys())
    out = {}
    for role in block_roles(shape.family):
        per_layer = [tensors[names[(layer, role)]] for layer in range(shape.n_layers)]
        first = tuple(per_layer[0].shape)
        for layer, t in enumerate(per_layer):
            if t.ndim != 2 or tuple(t.shape) != first:
                raise CheckpointError(
                    f"{names[(layer, role)]!r} has shape {tuple(t.shape)}; expected a 2-D weight like layer 0's {first}"
                )
        out[role] = per_layer  # n_layers x (rows, cols)
    return out
