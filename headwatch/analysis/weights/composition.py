"""Q-, K- and V-composition between every pair of heads in different layers, from their factors.

Head A (layer a) writes ``W_OV,A x`` into the residual stream; a head B in a later layer b > a
reads the stream through its query (``W_QK,B = W_Q,B^T W_K,B``: the score is ``x_q^T W_QK,B x_k``,
so B's queries read A's output through ``W_QK,B^T``), its keys (through ``W_QK,B``) or its values
(through ``W_OV,B``). Following Elhage et al. (2021, "A Mathematical Framework for Transformer
Circuits"), the composition scores of the ordered pair (A, B) are::

    q = ||W_QK,B^T W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F)
    k = ||W_QK,B   W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F)
    v = ||W_OV,B   W_OV,A||_F / (||W_OV,B||_F ||W_OV,A||_F)

each in [0, 1] (Frobenius norm is submultiplicative). Heads of one layer read the same residual
stream and cannot compose (in GPT-NeoX's parallel blocks neither can the MLP), so only a < b.

**From the factors, through QR cores.** Every product is ``X^T Y Z^T W`` with B's factors X, Y
and A's factors Z, W, each ``(d_head, d_model)`` in the layout of `families.extract`
(``W_QK = W_Q^T W_K``, ``W_OV = (W_O^T)^T W_V``). With the thin QR decompositions
``X^T = Q_X R_X`` and ``W^T = Q_W R_W`` (``R`` is ``d_head x d_head``; Q has orthonormal columns,
so multiplying by it keeps Frobenius norms)::

    ||X^T Y Z^T W||_F = ||R_X Y Z^T R_W^T||_F = ||Y~_B Z~_A^T||_F,  Y~_B = R_X Y,  Z~_A = R_W Z,
    ||X^T Y||_F = ||Y~_B||_F,   ||Z^T W||_F = ||Z~_A||_F.

So each head is reduced once to a ``(d_head, d_model)`` matrix (for B one per kind: q uses
``R(W_K) W_Q``, k uses ``R(W_Q) W_K``, v uses ``R(W_O^T) W_V``; for A ``R(W_V) W_O^T``), each
normalised to unit Frobenius norm, and the score of a pair is the Frobenius norm of one
``d_head x d_head`` product of two of them. No ``d_model x d_model`` matrix is formed; the pairs
of a target layer are one batched matrix product (``(3 n_heads d_head) x d_model`` times
``d_model x (n_sources d_head)``). Cost: ``2 d_head^2 d_model`` flops per pair and kind.

**LayerNorm is not folded.** The factors are the raw attention weights, as in every other table
of the store (``heads.parquet``, ``overlaps.parquet``). Each head reads the residual stream
through its layer's LayerNorm, ``gamma * P x / sigma + beta`` (P removes the mean; RMSNorm has no
P and no beta), so the matrix B really applies is ``W_Q,B diag(gamma_B) P`` and likewise for K, V
(and A's own input LayerNorm scales A's ``W_V``). A scalar gain cancels from every score (it
scales a numerator and its norm alike), and so does sigma; what is left out is the anisotropy of
gamma and the centring P. The scores are therefore those of the residual stream's own basis with
uniform gains, comparable across checkpoints whatever the LayerNorm learnt and computed from the
tensors every store reads (the LayerNorm weights are not fetched); tests/unit/test_composition.py
checks the scalar invariance and tests/integration/test_composition_lens.py that a model's
stored scores are those of its raw weights, not of its folded ones.

**The random baseline.** For independent random factors whose distribution is invariant under
rotations of the residual stream (Gaussian factors of any shapes), ``E[score^2] = 1/d_model``
exactly, for every kind: replacing A's matrix N by ``U N`` with U a Haar rotation leaves its
distribution unchanged, and ``E_U ||M U N||_F^2 = tr(M^T M E_U[U N N^T U^T]) = ||M||_F^2 ||N||_F^2
/ d_model`` because ``E_U[U S U^T] = tr(S) I / d_model``. `baseline_rms` gives ``1/sqrt(d_model)``;
`random_baseline` simulates the expected score itself (slightly below the root mean square, by
Jensen's inequality) for the model's shapes with a fixed seed, which is what a score is divided
by to read as "x times random".
"""

