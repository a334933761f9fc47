"""A model family is one adapter (headwatch/families/): every dispatch on a checkpoint's family goes through the
registry, so a family added there is read by the extraction, the block layout, the cost geometry and the forward's
refusal without any other module naming it.

- No module outside ``headwatch/families/`` spells a family's name or model type as a string literal.
- A toy family, registered for one test, is read end to end by the generic code: its shape, its per-head factors
  (against slicing written here), its blocks, its geometry, and the batched forward's and the devinterp mask's
  refusals by name.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.families import registry
from headwatch.families.blocks import block_roles, block_tensor_names, extract_blocks
from headwatch.families.extract import attention_tensor_names, extract_heads
from headwatch.families.family import Family, ModelShape, Patterns, Roles, Tensor, check_shape, tensor_pattern
from headwatch.families.forward import check_config
from headwatch.families.registry import model_geometry, model_shape

REPO = Path(__file__).resolve().parents[2]
# training/ builds the reference runs' models (the architectures it trains, by their transformers config class);
# it reads no checkpoint's family.
OUTSIDE = ("headwatch/families/", "headwatch/training/")
# the same words in another sense: a Hub suite's branch-name scheme (`step<N>-tokens<M>`, OLMo's), not a model type
OTHER_SENSES = {("headwatch/precompute/sources/revisions.py", "olmo")}


def test_no_module_outside_the_families_names_a_family() -> None:
    names = set(registry.MODEL_TYPES) | set(registry.BY_NAME)
    found = []
    for path in sorted((REPO / "headwatch").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(OUTSIDE):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.Constant) and node.value in names and (rel, node.value) not in OTHER_SENSES:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not found, "dispatch on a family through headwatch.families.registry:\n" + "\n".join(found)


def test_an_unknown_model_type_is_refused_with_the_supported_list() -> None:
    with pytest.raises(UnknownArchitectureError) as err:
        model_shape({"model_type": "bert", "num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8})
    supported = ", ".join(sorted(registry.MODEL_TYPES))
    assert str(err.value).startswith(f"model_type 'bert' is not supported; supported: {supported}. ")
    assert {"gpt2", "gpt_neox", "llama", "olmo2", "qwen3"} <= set(registry.MODEL_TYPES)
    for model_type in ("gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_neox", "gptj", "llama", "phi3", "qwen2"):
        assert model_type in supported.split(", ")


def test_each_model_type_is_read_by_one_family() -> None:
    declared = [t for family in registry.FAMILIES for t in family.model_types]
    assert len(declared) == len(set(declared)) == len(registry.MODEL_TYPES)
    assert len(registry.BY_NAME) == len(registry.FAMILIES)
    for family in registry.FAMILIES:
        assert set(family.matrix_roles) == {"qk", "ov"}
        assert {r for roles in family.matrix_roles.values() for r in roles} <= set(family.attention), family.name


# ---------------------------------------------------------------------------------------------- a toy family

H, D, M, L = 2, 4, 8, 2  # heads, d_head, d_model, layers
QKV = tensor_pattern(r"blocks\.(\d+)\.mix\.wqkv\.weight")  # (3 H D, M): rows [Q | K | V], each head-major
WO = tensor_pattern(r"blocks\.(\d+)\.mix\.wo\.weight")  # nn.Linear (M, H D)


class Toy(Family):
    name = "toy"
    model_types = ("toy", "toy_too")
    attention: ClassVar[Patterns] = {"wqkv": QKV, "wo": WO}
    matrix_roles: ClassVar[Roles] = {"qk": ("wqkv",), "ov": ("wqkv", "wo")}
    blocks: ClassVar[Patterns] = {
        "attn_qkv": QKV,
        "attn_out": WO,
        "mlp_in": tensor_pattern(r"blocks\.(\d+)\.ff\.w1\.weight"),
        "mlp_out": tensor_pattern(r"blocks\.(\d+)\.ff\.w2\.weight"),
    }

    def qk(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        (w,) = tensors
        check_shape(w, (3 * shape.n_heads * shape.d_head, shape.d_model), "wqkv.weight")
        q, k, _ = w.view(3, shape.n_heads, shape.d_head, shape.d_model)  # (n_heads, d_head, d_model) each
        return q, k

    def ov(self, shape: ModelShape, *tensors: Tensor) -> tuple[Tensor, Tensor]:
        w, wo = tensors
        v = w.view(3, shape.n_heads, shape.d_head, shape.d_model)[2]
        return wo.T.reshape(shape.n_heads, shape.d_head, shape.d_model), v

    def parallel_residual(self, config: Any) -> bool:
        return True


@pytest.fixture
def toy(monkeypatch) -> Toy:
    family = Toy()
    for model_type in family.model_types:
        monkeypatch.setitem(registry.MODEL_TYPES, model_type, family)
    monkeypatch.setitem(registry.BY_NAME, family.name, family)
    return family


def test_a_registered_family_is_read_by_the_generic_code(toy: Toy) -> None:
    config = {"model_type": "toy_too", "num_hidden_layers": L, "num_attention_heads": H, "hidden_size": M}
    config |= {"intermediate_size": 32, "vocab_size": 50}
    shape = model_shape(config)
    assert shape == ModelShape("toy", "toy_too", L, H, H, M, D)
    gen = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(L):
        tensors[f"model.blocks.{layer}.mix.wqkv.weight"] = torch.randn(3 * H * D, M, generator=gen, dtype=torch.float64)
        tensors[f"model.blocks.{layer}.mix.wo.weight"] = torch.randn(M, H * D, generator=gen, dtype=torch.float64)
        tensors[f"model.blocks.{layer}.ff.w1.weight"] = torch.randn(32, M, generator=gen)
        tensors[f"model.blocks.{layer}.ff.w2.weight"] = torch.randn(M, 32, generator=gen)
    assert attention_tensor_names(shape, tensors, matrices=("qk",)) == [
        f"model.blocks.{layer}.mix.wqkv.weight" for layer in range(L)
    ]
    got = extract_heads(shape, tensors)
    for layer in range(L):
        w, wo = tensors[f"model.blocks.{layer}.mix.wqkv.weight"], tensors[f"model.blocks.{layer}.mix.wo.weight"]
        for h in range(H):
            q, k, v = (w[(part * H + h) * D : (part * H + h + 1) * D] for part in range(3))  # (D, M) each
            o = wo[:, h * D : (h + 1) * D]  # (M, D): the output columns that read head h
            want = {"qk": (q, k), "ov": (o.T, v)}  # W_QK = W_Q^T W_K, W_OV = W_O[:, h] W_V = (W_O^T)^T W_V
            for m in ("qk", "ov"):
                for factor, expected in zip(got[m], want[m], strict=True):
                    assert factor.dtype == torch.float32 and torch.equal(factor[layer, h], expected.float()), (m, layer, h)
    assert block_roles("toy") == ("attn_qkv", "attn_out", "mlp_in", "mlp_out")
    assert block_tensor_names(shape, tensors)[(1, "mlp_out")] == "model.blocks.1.ff.w2.weight"
    assert [tuple(t.shape) for t in extract_blocks(shape, tensors)["mlp_in"]] == [(32, M)] * L
    geometry = model_geometry(shape, config)
    assert (geometry.parallel, geometry.gated, geometry.d_mlp, geometry.vocab) == (True, False, 32, 50)
    with pytest.raises(UnknownArchitectureError, match="no forward pass for model_type 'toy_too'"):
        check_config(config)
