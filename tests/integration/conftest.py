"""Small real checkpoints saved by transformers, for the precompute end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.integration import zygote

REPO = Path(__file__).resolve().parents[2]


def neox_model(*, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0):
    """A tiny random GPT-NeoX (Pythia architecture) causal LM."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=64,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        rotary_pct=0.25,
    )
    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(config)


def perturb(model, step: int) -> None:
    """Move every weight a little, deterministically per step (a stand-in for training)."""
    gen = torch.Generator().manual_seed(1000 + step)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))


def make_suite(root: Path, steps: list[int], *, duplicate: dict[int, int] | None = None, **save_kwargs) -> Path:
    """Save one checkpoint per step under ``root/step<N>``; ``duplicate={b: a}`` saves step b
    with exactly step a's weights."""
    model = neox_model()
    duplicate = duplicate or {}
    states: dict[int, dict[str, torch.Tensor]] = {}
    for step in steps:
        if step in duplicate:
            model.load_state_dict(states[duplicate[step]])
        else:
            perturb(model, step)
        states[step] = {k: v.clone() for k, v in model.state_dict().items()}
        model.save_pretrained(root / f"step{step}", **save_kwargs)
    return root


def run_cli(*args: str, timeout: float = 300, embeddings: bool = False) -> subprocess.CompletedProcess:
    """``python -m headwatch.precompute ARGS`` in a process of its own from the repository root.

    The process is forked from a server that has already imported torch, transformers and the job
    (`tests.integration.zygote`): the same fresh process state as ``python -m headwatch.precompute``, without its
    five CPU-seconds of imports, which a suite of a hundred and fifty such runs paid again and again. An
    environment that differs from the server's in what those imports read (HF_*, TORCH*, ...) runs in a
    plain subprocess instead.
    """
    # The trajectory-map embeddings (UMAP, numba-compiled) have their own tests; skipping
    # them here keeps each CLI run to its checkpoints (``embeddings=True``: made as by default).
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "1" if embeddings else "0"}
    argv = ["--no-progress", *args]
    done = zygote.run_precompute(argv, env=env, cwd=REPO, timeout=timeout)
    if done is not None:
        return done
    return subprocess.run(
        [sys.executable, "-m", "headwatch.precompute", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """Four safetensors checkpoints; step 8 carries step 4's weights byte for byte."""
    return make_suite(tmp_path / "suite", [0, 1, 4, 8], duplicate={8: 4})


def save_bin(model, folder: Path, *, shards: int = 1) -> None:
    """Save as transformers 4 did without safetensors: ``torch.save`` of the state dict as
    ``pytorch_model.bin``, or ``shards`` files plus ``pytorch_model.bin.index.json``."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if shards == 1:
        torch.save(state, folder / "pytorch_model.bin")
        return
    names = sorted(state)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        fname = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        torch.save({k: state[k] for k in part}, folder / fname)
        weight_map.update({k: fname for k in part})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())}, "weight_map": weight_map}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
