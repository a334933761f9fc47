"""The safetensors range reader against an HTTP server on 127.0.0.1 that honours Range headers.

Expected byte ranges are computed here from the file's header with struct/json and
from the GPT-NeoX layout (rows ``(n_heads, 3, d_head, d_model)``); expected tensors
come from ``safetensors.torch.load_file``. Neither shares code with the reader.
"""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path
from urllib.request import Request, urlopen

import pytest
import torch
from huggingface_hub import HfApi
from safetensors import safe_open
from safetensors.torch import load_file

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.errors import CheckpointError
from headwatch.families.family import ModelShape
from headwatch.families.registry import model_shape
from headwatch.precompute.settings import FetchSettings
from headwatch.precompute.sources import ranges
from headwatch.precompute.sources.fetch import HubHttp, HubUnreachableError, Meter
from headwatch.precompute.sources.ranges import element_masks, header_from_metadata, plan_ranges, read_tensors
from tests.integration.conftest import neox_model, perturb

REPO_ID = "org/tiny"
FAST = FetchSettings(retries=3, backoff_s=0.001, timeout_s=10, concurrency=3)


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def checkpoint(request, tmp_path_factory) -> Path:
    """A tiny GPT-NeoX saved by transformers (4 heads, d_head 16, 3 layers), in two dtypes."""
    model = neox_model(layers=3)
    perturb(model, 7)
    model.to(getattr(torch, request.param))
    folder = tmp_path_factory.mktemp(f"ckpt-{request.param}")
    model.save_pretrained(folder)
    return folder


@pytest.fixture
def served(checkpoint: Path):
    """The checkpoint on a fake Hub: ``(hub, url of model.safetensors, http client, meter)``."""
    repo = Repo()
    commit = repo.add("step7", folder_files(checkpoint))
    with FakeHub() as hub:
        hub.repos[REPO_ID] = repo
        meter = Meter()
        yield hub, f"{hub.url}/{REPO_ID}/resolve/{commit}/model.safetensors", HubHttp(FAST, meter), meter


def remote_header(url: str, size: int):
    """The header as huggingface_hub parses it over HTTP, placed by `header_from_metadata`."""
    endpoint, rest = url.split(f"/{REPO_ID}/resolve/")
    commit, filename = rest.split("/", 1)
    meta = HfApi(endpoint=endpoint, token=False).parse_safetensors_file_metadata(REPO_ID, filename, revision=commit)
    return header_from_metadata(meta, file_size=size, where=url)


def header_of(path: Path) -> tuple[int, dict]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    doc = json.loads(raw[8 : 8 + n])
    doc.pop("__metadata__", None)
    return 8 + n, doc


def qkv_names(n_layers: int) -> list[str]:
    return [f"gpt_neox.layers.{i}.attention.query_key_value.weight" for i in range(n_layers)]


def read_all(
    url: str, http: HubHttp, shape: ModelShape, merge_gap: int, matrices: tuple[str, ...] = ("qk",)
) -> dict[str, torch.Tensor]:
    def get(a: int, b: int):
        return http.get_range(url, a, b, what="test")

    size = int(urlopen(Request(url, method="HEAD")).headers["Content-Length"])
    header = remote_header(url, size)
    masks = element_masks(shape, {n: s.shape for n, s in header.tensors.items()}, matrices=matrices)
    return read_tensors(get, header, masks, merge_gap=merge_gap, concurrency=3, where=url)


def test_one_range_per_layer_and_the_files_tensors(served, checkpoint: Path) -> None:
    hub, url, http, meter = served
    shape = model_shape(json.loads((checkpoint / "config.json").read_text()))
    base, doc = header_of(checkpoint / "model.safetensors")
    spans = [(base + doc[n]["data_offsets"][0], base + doc[n]["data_offsets"][1]) for n in qkv_names(3)]
    itemsize = (spans[0][1] - spans[0][0]) // (3 * 64 * 64)
    v_gap = shape.d_head * shape.d_model * itemsize  # V rows of one head, between two heads' Q/K rows
    assert min(b[0] - a[1] for a, b in itertools.pairwise(spans)) > v_gap  # layers are further apart than that

    tensors = read_all(url, http, shape, merge_gap=v_gap)

    requested = hub.ranges("model.safetensors")
    assert requested[0] == (0, ranges.HEADER_PROBE_BYTES)  # the header, in one request (huggingface_hub's)
    # then exactly one contiguous range per layer: its first Q row to its last K row (the
    # last head's V rows end the tensor and are not needed)
    assert sorted(requested[1:]) == [(a, b - v_gap) for a, b in spans]
    expected = load_file(checkpoint / "model.safetensors")
    assert sorted(tensors) == qkv_names(3)
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    for name, t in tensors.items():
        assert t.dtype == expected[name].dtype
        got, want = t.view(h, 3, d, m), expected[name].view(h, 3, d, m)
        assert torch.equal(got[:, :2], want[:, :2]), name  # every Q and K row
        assert torch.equal(got[:-1, 2], want[:-1, 2]), name  # V rows read through inside the range
        assert torch.isnan(got[-1, 2].float()).all(), name  # outside every range: NaN, never numbers
    assert meter.fetched == sum(b - a - v_gap for a, b in spans)  # the header was read by huggingface_hub


