"""Safetensors headers read through huggingface_hub, on a sharded checkpoint on the fake Hub.

The expected byte ranges come from each shard's own header, parsed here with
struct/json, and the expected tensors from ``safetensors.torch.load_file``; the bytes
and requests the run counts are checked against what the server says it sent.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch
from safetensors.torch import load_file

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.families.registry import model_shape
from headwatch.precompute.settings import FetchSettings
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.hub import HubSource
from headwatch.precompute.sources.revisions import CheckpointRef
from tests.integration.conftest import neox_model, perturb

REPO_ID = "org/sharded"
HF_PROBE = 100_001  # huggingface_hub reads bytes 0-100000 of a file for its header


def own_header(path: Path) -> tuple[int, dict]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    doc = json.loads(raw[8 : 8 + n])
    doc.pop("__metadata__", None)
    return 8 + n, doc


def test_sharded_fetch_reads_the_headers_and_exactly_the_attention_tensors(tmp_path: Path) -> None:
    model = neox_model(layers=3)
    perturb(model, 3)
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 2, "the checkpoint must be sharded"
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    wanted = {n for n in weight_map if "query_key_value.weight" in n or "attention.dense.weight" in n}
    files = sorted({weight_map[n] for n in wanted})

    expected_ranges: dict[str, list[tuple[int, int]]] = {}
    for f in files:  # qk + ov need every row of the fused weight and all of dense: whole tensors
        base, doc = own_header(folder / f)
        expected_ranges[f] = sorted(
            (base + doc[n]["data_offsets"][0], base + doc[n]["data_offsets"][1]) for n in wanted if weight_map[n] == f
        )

    repo = Repo()
    repo.add("step3", folder_files(folder))
    with FakeHub() as hub:
        hub.repos[REPO_ID] = repo
        meter = Meter()
        src = HubSource(
            REPO_ID,
            scratch=tmp_path / "scratch",
            fetch=FetchSettings(range_merge_gap=0),
            meter=meter,
            token=False,
            endpoint=hub.url,
            cache_dir=tmp_path / "empty-cache",
        )
        shape = model_shape(json.loads((folder / "config.json").read_text()))
        fetched = src.fetch(CheckpointRef(3, "step3"), shape, skip=lambda sha: False, matrices=("qk", "ov"))

        gets = [e for e in hub.log if e.method == "GET" and "/resolve/" in e.path]
        assert meter.fetched == hub.sent, "the meter counts every byte the server sent"
        assert meter.requests == len(gets), "and every request"
        for f in files:
            got = hub.ranges(f)
            assert got[0] == (0, HF_PROBE), (
                "the header: huggingface_hub asks for its first 100 kB (the server sends what there is)"
            )
            assert sorted(got[1:]) == _merged(expected_ranges[f]), f
        read_shards = {e.path.rsplit("/", 1)[1] for e in gets if e.path.endswith(".safetensors")}
        assert read_shards == set(files), "only the shards holding attention tensors are read"
        header_bytes = sum(min(HF_PROBE, (folder / f).stat().st_size) for f in files)
        json_bytes = sum((folder / e.path.rsplit("/", 1)[1]).stat().st_size for e in gets if e.path.endswith(".json"))
        tensor_bytes = sum(b - a for f in files for a, b in expected_ranges[f])
        assert meter.fetched == header_bytes + json_bytes + tensor_bytes

    expected = {}
    for f in files:
        expected.update(load_file(folder / f))
    assert fetched.tensors is not None and sorted(fetched.tensors) == sorted(wanted)
    for name in wanted:
        assert torch.equal(fetched.tensors[name], expected[name]), name


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent tensors are one range (a merge gap of 0 still joins ranges that touch)."""
    out: list[list[int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]