from __future__ import annotations

import math

import torch

from headwatch.analysis.weights.heads import factor_shape

# The three kinds, in the order of the first axis of `composition_scores`.
KINDS = ("q", "k", "v")
# Heads per layer in the simulated baseline (two layers: heads^2 pairs per kind) and its seed.
BASELINE_HEADS = 16
BASELINE_SEED = 0
# The simulated baseline draws independent two-layer models up to about this many flops of pair products.
BASELINE_FLOPS = 2**34
BASELINE_MAX_DRAWS = 64


def _r(factor: torch.Tensor) -> torch.Tensor:
    """R of the thin QR of ``factor^T``: ``(..., d_head, d_model) -> (..., d_head, d_head)``, with
    ``R^T R = factor factor^T``."""
    return torch.linalg.qr(factor.transpose(-1, -2), mode="r").R


def _unit(m: torch.Tensor) -> torch.Tensor:
    """``m / ||m||_F`` per head over the last two axes; NaN for a zero matrix."""
    norm = torch.linalg.matrix_norm(m, keepdim=True)
    return m / torch.where(norm > 0, norm, torch.nan)


def _targets(qk: tuple[torch.Tensor, torch.Tensor], ov: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Each head as a target B, reduced to unit-norm ``(d_head, d_model)`` matrices, one per kind
    (``R(W_K) W_Q``, ``R(W_Q) W_K``, ``R(W_O^T) W_V``): ``qk = (W_Q, W_K)`` and ``ov = (W_O^T, W_V)``, each
    ``(..., d_head, d_model)``, give ``(3, ..., d_head, d_model)`` in the factors' dtype."""
    (w_q, w_k), (w_o_t, w_v) = qk, ov
    return _unit(torch.stack([_r(w_k) @ w_q, _r(w_q) @ w_k, _r(w_o_t) @ w_v]))  # (3, ..., d_head, d_model)


def _sources(ov: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Each head as a source A, ``R(W_V) W_O^T`` at unit norm: ``ov = (W_O^T, W_V)``, each ``(..., d_head, d_model)``,
    gives ``(..., d_head, d_model)`` in the factors' dtype."""
    w_o_t, w_v = ov
    return _unit(_r(w_v) @ w_o_t)  # (..., d_head, d_model)


def composition_scores(
    qk: tuple[torch.Tensor, torch.Tensor],
    ov: tuple[torch.Tensor, torch.Tensor],
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    chunk_elements: int = 2**26,
) -> torch.Tensor:
    """Q-, K- and V-composition scores of every ordered pair of heads (A in layer a, B in layer b > a).

    Args:
        qk: ``(W_Q, W_K)`` per head, each ``(n_layers, n_heads, d_head, d_model)`` (`families.extract`).
        ov: ``(W_O^T, W_V)`` per head, the same shape.
        dtype: the dtype every product is computed in (the inputs are converted; never modified).
        device: where to compute.
        chunk_elements: most entries of one batched product (source layers are taken in chunks).

    Returns:
        ``(3, n_layers, n_heads, n_layers, n_heads)`` float64 on the CPU, indexed
        ``[kind, layer_a, head_a, layer_b, head_b]`` with kinds `KINDS`; NaN where
        ``layer_a >= layer_b`` and for a pair with a zero matrix.

    Raises:
        ValueError: the four factors do not share one 4-D shape, or ``d_head > d_model``.
    """
    n_layers, n_heads, d_head, d_model = factor_shape(qk, ov)

    def layer(i: int, pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return pair[0][i].to(device=device, dtype=dtype), pair[1][i].to(device=device, dtype=dtype)  # one layer at a time

    sources = torch.stack([_sources(layer(i, ov)) for i in range(n_layers - 1)])  # (n_layers - 1, n_heads, d_head, d_model)
    out = torch.full((3, n_layers, n_heads, n_layers, n_heads), torch.nan, dtype=torch.float64)
    rows = 3 * n_heads * d_head
    per_chunk = max(1, chunk_elements // (rows * n_heads * d_head))  # source layers per product
    for b in range(1, n_layers):
        y = _targets(layer(b, qk), layer(b, ov)).reshape(rows, d_model)  # (3 n_heads d_head, d_model)
        for a0 in range(0, b, per_chunk):
            a1 = min(b, a0 + per_chunk)
            z = sources[a0:a1].reshape((a1 - a0) * n_heads * d_head, d_model)  # (n_src n_heads d_head, d_model)
            cores = (y @ z.T).view(3, n_heads, d_head, a1 - a0, n_heads, d_head)
            norms = torch.linalg.vector_norm(cores, dim=(2, 5))  # (3, head_b, layer_a, head_a)
            out[:, a0:a1, :, b, :] = norms.permute(0, 2, 3, 1).to("cpu", torch.float64)
    return out


def strongest_sources(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Which pairs to keep when only the ``k`` strongest sources of each target head are wanted:
    a pair is kept when its source is among the ``k`` highest-scoring sources of its target for
    at least one kind (so each target keeps between k and 3k sources, all three scores each).

    Args:
        scores: `composition_scores`' ``(3, n_layers, n_heads, n_layers, n_heads)``.
        k: sources per target head and kind (at least 1).

    Returns:
        bool ``(n_layers, n_heads, n_layers, n_heads)`` ``[layer_a, head_a, layer_b, head_b]``;
        False wherever the score is NaN.

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k={k!r}: keep at least one source per target head")
    kinds, n_layers, n_heads = scores.shape[:3]
    per_target = scores.permute(0, 3, 4, 1, 2).reshape(kinds, n_layers * n_heads, n_layers * n_heads)  # (kind, target, source)
    ranked = torch.where(torch.isnan(per_target), -torch.inf, per_target)
    top = ranked.topk(min(k, n_layers * n_heads), dim=-1).indices
    keep = torch.zeros_like(per_target, dtype=torch.bool).scatter_(-1, top, True) & ~torch.isnan(per_target)
    return keep.any(0).reshape(n_layers, n_heads, n_layers, n_heads).permute(2, 3, 0, 1)


def baseline_rms(d_model: int) -> float:
    """The root mean square score of independent rotation-invariant random factors, ``1/sqrt(d_model)``
    (exact, every kind; the module docstring derives it)."""
    return 1.0 / math.sqrt(d_model)


def baseline_draws(d_head: int, d_model: int, *, heads: int = BASELINE_HEADS) -> int:
    """How many independent two-layer models `random_baseline` draws: as many as fit in about
    `BASELINE_FLOPS` of pair products, between 1 (Pythia-1.4B's shape: 256 pairs, seconds on a CPU)
    and `BASELINE_MAX_DRAWS` (small shapes, whose scores spread more)."""
    per_draw = 2 * 3 * heads**2 * d_head**2 * d_model
    return max(1, min(BASELINE_MAX_DRAWS, BASELINE_FLOPS // per_draw))


def random_baseline(
    d_head: int, d_model: int, *, heads: int = BASELINE_HEADS, seed: int = BASELINE_SEED, device: str | torch.device = "cpu"
) -> dict[str, float]:
    """The expected score of independent standard Gaussian factors of the given shapes, per kind,
    simulated: `baseline_draws` two-layer models of ``heads`` Gaussian heads per layer, the mean over
    their ``heads^2`` pairs each (float64, a fixed seed: the same numbers for the same shapes).

    Returns:
        kind (`KINDS`) -> mean score.
    """
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros(3, dtype=torch.float64)
    draws = baseline_draws(d_head, d_model, heads=heads)
    for _ in range(draws):
        w = torch.randn((4, 2, heads, d_head, d_model), generator=gen, dtype=torch.float64)  # W_Q, W_K, W_O^T, W_V
        scores = composition_scores((w[0], w[1]), (w[2], w[3]), device=device)
        total += scores[:, 0, :, 1, :].mean(dim=(1, 2))
    return {kind: float(total[i] / draws) for i, kind in enumerate(KINDS)}