def test_merge_gap_zero_fetches_exactly_the_q_and_k_rows(served, checkpoint: Path) -> None:
    hub, url, http, _meter = served
    shape = model_shape(json.loads((checkpoint / "config.json").read_text()))
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    base, doc = header_of(checkpoint / "model.safetensors")
    row_bytes = 0
    expected_ranges = []
    for name in qkv_names(3):
        start, end = (base + x for x in doc[name]["data_offsets"])
        row_bytes = (end - start) // (3 * h * d)
        for head in range(h):  # rows (head, 0..1, :, :) are Q and K; (head, 2) is V
            first = head * 3 * d
            expected_ranges.append((start + first * row_bytes, start + (first + 2 * d) * row_bytes))

    tensors = read_all(url, http, shape, merge_gap=0)

    assert sorted(hub.ranges("model.safetensors")[1:]) == expected_ranges
    assert sum(b - a for a, b in expected_ranges) == 3 * 2 * h * d * row_bytes  # Q and K: 2/3 of the fused weight
    expected = load_file(checkpoint / "model.safetensors")
    for name, t in tensors.items():
        got, want = t.view(h, 3, d, m), expected[name].view(h, 3, d, m)
        assert torch.equal(got[:, :2], want[:, :2]), name
        assert torch.isnan(got[:, 2].float()).all(), "V rows were not fetched and must not pass as numbers"


def dense_names(n_layers: int) -> list[str]:
    return [f"gpt_neox.layers.{i}.attention.dense.weight" for i in range(n_layers)]


@pytest.mark.parametrize("matrices", [("ov",), ("qk", "ov")])
def test_ov_fetches_the_v_rows_and_the_output_projection_and_nothing_else(served, checkpoint: Path, matrices) -> None:
    hub, url, http, meter = served
    shape = model_shape(json.loads((checkpoint / "config.json").read_text()))
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    base, doc = header_of(checkpoint / "model.safetensors")
    expected_ranges = []
    for layer in range(3):
        start, end = (base + x for x in doc[qkv_names(3)[layer]]["data_offsets"])
        row_bytes = (end - start) // (3 * h * d)
        if matrices == ("ov",):  # rows (head, 2, :, :) are V: one range per head
            expected_ranges += [
                (start + (head * 3 + 2) * d * row_bytes, start + (head * 3 + 3) * d * row_bytes) for head in range(h)
            ]
        else:  # Q, K and V rows of every head: the whole fused weight, one range
            expected_ranges.append((start, end))
        expected_ranges.append(tuple(base + x for x in doc[dense_names(3)[layer]]["data_offsets"]))

    tensors = read_all(url, http, shape, merge_gap=0, matrices=matrices)

    assert sorted(hub.ranges("model.safetensors")[1:]) == sorted(expected_ranges)
    assert meter.fetched == sum(b - a for a, b in expected_ranges)
    expected = load_file(checkpoint / "model.safetensors")
    assert sorted(tensors) == sorted(qkv_names(3) + dense_names(3))
    for name in dense_names(3):
        assert torch.equal(tensors[name], expected[name]), name
    for name in qkv_names(3):
        got, want = tensors[name].view(h, 3, d, m), expected[name].view(h, 3, d, m)
        assert torch.equal(got[:, 2], want[:, 2]), name  # every V row
        if matrices == ("ov",):
            assert torch.isnan(got[:, :2].float()).all(), name  # Q and K rows never fetched
        else:
            assert torch.equal(got, want), name


