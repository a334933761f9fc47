"""The model families, by ``config.json``'s ``model_type``: whoever dispatches on a checkpoint's family asks here.

`FAMILIES` lists each family's adapter once (`families.family.Family`, one module each); `model_shape` reads a
config's attention geometry through its adapter, `family_of` gives the adapter of a shape or a config, and
`model_geometry` the geometry the cost counts see. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headwatch.analysis.errors import CheckpointError, UnknownArchitectureError
from headwatch.families.apertus import APERTUS
from headwatch.families.family import Family, ModelShape
from headwatch.families.flex_olmo import FLEX_OLMO
from headwatch.families.gemma2 import GEMMA2
from headwatch.families.gemma3 import GEMMA3
from headwatch.families.geometry import Geometry
from headwatch.families.gpt2 import GPT2
from headwatch.families.gpt_neox import GPT_NEOX
from headwatch.families.gptj import GPTJ
from headwatch.families.llama import LLAMA
from headwatch.families.olmo2 import OLMO2
from headwatch.families.olmoe import OLMOE
from headwatch.families.phi3 import PHI3
from headwatch.families.qwen3 import QWEN3
from headwatch.families.qwen3_moe import QWEN3_MOE

# Every family's adapter, in the order the refusals list them.
# Every family's adapter, in the order the refusals list them.
FAMILIES: tuple[Family, ...] = (
    *(GPT_NEOX, GPT2, LLAMA),
    *(OLMO2, OLMOE, FLEX_OLMO, QWEN3, QWEN3_MOE, APERTUS),  # QK-norm families on Llama's layout
    *(GEMMA3, GEMMA2, PHI3, GPTJ),
)
# config.json model_type -> its family's adapter
MODEL_TYPES: dict[str, Family] = {model_type: family for family in FAMILIES for model_type in family.model_types}
# meta.json model.family -> its adapter
BY_NAME: dict[str, Family] = {family.name: family for family in FAMILIES}


def family_for(model_type: Any) -> Family:
    """The adapter of a ``model_type``.

    Raises:
        UnknownArchitectureError: no family reads it; the message lists those that are read.
    """
    if model_type not in MODEL_TYPES:
        raise UnknownArchitectureError(
            f"model_type {model_type!r} is not supported; supported: {', '.join(sorted(MODEL_TYPES))}. "
            "Add an adapter in headwatch/families/ for a new family."
        )
    return MODEL_TYPES[model_type]


def language_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The part of a ``config.json`` its language model's sizes (vocabulary, context, MLP width) are read from: a
    multimodal checkpoint's ``text_config`` (`Family.text_config`), else the config itself (also for a
    ``model_type`` without an adapter)."""
    family = MODEL_TYPES.get(str(config.get("model_type", "")))
    return family.text_config(config) if family is not None else config


def folded_note(family: str) -> str:
    """What the per-head factors of a ``meta.json`` ``model.family`` hold besides the raw weights, in the words the
    model card, a published store's card and the composition and similarity records use: the norm gains its adapter
    folds (`Family.folded_norms`), the per-token RMS left out; empty for a family that folds nothing (or an unknown
    one)."""
    adapter = BY_NAME.get(family)
    return f"{adapter.folded_norms} (per-token RMS left out)" if adapter is not None and adapter.folded_norms else ""


def family_of(shape: ModelShape) -> Family:
    """The adapter a `ModelShape` was read with."""
    return BY_NAME[shape.family]


def _get(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    raise CheckpointError(f"config.json lacks {' / '.join(keys)}; cannot size the attention heads")


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """Read the attention geometry from a transformers ``config.json`` dict.

    d_head is the config's ``head_dim`` when it has one, else d_model / n_heads. A multimodal checkpoint's sizes are
    its language model's (`Family.text_config`); its ``model_type`` is the checkpoint's own.

    Raises:
        UnknownArchitectureError: ``model_type`` has no adapter.
        CheckpointError: required sizes are missing or inconsistent.
    """
    model_type = config.get("model_type")
    family = family_for(model_type)
    config = family.text_config(config)
    n_layers = int(_get(config, "num_hidden_layers", "n_layer"))
    n_heads = int(_get(config, "num_attention_heads", "n_head"))
    d_model = int(_get(config, "hidden_size", "n_embd"))
    n_kv = family.kv_heads(config, n_heads)
    if config.get("head_dim"):
        d_head = int(config["head_dim"])
    elif d_model % n_heads:
        raise CheckpointError(f"d_model={d_model} is not divisible by n_heads={n_heads} and config has no head_dim")
    else:
        d_head = d_model // n_heads
    if n_heads % n_kv:
        raise CheckpointError(f"n_heads={n_heads} is not a multiple of num_key_value_heads={n_kv}")
    return ModelShape(family.name, str(model_type), n_layers, n_heads, n_kv, d_model, d_head)


def model_geometry(shape: Any, config: Mapping[str, Any]) -> Geometry:
    """A model's `Geometry` from its shape (`ModelShape`, or any object with its sizes) and config, as its family's
    adapter reads it (`Family.geometry`).

    Raises:
        UnknownArchitectureError: the config's ``model_type`` has no adapter.
    """
    family = family_for(config.get("model_type"))
    return family.geometry(shape, family.text_config(config))
