"""What computing costs: the recorded benchmark figures ``headwatch plan`` estimates from, and how each scales.

A lens's figures sit on its registry entry (`precompute.registry.Lens.seconds`,
`precompute.registry.Lens.store_bytes`); the per-head matrices, which every store has and which are no
lens, have theirs here. Every figure was measured on the 2-core development machine (AMD EPYC, torch
2.13.0 CPU, 2 threads) and is recorded in docs/benchmarks.md; each cites its table. ``headwatch plan``
scales them to the model planned for (`time_scale`, `size_count`) and prints which it used;
``headwatch info`` names them. Torch-free, like the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

# What a checkpoint's seconds scale with, from the model measured at: "heads" is layers x heads x d_model^2,
# "layers" layers x d_model^2 (both from Pythia-1.4B); "parameters" the model's parameters (from the
# Pythia-160M shape); "head_pairs" cross-layer head pairs x d_head^2 x d_model (the composition scores'
# products); "all_head_pairs" every unordered pair of heads x d_head^2 x d_model (the similarity's products).
TimeScale = Literal["heads", "layers", "parameters", "head_pairs", "all_head_pairs"]
# What a checkpoint's store bytes are counted in: per-head rows of each per-head matrix, layers, cross-layer
# (ordered) pairs of heads, unordered pairs of heads, or the checkpoint itself (a lens whose rows do not grow
# with the model, such as the essential-dynamics lens's fixed sample).
SizeScale = Literal["head_matrices", "layers", "head_pairs", "all_head_pairs", "checkpoint"]

# ------------------------------------------------------------------ the shapes measured at

# Pythia-1.4B: 24 layers x 16 heads, d_model 2048 (docs/benchmarks.md "Statistics pipeline, one Pythia-1.4B-shaped checkpoint")
PYTHIA_1_4B = {"n_layers": 24, "n_heads": 16, "d_model": 2048, "d_head": 128}
# Pythia-160M-shaped GPT-NeoX with random weights: 162,322,944 parameters
# (docs/benchmarks.md "Performance: the forward-pass lens" and "Performance: the refined LLC")
PYTHIA_160M_PARAMETERS = 162_322_944


class Shape(Protocol):
    """A model's geometry (`analysis.extract.ModelShape`)."""

    @property
    def n_layers(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def d_head(self) -> int: ...


@dataclass(frozen=True)
class Seconds:
    """Seconds one checkpoint takes, as measured.

    Attributes:
        name: how ``headwatch plan`` and ``headwatch info`` cite it (``COMPOSITION_SECONDS_1_4B``).
        seconds: the figure.
        scale: what it scales with, from the model measured at.
        measured: where it is recorded (a table of docs/benchmarks.md) and how it was taken.
    """

    name: str
    seconds: float
    scale: TimeScale
    measured: str


@dataclass(frozen=True)
class StoreBytes:
    """Store bytes one checkpoint adds, as measured.

    Attributes:
        files: the files it counts (``composition.parquet``).
        bytes: bytes per unit.
        per: the unit.
        unit: the unit in words, as ``headwatch plan`` prints it (``pair of heads (every pair)``).
        measured: where it was measured.
    """

    files: str
    bytes: float
    per: SizeScale
    unit: str
    measured: str

    def describe(self) -> str:
        return f"{self.files} {self.bytes} B per {self.unit}"


# ------------------------------------------------------------------ the per-head matrices (no lens)

# qk: whole pipeline per checkpoint (hash + read + extract + statistics + 8 singular vectors + commit),
# best of 2, machine idle.
QK_SECONDS = Seconds(
    "QK_SECONDS_1_4B",
    10.62,
    "heads",
    'docs/benchmarks.md "Statistics pipeline, one Pythia-1.4B-shaped checkpoint", row (a)',
)
# ov: "qk and ov each cost one set of heads.parquet rows per checkpoint and about the same time"
# (docs/precompute.md, --matrices; 154 checkpoints: about 27 min of qk, about 55 with ov): the qk figure again.
OV_SECONDS = Seconds("OV_SECONDS_1_4B", QK_SECONDS.seconds, "heads", "the qk figure (docs/precompute.md, --matrices)")
# Measured on the shipped store data/shakespeare-pythia-6x8 (6 x 8 heads, d_head 32, 43 checkpoints, qk and ov):
# heads.parquet 1,398,981 B / (43 x 48 x 2) rows, float columns byte-stream-split (`precompute.store.writer`).
HEADS_BYTES = StoreBytes(
    "heads.parquet",
    338.9,
    "head_matrices",
    "head and matrix",
    "data/shakespeare-pythia-6x8 (GPU-trained, floats byte-stream-split, 2026-11-27): 1,398,981 B / (43 x 48 x 2) rows",
)
# checkpoints the refined LLC estimates by default: "about 8, log-spaced" (python -m precompute --help, --llc-steps)
LLC_DEFAULT_CHECKPOINTS = 8


# ------------------------------------------------------------------ scaling to a model


def parameters(shape: Shape, config: Mapping[str, Any]) -> int:
    """Parameters of a decoder: 12 L d^2 for the blocks plus the embedding and unembedding."""
    vocab = int(config.get("vocab_size") or 0)
    return 12 * shape.n_layers * shape.d_model**2 + 2 * vocab * shape.d_model


def head_pairs(n_layers: int, n_heads: int) -> int:
    """Ordered pairs of heads in different layers (source below target): the composition scores' rows."""
    return n_heads**2 * n_layers * (n_layers - 1) // 2


def all_head_pairs(n_layers: int, n_heads: int) -> int:
    """Unordered pairs of heads, within and across layers: the similarity's rows."""
    heads = n_layers * n_heads
    return heads * (heads - 1) // 2


def time_scale(scale: TimeScale, shape: Shape, config: Mapping[str, Any]) -> tuple[float, str]:
    """The factor a figure measured at its reference model is scaled by for ``shape``, and how, in words."""
    ref = PYTHIA_1_4B
    if scale == "heads":
        f = (shape.n_layers * shape.n_heads * shape.d_model**2) / (ref["n_layers"] * ref["n_heads"] * ref["d_model"] ** 2)
        return f, f"x {f:.3g} (layers x heads x d_model^2 against Pythia-1.4B's)"
    if scale == "layers":
        f = (shape.n_layers * shape.d_model**2) / (ref["n_layers"] * ref["d_model"] ** 2)
        return f, f"x {f:.3g} (layers x d_model^2)"
    if scale == "parameters":
        n = parameters(shape, config)
        f = n / PYTHIA_160M_PARAMETERS
        return f, f"x {f:.3g} (parameters, {n:,} against {PYTHIA_160M_PARAMETERS:,})"
    work = shape.d_head**2 * shape.d_model
    ref_work = ref["d_head"] ** 2 * ref["d_model"]
    if scale == "head_pairs":
        f = head_pairs(shape.n_layers, shape.n_heads) * work / (head_pairs(ref["n_layers"], ref["n_heads"]) * ref_work)
        return f, f"x {f:.3g} (cross-layer head pairs x d_head^2 x d_model against Pythia-1.4B's)"
    assert scale == "all_head_pairs", scale
    f = all_head_pairs(shape.n_layers, shape.n_heads) * work / (all_head_pairs(ref["n_layers"], ref["n_heads"]) * ref_work)
    return f, f"x {f:.3g} (pairs of heads x d_head^2 x d_model against Pythia-1.4B's)"


def size_count(per: SizeScale, shape: Shape, *, head_matrices: int) -> int:
    """How many units of ``per`` one checkpoint of ``shape`` has (``head_matrices``: per-head matrices computed)."""
    if per == "head_matrices":
        return shape.n_layers * shape.n_heads * head_matrices
    if per == "layers":
        return shape.n_layers
    if per == "checkpoint":
        return 1
    if per == "head_pairs":
        return head_pairs(shape.n_layers, shape.n_heads)
    assert per == "all_head_pairs", per
    return all_head_pairs(shape.n_layers, shape.n_heads)
