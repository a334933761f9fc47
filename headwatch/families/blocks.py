"""Every 2-D weight of each transformer block, by role, as the checkpoint stores it, through each family's adapter.

The whole-layer matrices (docs/design-notes.md section 7) are taken as stored: no splitting
into heads, no transposing of GPT-2's Conv1D weights (singular values do not depend
on the orientation), biases and norms left out. Each family's adapter declares its roles and their
tensor names (`families.family.Family.blocks`: `families.gpt_neox`, `families.gpt2`, `families.llama`).
Torch-free: the weights are passed through as given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from headwatch.analysis.errors import CheckpointError
from headwatch.analysis.store.lenses.layers import LAYER_ROLES
from headwatch.families.family import ModelShape, Tensor
from headwatch.families.registry import BY_NAME, family_of

# Every role any family has, in display order (a store's roles are a subset): the store format's list.
ROLES: tuple[str, ...] = LAYER_ROLES


def block_roles(family: str) -> tuple[str, ...]:
    """The roles a family's blocks have, in display order."""
    return tuple(BY_NAME[family].blocks)


def block_tensor_names(shape: ModelShape, names: Iterable[str]) -> dict[tuple[int, str], str]:
    """The checkpoint tensor of every (layer, role), in layer then role order.

    Args:
        shape: from `families.registry.model_shape`.
        names: every tensor name in the checkpoint (all shards).

    Raises:
        CheckpointError: a layer lacks a role's tensor, or two tensors match one.
    """
    patterns = family_of(shape).blocks
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


def extract_blocks(shape: ModelShape, tensors: Mapping[str, Tensor]) -> dict[str, list[Tensor]]:
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
