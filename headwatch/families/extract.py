"""Per-head factors of W_QK and W_OV from raw checkpoint tensors, through each family's adapter.

Every family's adapter (`families.family.Family.qk`, `Family.ov`) returns the one layout used everywhere after
extraction: ``W_Q, W_K: (n_layers, n_heads, d_head, d_model)``, float32, such that the model's own per-head query
(before rotary embedding, without bias) is ``q_h = x @ W_Q[layer, h].T`` for the attention block's (normalized)
input x.

The OV circuit of head h, ``W_OV,h = W_O[:, h] W_V,h`` (docs/design-notes.md section 7), comes in
the same layout as the pair ``(W_O^T, W_V)``: ``W_O^T[layer, h]`` is the transpose of the
output projection's d_head input columns that read head h, ``W_V[layer, h]`` the
value rows of head h, so ``W_OV,h = W_O^T[layer, h].T @ W_V[layer, h]`` exactly as
``W_QK,h = W_Q[layer, h].T @ W_K[layer, h]``, and ``W_OV,h @ x`` is head h's
contribution to the attention output (before the output bias) for a token that
attends only to itself. `extract_heads` returns both pairs, keyed ``"qk"`` / ``"ov"``.

The architecture quirks (fused, interleaved, Conv1D, grouped-query) are each family's, in its adapter
(`families.gpt_neox`, `families.gpt2`, `families.llama`); this module only finds each layer's tensors by the
family's name patterns and stacks what the adapter cuts from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from headwatch.analysis.errors import CheckpointError
from headwatch.families.family import HEAD_MATRICES, ModelShape
from headwatch.families.registry import family_of


def _roles(shape: ModelShape, matrices: Iterable[str]) -> list[str]:
    """The tensor roles the given matrices need, in the family's role order."""
    matrices = tuple(matrices)
    unknown = [m for m in matrices if m not in HEAD_MATRICES]
    if unknown or not matrices:
        raise ValueError(f"unknown per-head matrices {unknown or matrices!r}; choose from {HEAD_MATRICES}")
    family = family_of(shape)
    wanted = {role for m in matrices for role in family.matrix_roles[m]}
    return [role for role in family.attention if role in wanted]


def attention_tensor_names(shape: ModelShape, names: Iterable[str], *, matrices: Iterable[str] = ("qk",)) -> list[str]:
    """The checkpoint tensors holding the factors of ``matrices``, one set per layer, in layer order.

    Args:
        shape: from `families.registry.model_shape`.
        names: every tensor name in the checkpoint (all shards).
        matrices: per-head products to extract (`HEAD_MATRICES`): ``qk`` needs the query and key
            weights, ``ov`` the value weights and the output projection.

    Raises:
        CheckpointError: a layer's tensor is missing or matched twice.
        ValueError: an unknown matrix.
    """
    roles = _roles(shape, matrices)
    patterns = {role: family_of(shape).attention[role] for role in roles}
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
        shape: from `families.registry.model_shape`.
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
    family = family_of(shape)
    roles = _roles(shape, matrices)
    names = attention_tensor_names(shape, tensors.keys(), matrices=matrices)
    per_layer = len(roles)
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for layer in range(shape.n_layers):
        by_role = dict(zip(roles, (tensors[name] for name in names[layer * per_layer : (layer + 1) * per_layer]), strict=True))
        for m in matrices:
            # The adapters only index and reshape, so they run on the tensors as stored; each
            # factor is converted to float32 once, as it is copied into its place in the output.
            cut = family.qk if m == "qk" else family.ov
            pair = cut(shape, *(by_role[r] for r in family.matrix_roles[m]))
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
        shape: from `families.registry.model_shape`.
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
