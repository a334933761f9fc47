"""Read only the Q/K bytes of a remote safetensors file, with HTTP range requests.

A safetensors file is an 8-byte little-endian header length ``n``, ``n`` bytes of
JSON (``name -> {dtype, shape, data_offsets: [begin, end]}``, offsets relative to
the end of the header) and the raw C-order tensor data. So:

1. huggingface_hub's ``parse_safetensors_file_metadata`` reads and parses the header
   (one range request, two for a header over 100 kB); `header_from_metadata` turns
   its relative offsets into absolute ones;
2. `element_masks` finds which elements of each attention tensor extraction
   reads, by running the architecture's own adapters (`families.extract.extract_heads`,
   for the per-head matrices the run computes)
   on probe tensors whose values are their row and column indices; no layout
   knowledge is repeated here. For GPT-NeoX's fused ``query_key_value`` these are
   the Q and K rows of every head; the V rows sit between them;
3. `plan_ranges` turns the needed elements into byte ranges and merges ranges less
   than ``merge_gap`` bytes apart (reading through a short gap beats a round trip;
   with the default gap a Pythia layer is one contiguous range, V rows included);
4. `read_tensors` fetches the ranges (a few in parallel) and assembles each tensor.
   Every byte inside a fetched range is copied; elements outside every range (only
   possible with a small ``merge_gap``) are NaN, so a mistake cannot pass silently
   as numbers: the precompute loop refuses non-finite W_Q / W_K.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from huggingface_hub.utils import SafetensorsFileMetadata

from headwatch.analysis.errors import CheckpointError
from headwatch.families.extract import attention_tensor_names, extract_heads
from headwatch.families.family import ModelShape
from headwatch.families.registry import family_of

DTYPES: dict[str, torch.dtype] = {
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}

# get(start, end) -> (bytes [start, end), total file size or None)
RangeGetter = Callable[[int, int], tuple[bytes, "int | None"]]

# huggingface_hub's `parse_safetensors_file_metadata` reads the header: one GET of
# bytes 0..HEADER_PROBE_BYTES-1 (its "first 100 kB"), a second one for the rest of a
# longer header. Written here only so the Meter can count those bytes (the library
# reports none) and tests can check the requests.
HEADER_PROBE_BYTES = 100_001


def header_read_cost(header_bytes: int, file_size: int) -> tuple[int, int]:
    """``(bytes, requests)`` `parse_safetensors_file_metadata` spends on a header of
    ``header_bytes`` (the 8-byte length plus the JSON) in a file of ``file_size`` bytes."""
    first = min(HEADER_PROBE_BYTES, file_size)
    if header_bytes <= first:
        return first, 1
    return first + header_bytes - 8, 2


@dataclass(frozen=True)
class TensorSpan:
    """Where one tensor lies in the file: absolute byte offsets ``[start, end)``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=DTYPES[self.dtype]).element_size()


@dataclass(frozen=True)
class SafetensorsHeader:
    """A parsed header: the tensors, the ``__metadata__``, the header's length and the file's."""

    tensors: dict[str, TensorSpan]
    metadata: dict[str, str]
    header_bytes: int  # the 8-byte length and the JSON
    file_size: int