def test_header_spans_match_safetensors_own_parse(served, checkpoint: Path) -> None:
    """Absolute offsets from huggingface_hub's parse + the file size equal those from the
    file's own header (struct/json) and the bytes there are the tensors safetensors loads."""
    _, url, _, _ = served
    path = checkpoint / "model.safetensors"
    header = remote_header(url, path.stat().st_size)
    base, doc = header_of(path)
    assert header.header_bytes == base
    assert {n: (s.start, s.end) for n, s in header.tensors.items()} == {
        n: (base + v["data_offsets"][0], base + v["data_offsets"][1]) for n, v in doc.items()
    }
    raw = path.read_bytes()
    with safe_open(str(path), framework="pt") as f:
        assert sorted(f.keys()) == sorted(header.tensors)
        for name, span in header.tensors.items():
            want = f.get_tensor(name)
            assert list(want.shape) == list(span.shape)
            got = torch.frombuffer(bytearray(raw[span.start : span.end]), dtype=want.dtype).view(want.shape)
            assert torch.equal(got, want), name


def test_long_header_takes_a_second_request(served, checkpoint: Path) -> None:
    """A header over huggingface_hub's 100 kB probe: two requests, as `header_read_cost` counts."""
    path = checkpoint / "model.safetensors"
    state = load_file(path)
    state.update({f"pad.{i:05d}.{'x' * 40}": torch.zeros(1) for i in range(2000)})  # ~130 kB of header
    big = path.parent / "big.safetensors"
    from safetensors.torch import save_file

    save_file(state, big)
    base, doc = header_of(big)
    assert base > ranges.HEADER_PROBE_BYTES
    hub, _, _, _ = served
    repo = Repo()
    commit = repo.add("big", {"model.safetensors": big})
    hub.repos["org/big"] = repo
    meta = HfApi(endpoint=hub.url, token=False).parse_safetensors_file_metadata("org/big", "model.safetensors", revision=commit)
    header = header_from_metadata(meta, file_size=big.stat().st_size, where="big")
    assert hub.ranges("model.safetensors")[-2:] == [(0, ranges.HEADER_PROBE_BYTES), (8, base)]
    assert ranges.header_read_cost(header.header_bytes, big.stat().st_size) == (ranges.HEADER_PROBE_BYTES + base - 8, 2)
    assert {n: list(s.shape) for n, s in header.tensors.items()} == {n: v["shape"] for n, v in doc.items()}
    big.unlink()


def test_server_that_ignores_range_still_gives_the_right_bytes(served, checkpoint: Path) -> None:
    hub, url, http, _ = served
    hub.ignore_range = True
    shape = model_shape(json.loads((checkpoint / "config.json").read_text()))
    tensors = read_all(url, http, shape, merge_gap=4 << 20)
    expected = load_file(checkpoint / "model.safetensors")
    h, d, m = shape.n_heads, shape.d_head, shape.d_model
    for name, t in tensors.items():
        assert torch.equal(t.view(h, 3, d, m)[:, :2], expected[name].view(h, 3, d, m)[:, :2])


def test_transient_errors_are_retried_then_give_up(served) -> None:
    hub, url, http, _ = served
    hub.fail_next = 2  # two 503s, then the real answer: within 3 attempts
    data, total = http.get_range(url, 0, 8, what="test")
    assert len(data) == 8 and total is not None
    hub.fail_next = 3
    with pytest.raises(HubUnreachableError, match=r"503.*gave up after 3 attempts"):
        http.get_range(url, 0, 8, what="read the header")


