"""The Hub fetch plan with and without the layer matrices, on the fake Hub (`benchmarks.fakehub`).

With ``layers`` selected every block weight is read whole (its bytes, from the file's
header, must be covered by the ranges fetched) and the layer table equals the one a
local-folder run writes; without it the block weights other than the attention
tensors are never touched.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pandas as pd
import pytest
from huggingface_hub import constants

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
from tests.integration.conftest import neox_model, perturb

BLOCK_SUFFIXES = (
    "attention.query_key_value.weight",
    "attention.dense.weight",
    "mlp.dense_h_to_4h.weight",
    "mlp.dense_4h_to_h.weight",
)


def _spans(path: Path) -> dict[str, tuple[int, int]]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    doc = json.loads(raw[8 : 8 + n])
    doc.pop("__metadata__", None)
    return {name: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1]) for name, v in doc.items()}


def _covered(span: tuple[int, int], ranges: list[tuple[int, int]]) -> int:
    """How many bytes of ``span`` the ranges cover."""
    a, b = span
    return sum(max(0, min(b, hi) - max(a, lo)) for lo, hi in ranges)


@pytest.fixture
def served(tmp_path: Path, monkeypatch):
    suite = tmp_path / "suite"
    model = neox_model()
    repo = Repo()
    for step in (1, 2):
        perturb(model, step)
        model.save_pretrained(suite / f"step{step}")
        repo.add(f"step{step}", folder_files(suite / f"step{step}"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HEADWATCH_RANGE_MERGE_GAP", "0")
    with FakeHub() as hub:
        hub.repos["org/tiny"] = repo
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield hub, repo, suite


@pytest.mark.parametrize("matrices", [("qk", "ov", "layers"), ("qk",)])  # qk alone: the Q and K rows only
def test_block_weights_are_read_whole_only_with_layers(served, tmp_path: Path, matrices) -> None:
    hub, repo, suite = served
    options = RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, matrices=matrices)
    out = tmp_path / "hub-store"
    report = run_precompute("org/tiny", out, options)
    assert not report.failed and report.computed == [1, 2]
    for step in (1, 2):
        commit = repo.branches[f"step{step}"]
        requests = [e for e in hub.resolves("model.safetensors") if f"/{commit}/" in e.path]
        assert requests and all(e.range for e in requests)
        ranges = [(int(a), int(b) + 1) for a, b in (e.range.removeprefix("bytes=").split("-") for e in requests)]
        assert ranges[0][0] == 0
        ranges = ranges[1:]  # the header probe (128 KiB: the whole of this tiny file) comes first
        spans = _spans(suite / f"step{step}" / "model.safetensors")
        for name, span in spans.items():
            block = name.endswith(BLOCK_SUFFIXES)
            got = _covered(span, ranges)
            if "layers" in matrices and block:
                assert got == span[1] - span[0], f"{name} not read whole"
            elif name.endswith(BLOCK_SUFFIXES[0]):
                assert 0 < got < span[1] - span[0]  # the Q and K rows only (merge gap 0)
            else:
                assert got == 0, f"{name} was read"
    local = tmp_path / "local-store"
    run_precompute(suite, local, options)
    if "layers" in matrices:
        pd.testing.assert_frame_equal(pd.read_parquet(out / LAYERS.file), pd.read_parquet(local / LAYERS.file))
    else:
        assert not (out / LAYERS.file).exists()