def header_from_metadata(meta: SafetensorsFileMetadata, *, file_size: int | None, where: str) -> SafetensorsHeader:
    """Absolute byte spans of a file's tensors, from huggingface_hub's parse of its header.

    The library gives each tensor's ``data_offsets`` relative to the end of the header
    but not the header's length (what it lacks), so it is found from the file size:
    safetensors requires the data to be indexed entirely, without holes, so the file
    ends where the last tensor ends and the header is ``file_size - max(end)`` bytes
    (the 8-byte length included).

    Args:
        meta: from ``HfApi.parse_safetensors_file_metadata``.
        file_size: the file's size in bytes (``model_info(..., files_metadata=True)``).
        where: the file, for error messages.

    Raises:
        CheckpointError: the size is unknown or too small for the tensors, or a tensor's
            span does not match its shape.
    """
    if file_size is None:
        raise CheckpointError(f"{where}: the Hub did not report the file's size; cannot place its tensors")
    data_end = max((int(info.data_offsets[1]) for info in meta.tensors.values()), default=0)
    base = file_size - data_end
    if base < 8 + 2:  # the length and at least "{}"
        raise CheckpointError(
            f"{where}: its tensors need {data_end} bytes after the header but the file has "
            f"{file_size}; it is truncated or not a safetensors file"
        )
    tensors = {}
    for name, info in meta.tensors.items():
        begin, end = (int(x) for x in info.data_offsets)
        span = TensorSpan(name, str(info.dtype), tuple(int(d) for d in info.shape), base + begin, base + end)
        if span.dtype in DTYPES and span.end - span.start != int(np.prod(span.shape, dtype=np.int64)) * span.itemsize:
            raise CheckpointError(
                f"{where}: {name!r} spans {span.end - span.start} bytes, its shape {span.shape} needs more or less"
            )
        tensors[name] = span
    return SafetensorsHeader(tensors, dict(meta.metadata or {}), base, file_size)


def element_masks(
    shape: ModelShape, tensor_shapes: Mapping[str, tuple[int, ...]], *, matrices: tuple[str, ...] = ("qk",)
) -> dict[str, torch.Tensor]:
    """For every attention tensor ``matrices`` need, a bool mask of the elements `extract_heads` reads.

    The masks are found once, on layer 0, by running `extract_heads` on probe tensors:
    probe A holds ``tensor_index * R + row`` and probe B the column index, so each
    element of the returned factors says where it came from (float32 holds these
    integers exactly). Every other layer shares layer 0's layout, tensor by tensor.
    For ``ov`` of GPT-NeoX that is the V rows of the fused QKV weight and every element
    of ``attention.dense``; for ``qk`` alone only the Q and K rows. A norm's gains folded
    into the factors (a 1-D attention tensor: QK-norm, a norm on the attention's output)
    are read whole; the probes hold them at the family's `Family.neutral_gain`, where the
    fold leaves the probe values as they are.

    Args:
        shape: the model.
        tensor_shapes: name -> shape of every tensor in the checkpoint.
        matrices: the per-head matrices to extract (``qk``, ``ov``).

    Returns:
        name -> bool tensor of that tensor's shape, for every attention tensor.

    Raises:
        CheckpointError: an attention tensor is neither 2-D nor a 1-D gain, or a layer's
            tensor shapes differ from layer 0's.
    """
    names = attention_tensor_names(shape, tensor_shapes, matrices=matrices)
    per_layer = len(names) // shape.n_layers
    first = names[:per_layer]
    for name in names:
        if len(tensor_shapes[name]) not in (1, 2):
            raise CheckpointError(
                f"attention tensor {name!r} has shape {tensor_shapes[name]}; expected a 2-D weight or a norm's 1-D gains"
            )
    weights = [n for n in first if len(tensor_shapes[n]) == 2]
    gains = [n for n in first if len(tensor_shapes[n]) == 1]
    rows = 1 + max(tensor_shapes[n][0] for n in weights)
    assert per_layer * rows < 2**24, "probe indices must be exact in float32"
    probe_a, probe_b = {}, {}
    for j, name in enumerate(weights):
        r, c = tensor_shapes[name]
        probe_a[name] = (j * rows + torch.arange(r, dtype=torch.float32))[:, None].expand(r, c)
        probe_b[name] = torch.arange(c, dtype=torch.float32)[None, :].expand(r, c)
    neutral = family_of(shape).neutral_gain
    for name in gains:  # (n,): the fold multiplies by exactly 1 at the neutral gain
        probe_a[name] = probe_b[name] = torch.full(tensor_shapes[name], neutral, dtype=torch.float32)
    one_layer = dataclasses.replace(shape, n_layers=1)
    sources = extract_heads(one_layer, probe_a, matrices=matrices)  # matrix -> factors (1, n_heads, d_head, d_model)
    columns = extract_heads(one_layer, probe_b, matrices=matrices)
    masks0 = {name: torch.zeros(tensor_shapes[name], dtype=torch.bool) for name in weights}
    masks0 |= {name: torch.ones(tensor_shapes[name], dtype=torch.bool) for name in gains}  # read whole
    pairs = [(src, col) for m in matrices for src, col in zip(sources[m], columns[m], strict=True)]
    for src, col in pairs:
        for h in range(src.shape[1]):  # one head at a time keeps the index arrays small
            a = src[0, h].reshape(-1).to(torch.int64)
            b = col[0, h].reshape(-1).to(torch.int64)
            tensor, row = a // rows, a % rows
            for j, name in enumerate(weights):
                sel = tensor == j
                masks0[name][row[sel], b[sel]] = True
    out = {}
    for i, name in enumerate(names):
        ref = first[i % per_layer]
        if tuple(tensor_shapes[name]) != tuple(tensor_shapes[ref]):
            raise CheckpointError(f"{name!r} has shape {tensor_shapes[name]} but {ref!r} (layer 0) has {tensor_shapes[ref]}")
        out[name] = masks0[ref]
    return out