def test_truncated_file_is_refused_by_name(checkpoint: Path) -> None:
    data = (checkpoint / "model.safetensors").read_bytes()
    repo = Repo()
    commit = repo.add("step7", {"model.safetensors": data[: len(data) // 2]})
    with FakeHub() as hub:
        hub.repos[REPO_ID] = repo
        meta = HfApi(endpoint=hub.url, token=False).parse_safetensors_file_metadata(REPO_ID, "model.safetensors", revision=commit)
        with pytest.raises(CheckpointError, match="truncated"):
            header_from_metadata(meta, file_size=len(data) // 2, where="model.safetensors")


def test_masks_follow_each_architectures_adapter() -> None:
    # GPT-2: Conv1D weight (d_model, 3 d_model); Q and K are the first 2 d_model columns of every row
    gpt2 = ModelShape("gpt2", "gpt2", 2, 4, 4, 32, 8)
    shapes = {f"transformer.h.{i}.attn.c_attn.weight": (32, 96) for i in range(2)}
    shapes["transformer.h.0.mlp.c_fc.weight"] = (32, 128)
    masks = element_masks(gpt2, shapes)
    assert sorted(masks) == sorted(n for n in shapes if "c_attn" in n)
    for mask in masks.values():
        assert mask[:, :64].all() and not mask[:, 64:].any()
    # Llama with grouped-query attention: all of q_proj and k_proj, nothing else
    llama = ModelShape("llama", "llama", 1, 4, 2, 32, 8)
    shapes = {
        "model.layers.0.self_attn.q_proj.weight": (32, 32),
        "model.layers.0.self_attn.k_proj.weight": (16, 32),
        "model.layers.0.self_attn.v_proj.weight": (16, 32),
    }
    masks = element_masks(llama, shapes)
    assert sorted(masks) == sorted(n for n in shapes if "q_proj" in n or "k_proj" in n)
    assert all(m.all() for m in masks.values())
    # GPT-NeoX: rows (head, 0|1, :) of the fused weight, never (head, 2, :)
    neox = ModelShape("gpt_neox", "gpt_neox", 1, 4, 4, 32, 8)
    (mask,) = element_masks(neox, {"gpt_neox.layers.0.attention.query_key_value.weight": (96, 32)}).values()
    rows = mask.all(dim=1)
    assert mask.any(dim=1).equal(rows)  # whole rows
    assert rows.tolist() == [(r // 8) % 3 != 2 for r in range(96)]


def test_ov_masks_follow_each_architectures_adapter() -> None:
    # GPT-2: V is the last d_model columns of c_attn (Conv1D); attn.c_proj is read whole, mlp.c_proj never
    gpt2 = ModelShape("gpt2", "gpt2", 1, 4, 4, 32, 8)
    shapes = {
        "transformer.h.0.attn.c_attn.weight": (32, 96),
        "transformer.h.0.attn.c_proj.weight": (32, 32),
        "transformer.h.0.mlp.c_proj.weight": (128, 32),
    }
    masks = element_masks(gpt2, shapes, matrices=("ov",))
    assert sorted(masks) == ["transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight"]
    c_attn = masks["transformer.h.0.attn.c_attn.weight"]
    assert c_attn[:, 64:].all() and not c_attn[:, :64].any()
    assert masks["transformer.h.0.attn.c_proj.weight"].all()
    # Llama with grouped-query attention: all of v_proj and o_proj, no q_proj or k_proj
    llama = ModelShape("llama", "llama", 1, 4, 2, 32, 8)
    shapes = {
        "model.layers.0.self_attn.q_proj.weight": (32, 32),
        "model.layers.0.self_attn.k_proj.weight": (16, 32),
        "model.layers.0.self_attn.v_proj.weight": (16, 32),
        "model.layers.0.self_attn.o_proj.weight": (32, 32),
    }
    masks = element_masks(llama, shapes, matrices=("ov",))
    assert sorted(masks) == sorted(n for n in shapes if "v_proj" in n or "o_proj" in n)
    assert all(mask.all() for mask in masks.values())
    # GPT-NeoX: rows (head, 2, :) of the fused weight, and all of attention.dense
    neox = ModelShape("gpt_neox", "gpt_neox", 1, 4, 4, 32, 8)
    masks = element_masks(
        neox,
        {"gpt_neox.layers.0.attention.query_key_value.weight": (96, 32), "gpt_neox.layers.0.attention.dense.weight": (32, 32)},
        matrices=("ov",),
    )
    rows = masks["gpt_neox.layers.0.attention.query_key_value.weight"].all(dim=1)
    assert rows.tolist() == [(r // 8) % 3 == 2 for r in range(96)]
    assert masks["gpt_neox.layers.0.attention.dense.weight"].all()


def test_plan_ranges_merges_overlaps_and_short_gaps() -> None:
    spans = [(100, 200), (0, 10), (15, 20), (205, 300), (150, 160)]
    assert plan_ranges(spans, merge_gap=0) == [(0, 10), (15, 20), (100, 200), (205, 300)]
    assert plan_ranges(spans, merge_gap=5) == [(0, 20), (100, 300)]
    assert plan_ranges(spans, merge_gap=1000) == [(0, 300)]
