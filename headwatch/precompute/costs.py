"""What computing costs: the figures ``headwatch plan`` estimates from, and how each scales to a model.

A lens's figures are declared with it (`analysis.store.lenses.declaration.Lens.seconds`, ``.store_bytes``); the
per-head matrices, which every store has and which are no lens, have theirs here. Each figure names the section of
docs/benchmarks.md that records how, where and when it was measured. ``headwatch plan`` scales them to the model
planned for (`time_scale`, `size_count`) and prints which it used; ``headwatch info`` names them. Torch-free, like
the declarations.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from headwatch.analysis.store.format import HEADS
from headwatch.analysis.store.lenses.attention import INDUCTION_SEQUENCES
from headwatch.analysis.store.lenses.declaration import Seconds, SizeScale, StoreBytes
from headwatch.families.geometry import Geometry
from headwatch.families.registry import language_config, model_geometry

# ------------------------------------------------------------------ the shapes measured at

# Pythia-1.4B: 24 layers x 16 heads, d_model 2048 (docs/benchmarks.md "Statistics pipeline, one Pythia-1.4B-shaped checkpoint")
PYTHIA_1_4B = {"n_layers": 24, "n_heads": 16, "d_model": 2048, "d_head": 128}
# Pythia-160M-shaped GPT-NeoX with random weights: 162,322,944 parameters
# (docs/benchmarks.md "Performance: the forward-pass lens" and "Performance: the refined LLC")
PYTHIA_160M_PARAMETERS = 162_322_944


class Shape(Protocol):
    """A model's geometry (`families.family.ModelShape`)."""

    @property
    def n_layers(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def d_head(self) -> int: ...


# ------------------------------------------------------------------ the per-head matrices (no lens)

_FIGURES = 'docs/benchmarks.md "The figures headwatch plan prices with"'

# qk: the whole pipeline per checkpoint (hash, read, extract, statistics, 8 singular vectors, commit).
QK_SECONDS = Seconds("QK_SECONDS_1_4B", 10.62, "heads", f"{_FIGURES}, QK_SECONDS_1_4B")
# ov: one more set of heads.parquet rows per checkpoint, at about the qk figure (docs/precompute.md, --matrices).
OV_SECONDS = Seconds("OV_SECONDS_1_4B", QK_SECONDS.seconds, "heads", f"{_FIGURES}, OV_SECONDS_1_4B")
HEADS_BYTES = StoreBytes((HEADS,), 338.9, "head_matrices", "head and matrix", f"{_FIGURES}, heads.parquet")

# ------------------------------------------------------------------ the refined LLC's work

# The Pythia-160M figures' sampler: 256-token sequences, the default 4 x (48 + 96) steps of one sequence.
LLC_REFERENCE_TOKENS, LLC_REFERENCE_CHAIN_STEPS = 256, 4 * (48 + 96)
# The batched sampler's products run slower on narrow models (per-operation cost, small matrices): CPU-seconds per
# multiply-add grow as (d_model / 768) ** -LLC_WIDTH_EXPONENT below Pythia-160M's width, fitted to measured
# checkpoints (docs/benchmarks.md "The figures headwatch plan prices with", LLC_WIDTH_EXPONENT).
LLC_WIDTH_EXPONENT = 0.45


@dataclass(frozen=True)
class LlcRun:
    """What one checkpoint's refined LLC samples: ``sequences`` of ``seq_len`` tokens per SGLD step (``--llc-batch-size``
    and ``--eval-length``) for ``chain_steps`` steps of each estimate (chains x (burn-in + draws))."""

    seq_len: int
    chain_steps: int
    sequences: int = 1


# The Pythia-160M shape the rLLC's, the forward lens's and the essential lens's figures were measured at
# (docs/benchmarks.md): GPT-NeoX, parallel residual.
PYTHIA_160M_GEOMETRY = Geometry(n_layers=12, n_heads=12, d_model=768, d_mlp=3072, vocab=50304, parallel=True)


def efficiency(g: Geometry) -> float:
    """The CPU's rate at a model's width against Pythia-160M's: ``(d_model / 768) ** LLC_WIDTH_EXPONENT``, at most 1."""
    return min(1.0, g.d_model / PYTHIA_160M_GEOMETRY.d_model) ** LLC_WIDTH_EXPONENT


def llc_token_macs(g: Geometry, tokens: int) -> tuple[float, float]:
    """Multiply-adds per token of one step of one chain of every head of a checkpoint's refined LLC, and of the
    whole model's, as the batched sampler computes them (`precompute.lenses.llc_sampler`).

    A head's lane recomputes its head (its projections, and its attention scores and mix over every key: the causal
    mask is applied to a full ``tokens`` x ``tokens`` product), its layer's MLP unless the residual is parallel (then
    the MLP reads the frozen input), every layer above and the unembedding; backward, the gradients of the
    activations from the top down to the head (one product per weight product, two per attention product: both of
    its operands move) and of the head's own weights (none of the layer's input). The whole model runs forward,
    then backward with every weight's gradient and every activation's. Matrix products only, as torch's
    ``FlopCounterMode`` counts them (tests/unit/test_costs.py checks both against it).
    """
    d_head = g.d_model // g.n_heads
    attend = 2 * tokens * g.d_model  # a block's attention's two products (scores, mix) over every head
    block = 2 * g.dense + 3 * attend  # forward (dense + attend) and backward to the activations (dense + 2 attend)
    unembed = g.vocab * g.d_model
    heads = 0.0
    for layer in range(g.n_layers):
        mlp = 0 if g.parallel else 2 * g.mlp  # forward and backward to its input
        # forward 4 d d_head + 2 T d_head; backward W_o's gradient and its input's (2 d d_head), both attention
        # products' two operands (4 T d_head), W_q, W_k, W_v's gradients (3 d d_head)
        own = 9 * g.d_model * d_head + 6 * tokens * d_head + mlp
        heads += g.n_heads * (own + (g.n_layers - 1 - layer) * block + 2 * unembed)
    whole = g.n_layers * (3 * g.dense + 3 * attend) + 3 * unembed  # forward, weights' and activations' gradients
    return heads, whole


def llc_work(geometry: Geometry, run: LlcRun) -> float:
    """A checkpoint's refined-LLC work in the units of the reference's: multiply-adds over the run's steps and
    tokens (attention per sequence), divided by the CPU's efficiency at the model's width (``(d_model / 768) **
    LLC_WIDTH_EXPONENT``, at most 1)."""
    heads, whole = llc_token_macs(geometry, run.seq_len)
    return run.chain_steps * run.sequences * run.seq_len * (heads + whole) / efficiency(geometry)


def llc_scale(shape: Shape, config: Mapping[str, Any], run: LlcRun) -> tuple[float, str]:
    """`time_scale`'s "llc": this run's refined-LLC work against the Pythia-160M shape's at the default sampler."""
    reference = llc_work(PYTHIA_160M_GEOMETRY, LlcRun(LLC_REFERENCE_TOKENS, LLC_REFERENCE_CHAIN_STEPS))
    f = llc_work(model_geometry(shape, config), run) / reference
    batch = f"{run.sequences} x {run.seq_len}" if run.sequences != 1 else f"{run.seq_len}"
    return f, (
        f"x {f:.3g} (the rLLC's multiply-adds at {run.chain_steps} SGLD steps of {batch} tokens per estimate, its "
        f"chains' together, over the CPU's efficiency at d_model {shape.d_model}, against Pythia-160M's at "
        f"{LLC_REFERENCE_CHAIN_STEPS} x {LLC_REFERENCE_TOKENS})"
    )


# ------------------------------------------------------------------ scaling to a model


def parameters(shape: Shape, config: Mapping[str, Any]) -> int:
    """Parameters of a decoder: 12 L d^2 for the blocks plus the embedding and unembedding."""
    vocab = int(language_config(config).get("vocab_size") or 0)
    return 12 * shape.n_layers * shape.d_model**2 + 2 * vocab * shape.d_model


def head_pairs(n_layers: int, n_heads: int) -> int:
    """Ordered pairs of heads in different layers (source below target): the composition scores' rows."""
    return n_heads**2 * n_layers * (n_layers - 1) // 2


def all_head_pairs(n_layers: int, n_heads: int) -> int:
    """Unordered pairs of heads, within and across layers: the similarity's rows."""
    heads = n_layers * n_heads
    return heads * (heads - 1) // 2


# --eval-sequences and --eval-length of the Pythia-160M forward-pass figures
FORWARD_REFERENCE = (32, 256)


def forward_token_macs(g: Geometry, tokens: int) -> float:
    """Multiply-adds per token of one forward pass of a sequence of ``tokens``: every block's weight products and
    attention's two products over every key, and the unembedding."""
    return g.n_layers * (g.dense + 2 * tokens * g.d_model) + g.vocab * g.d_model


def forward_work(geometry: Geometry, sequences: int, seq_len: int) -> float:
    """Forward passes over ``sequences`` of ``seq_len`` tokens, in multiply-adds over the CPU's efficiency at the
    model's width (as `llc_work`)."""
    return sequences * seq_len * forward_token_macs(geometry, seq_len) / efficiency(geometry)


def forward_scale(figure: Seconds, shape: Shape, config: Mapping[str, Any], evaluation: tuple[int, int]) -> tuple[float, str]:
    """`time_scale`'s "forward": the lens's forward passes at ``evaluation`` (--eval-sequences, --eval-length; the
    sequences it runs are ``figure.sequences`` of them) against the Pythia-160M figure's."""
    assert figure.sequences is not None, figure.name
    n, t = evaluation
    ref_n, ref_t = FORWARD_REFERENCE
    sequences, ref_sequences = figure.sequences(n), figure.sequences(ref_n)
    f = forward_work(model_geometry(shape, config), sequences, t) / forward_work(PYTHIA_160M_GEOMETRY, ref_sequences, ref_t)
    return f, (
        f"x {f:.3g} (forward passes of {sequences} sequences of {t} tokens, over the CPU's efficiency at d_model "
        f"{shape.d_model}, against Pythia-160M's {ref_sequences} of {ref_t})"
    )


def ablation_macs(
    g: Geometry,
    seq_len: int,
    text: int,
    probe: int,
    *,
    layers: Collection[int] | None = None,
    contexts: bool = True,
) -> tuple[float, float]:
    """Multiply-adds of one checkpoint of the ablation lens as it computes it, and of the plain way, over ``text``
    evaluation sequences and ``probe`` probe sequences of ``seq_len`` tokens, every head of ``layers`` (None: every
    layer) ablated.

    The lens (`precompute.lenses.ablation.ablation_pass`): the intact pass over every sequence, unembedding
    included, which also finds the heads' means over the text; for each head of layer l, as a lane over the intact
    pass's input to l: its layer's MLP, every layer above and the unembedding (its own head's output and the layer's
    projections are the intact pass's). The lane's own MLP: none under GPT-NeoX's parallel residual (it reads the
    unchanged input); split around a LayerNorm before two matrices (GPT-2, `ablation._SplitNorm`): the second
    matrix, the first's d_head-wide part and the norm's d_head^2 per lane-token, W_o[k]^T c(h) of every head per
    token, N_k and A_k^T A_k per layer and pass; else both matrices (three gated). With ``contexts``, the attention
    rows of the top tokens from the intact pass's layer inputs: Q and K of every layer, counted over every sequence.
    The plain way: a forward pass over the text for the means, then one forward pass per head over every sequence.
    Matrix products only (`forward_token_macs`'s blocks: weights and attention's two products over every key; and
    the lens's m_h W_o[h]^T, once per layer for the text and once for the probe).
    """
    attend = 2 * seq_len * g.d_model
    block = g.dense + attend
    unembed = g.vocab * g.d_model
    full = g.n_layers * block + unembed
    chosen = range(g.n_layers) if layers is None else sorted(layers)
    tokens, text_tokens = (text + probe) * seq_len, text * seq_len
    d, d_head = g.d_model, g.d_model // g.n_heads
    # the lane's own MLP: none under the parallel residual; split around a LayerNorm (not gated): its second matrix,
    # the first's d_head-wide part and the norm's d_head^2; else both matrices (three gated)
    split = not g.parallel and not g.gated
    own = 0 if g.parallel else (d * g.d_mlp + d_head * g.d_mlp + d_head**2 if split else g.mlp)
    lanes = sum(g.n_heads * (own + (g.n_layers - 1 - layer) * block + unembed) for layer in chosen)
    # per token of an ablated layer, split: W_o[k]^T c(h) for every head; per pass and layer: m_h W_o[h]^T, and,
    # split, N_k and A_k^T A_k of every head
    lanes += len(chosen) * d**2 if split else 0
    swaps = 2 * len(chosen) * (d**2 + (g.d_mlp * d**2 + d**2 * d_head if split else 0))
    batched = tokens * (full + lanes + (g.n_layers * 2 * d**2 if contexts else 0)) + swaps
    plain = text_tokens * full + tokens * full * g.n_heads * len(chosen)
    return float(batched), float(plain)


# --eval-sequences and --eval-length of the Pythia-160M ablation figure (and the probe's 8 sequences)
ABLATION_REFERENCE = (32, 256)


def ablation_scale(shape: Shape, config: Mapping[str, Any], evaluation: tuple[int, int]) -> tuple[float, str]:
    """`time_scale`'s "ablation": the lens's multiply-adds at ``evaluation`` over the CPU's efficiency at the model's
    width, against the Pythia-160M figure's at `ABLATION_REFERENCE`."""
    n, t = evaluation
    ref_n, ref_t = ABLATION_REFERENCE
    geometry = model_geometry(shape, config)
    work = ablation_macs(geometry, t, n, INDUCTION_SEQUENCES)[0] / efficiency(geometry)
    ref = ablation_macs(PYTHIA_160M_GEOMETRY, ref_t, ref_n, INDUCTION_SEQUENCES)[0]
    f = work / ref
    return f, (
        f"x {f:.3g} (every head ablated as lanes over {n} + {INDUCTION_SEQUENCES} sequences of {t} tokens, in "
        f"multiply-adds over the CPU's efficiency at d_model {shape.d_model}, against Pythia-160M's at {ref_n} + "
        f"{INDUCTION_SEQUENCES} of {ref_t})"
    )


def time_scale(
    figure: Seconds,
    shape: Shape,
    config: Mapping[str, Any],
    *,
    llc: LlcRun | None = None,
    evaluation: tuple[int, int] = FORWARD_REFERENCE,
) -> tuple[float, str]:
    """The factor a figure measured at its reference model is scaled by for ``shape``, and how, in words
    (``llc``: what the refined LLC samples per checkpoint, default the default sampler on 256-token sequences;
    ``evaluation``: --eval-sequences and --eval-length, for the forward lenses)."""
    scale = figure.scale
    if scale == "llc":
        return llc_scale(shape, config, llc or LlcRun(LLC_REFERENCE_TOKENS, LLC_REFERENCE_CHAIN_STEPS))
    if scale == "forward":
        return forward_scale(figure, shape, config, evaluation)
    if scale == "ablation":
        return ablation_scale(shape, config, evaluation)
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