def needed_spans(span: TensorSpan, mask: torch.Tensor) -> list[tuple[int, int]]:
    """Absolute byte ranges ``[start, end)`` covering the True elements of ``mask`` (C order)."""
    flat = mask.reshape(-1).numpy().astype(np.int8)
    edges = np.diff(np.concatenate(([0], flat, [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    size = span.itemsize
    return [(span.start + int(s) * size, span.start + int(e) * size) for s, e in zip(starts, ends, strict=True)]


def plan_ranges(spans: list[tuple[int, int]], *, merge_gap: int) -> list[tuple[int, int]]:
    """Sort byte ranges and merge those that overlap or lie at most ``merge_gap`` bytes apart."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start - merged[-1][1] <= merge_gap:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def read_tensors(
    get: RangeGetter,
    header: SafetensorsHeader,
    masks: Mapping[str, torch.Tensor],
    *,
    merge_gap: int,
    concurrency: int = 4,
    where: str,
) -> dict[str, torch.Tensor]:
    """Fetch the needed bytes of the tensors named in ``masks`` and assemble them.

    Args:
        get: fetches ``[start, end)`` of the file.
        header: from `header_from_metadata`.
        masks: name -> bool mask of the elements needed (`element_masks`).
        merge_gap: see `plan_ranges`.
        concurrency: ranges fetched at once.
        where: the file, for error messages.

    Returns:
        name -> tensor in the file's dtype and shape; elements outside every fetched
        range are NaN.

    Raises:
        CheckpointError: a tensor is missing from the header, has an unsupported dtype,
            or the file ends early.
    """
    spans = {}
    for name in masks:
        if name not in header.tensors:
            raise CheckpointError(f"{where}: no tensor {name!r} in the header")
        span = header.tensors[name]
        if span.dtype not in DTYPES:
            raise CheckpointError(f"{where}: {name!r} has dtype {span.dtype}; supported: {', '.join(DTYPES)}")
        spans[name] = span
    wanted = [r for name, span in spans.items() for r in needed_spans(span, masks[name])]
    ranges = plan_ranges(wanted, merge_gap=merge_gap)

    def fetch(r: tuple[int, int]) -> bytes:
        data, _ = get(*r)
        if len(data) != r[1] - r[0]:
            raise CheckpointError(f"{where}: bytes {r[0]}-{r[1]} are past the end of the file; it is truncated")
        return data

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        blobs = list(pool.map(fetch, ranges))
    out = {}
    for name, span in spans.items():
        tensor = torch.full(span.shape, float("nan"), dtype=DTYPES[span.dtype])
        raw = tensor.view(-1).view(torch.uint8).numpy()  # (n_bytes,) aliasing the tensor
        for (a, b), data in zip(ranges, blobs, strict=True):
            lo, hi = max(a, span.start), min(b, span.end)
            if lo < hi:
                raw[lo - span.start : hi - span.start] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo - a)
        out[name] = tensor
    return out
