"""How alike two heads are, in ways that do not depend on the basis of the residual stream.

For every unordered pair of heads a < b (all heads of the model in layer-major order: pairs within a
layer and across layers) and each of their products M = W_QK (= W_Q^T W_K, this project's convention:
the score is x_q^T W_QK x_k) and M = W_OV (= W_O,h W_V,h), three statistics:

- ``frob``: the normalized Frobenius inner product ``<M_a, M_b>_F / (||M_a||_F ||M_b||_F)``, in [-1, 1]
  (the cosine between the two matrices as vectors; signed: a head and its negative score -1);
- ``col``: the mean of cos^2 over the principal angles between the column spaces of M_a and M_b
  (``scipy.linalg.subspace_angles(M_a, M_b)``: min(rank_a, rank_b) angles), in [0, 1]. For W_QK the
  column space is what the queries read (span of W_Q^T), for W_OV where the head writes (span of W_O);
- ``row``: the same for the row spaces (the column spaces of M^T): what the keys read (span of W_K^T),
  and what the values read (span of W_V^T).

**Why these do not depend on the residual basis.** Express the residual stream in another orthonormal
basis, x -> R x with R orthogonal (d_model x d_model): every head's factors become ``W R^T``, so
``M -> R M R^T``. The Frobenius inner product is invariant (``tr(R M_a^T R^T R M_b R^T) = tr(M_a^T M_b)``),
and so are the norms; the column and row spaces are both rotated by R, which keeps every principal angle
between them. A comparison of the matrices' entries, of their rows, or of d_model-indexed features
(a residual direction, a neuron) is not invariant in this way. The statistics are NOT invariant to a
non-orthogonal change of basis (x -> A x with A not orthogonal, such as a per-direction scaling:
folding a LayerNorm's gain into the weights, ``W diag(gamma)``, changes them wherever gamma is not a
multiple of the identity), nor to a different change of basis for different heads; LayerNorm is not
folded here, as in every table of the store (a uniform gain cancels from all three).

**From the factors, never a d_model x d_model matrix.** Each head's product is ``M = X^T Y`` with
factors X, Y of shape ``(d_head, d_model)`` (`families.extract`: ``(W_Q, W_K)`` and ``(W_O^T, W_V)``).
With the thin QR decompositions ``X^T = Q_X R_X``, ``Y^T = Q_Y R_Y`` and the SVD of the d_head x d_head
core ``R_X R_Y^T = U S V^T``, ``M = (Q_X U) S (Q_Y V)^T`` is M's SVD: ``C = Q_X U`` and ``D = Q_Y V``
(d_model x d_head, orthonormal columns) span its column and row spaces (the columns whose singular value
exceeds ``s_max * eps * d_model``, scipy.linalg.orth's rank rule, on ranks below d_head). For a pair,
with the d_head x d_head Gram matrices ``G = C_a^T C_b`` and ``H = D_a^T D_b``:

    <M_a, M_b>_F = tr(D_a S_a C_a^T C_b S_b D_b^T) = sum_ij s_a,i G_ij s_b,j H_ij,   ||M||_F = ||s||,
    cosines of the column-space angles = singular values of G (over the rank columns),
    mean cos^2 = ||G||_F^2 / min(rank_a, rank_b)   (the sum of the squared singular values),

and the same with H for the row spaces. So a pair costs two ``(d_head x d_model) (d_model x d_head)``
products per matrix (``4 d_head^2 d_model`` flops), the heads' bases are computed once per head, and
blocks of heads are one batched matrix product each.

**The random baseline** (`random_baseline`): heads with independent standard Gaussian factors of the
model's shapes, simulated once per shape with a fixed seed. Exactly, for such heads, E[frob] = 0 with
root mean square 1/d_model (M_b's distribution is invariant under M_b -> U M_b V^T for independent
rotations U, V, and ``E <A, U B V^T>^2 = ||A||^2 ||B||^2 / d_model^2``), and E[col] = E[row] = d_head /
d_model (a uniformly random d_head-plane: ``E ||C_a^T C_b||_F^2 = d_head^2 / d_model``). The
ultrametricity shares of such heads (`analysis.weights.ultrametric`) have no closed form and are simulated.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch

from headwatch.analysis.threads import map_per_core
from headwatch.analysis.weights.heads import factor_shape
from headwatch.analysis.weights.ultrametric import STATS, TOLERANCE, distance, ultrametric_shares

# The products compared, and the columns of a pair: f"{matrix}_{stat}", in this order.
MATRICES = ("qk", "ov")
COLUMNS = tuple(f"{m}_{s}" for m in MATRICES for s in STATS)
# The simulated baseline: its seed, and about how many triangles (within a layer) it draws.
BASELINE_SEED = 0
BASELINE_TRIANGLES = 5000
BASELINE_MAX_LAYERS = 256


def _row_basis(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The thin QR ``x^T = Q R`` of ``(..., d_head, d_model)`` factors, as ``(Q^T, R)``.

    R comes from Householder QR without forming Q (several times faster on a CPU), and ``Q^T`` from the
    triangular solve ``R^T Q^T = x``; a head whose solved rows are not orthonormal to ``sqrt(eps)`` (a
    singular or badly conditioned R: a rank-deficient factor) is done again with the full QR.
    """
    r = torch.linalg.qr(x.mT, mode="r").R
    q_t = torch.linalg.solve_triangular(r.mT, x, upper=False)
    eye = torch.eye(x.shape[-2], dtype=x.dtype, device=x.device)
    error = (q_t @ q_t.mT - eye).abs().amax(dim=(-2, -1))
    redo = ~(error <= math.sqrt(torch.finfo(x.dtype).eps))  # NaN and infinity included
    if bool(redo.any()):
        q, r_full = torch.linalg.qr(x[redo].mT)
        q_t[redo], r[redo] = q.mT, r_full
    return q_t, r


def head_bases(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The SVD of every head's ``M = x^T y`` from its factors: orthonormal bases of its column and row
    spaces, its singular values and which of them count towards its rank.

    Args:
        x, y: ``(..., d_head, d_model)`` factors (``(W_Q, W_K)`` or ``(W_O^T, W_V)``), d_head <= d_model.

    Returns:
        ``(col, row, s, kept)``: ``col`` and ``row`` ``(..., d_head, d_model)`` with orthonormal rows (the
        left and right singular vectors of M), ``s`` ``(..., d_head)`` the singular values (descending), and
        ``kept`` bool ``(..., d_head)``: ``s > s_max * eps * d_model`` (scipy.linalg.orth's rule), the
        directions that span M's column and row spaces.
    """
    q_x_t, r_x = _row_basis(x)  # x^T = Q_X R_X
    q_y_t, r_y = _row_basis(y)
    u, s, vh = torch.linalg.svd(r_x @ r_y.mT)  # M = Q_X (U S V^T) Q_Y^T
    col = u.mT @ q_x_t  # (Q_X U)^T
    row = vh @ q_y_t  # (Q_Y V)^T
    kept = s > s[..., :1] * torch.finfo(s.dtype).eps * x.shape[-1]
    return col, row, s, kept


def _block(
    a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...], d_model: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """frob, col, row ``(n_a, n_b)`` of every pair of two blocks of heads' `head_bases`."""
    col_a, row_a, s_a, k_a = a
    col_b, row_b, s_b, k_b = b
    n_a, d_head = s_a.shape
    n_b = s_b.shape[0]
    g = (col_a.reshape(n_a * d_head, d_model) @ col_b.reshape(n_b * d_head, d_model).T).view(n_a, d_head, n_b, d_head)
    h = (row_a.reshape(n_a * d_head, d_model) @ row_b.reshape(n_b * d_head, d_model).T).view(n_a, d_head, n_b, d_head)
    inner = torch.einsum("ia,iajb,jb->ij", s_a, g * h, s_b)
    norms = torch.linalg.vector_norm(s_a, dim=1)[:, None] * torch.linalg.vector_norm(s_b, dim=1)[None, :]
    frob = inner / torch.where(norms > 0, norms, torch.nan)
    ka, kb = k_a.to(g.dtype), k_b.to(g.dtype)
    rank = torch.minimum(ka.sum(1)[:, None], kb.sum(1)[None, :])
    rank = torch.where(rank > 0, rank, torch.nan)
    col = torch.einsum("ia,iajb,jb->ij", ka, g.square_(), kb) / rank
    row = torch.einsum("ia,iajb,jb->ij", ka, h.square_(), kb) / rank
    return frob, col, row


def similarity(
    qk: tuple[torch.Tensor, torch.Tensor],
    ov: tuple[torch.Tensor, torch.Tensor],
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    chunk_elements: int = 2**26,
    within_layers: bool = False,
) -> torch.Tensor:
    """The similarity statistics of every unordered pair of heads (the module docstring defines them).

    Args:
        qk: ``(W_Q, W_K)`` per head, each ``(n_layers, n_heads, d_head, d_model)`` (`families.extract`).
        ov: ``(W_O^T, W_V)`` per head, the same shape.
        dtype: the dtype every product is computed in (the inputs are converted; never modified).
        device: where to compute.
        chunk_elements: about the most entries of the batched products' buffers together (blocks of heads).
        within_layers: only the pairs of heads in one layer (the others NaN).

    Returns:
        ``(6, n_layers, n_heads, n_layers, n_heads)`` float64 on the CPU, indexed
        ``[column, layer_a, head_a, layer_b, head_b]`` with columns `COLUMNS`; set only where
        ``(layer_a, head_a) < (layer_b, head_b)`` in layer-major order (NaN elsewhere, and for a pair
        with a zero matrix).

    Raises:
        ValueError: the four factors do not share one 4-D shape, or ``d_head > d_model``.
    """
    n_layers, n_heads, d_head, d_model = factor_shape(qk, ov)
    n = n_layers * n_heads
    # heads per block: the two Gram buffers of a block pair and their temporaries, about chunk_elements
    per_block = max(1, math.isqrt(max(1, chunk_elements // 4)) // d_head)
    # layers whose bases are computed together (their factors, converted, about chunk_elements), in at
    # least as many tasks as torch has threads: the small QRs and SVDs run one per core (`map_per_core`)
    per_bases = max(1, min(chunk_elements // (4 * n_heads * d_head * d_model), -(-n_layers // torch.get_num_threads())))
    spans = [(layer * n_heads, (layer + 1) * n_heads) for layer in range(n_layers)] if within_layers else [(0, n)]
    out = torch.full((len(COLUMNS), n, n), torch.nan, dtype=torch.float64)

    def bases_of(pair: tuple[torch.Tensor, torch.Tensor], i: int) -> tuple[torch.Tensor, ...]:
        x, y = (t[i : i + per_bases].to(device=device, dtype=dtype).flatten(0, 1) for t in pair)
        return head_bases(x, y)

    for m, pair in enumerate((qk, ov)):
        parts = map_per_core(partial(bases_of, pair), range(0, n_layers, per_bases))
        bases = tuple(torch.cat([p[j] for p in parts]) for j in range(4))  # (n, ...) in layer-major order
        for start, stop in spans:
            for i0 in range(start, stop, per_block):
                i1 = min(stop, i0 + per_block)
                a = tuple(t[i0:i1] for t in bases)
                for j0 in range(i0, stop, per_block):
                    j1 = min(stop, j0 + per_block)
                    stats = _block(a, tuple(t[j0:j1] for t in bases), d_model)
                    for s, values in enumerate(stats):
                        out[3 * m + s, i0:i1, j0:j1] = values.to("cpu", torch.float64)
    upper = torch.ones(n, n, dtype=torch.bool).triu(1)
    out[:, ~upper] = torch.nan
    return out.view(len(COLUMNS), n_layers, n_heads, n_layers, n_heads)


def layer_ultrametricity(values: np.ndarray, tol: float = TOLERANCE) -> dict[str, np.ndarray]:
    """The ultrametricity of every layer's heads for each column's distance (`analysis.weights.ultrametric`).

    Args:
        values: `similarity`'s ``(6, n_layers, n_heads, n_layers, n_heads)`` (as numpy).
        tol: the ultrametric test's tolerance.

    Returns:
        ``share``, ``share_of_max`` ``(6, n_layers)`` float64 and ``triangles`` ``(6, n_layers)`` int64.
    """
    n_columns, n_layers = values.shape[:2]
    out = {
        "share": np.full((n_columns, n_layers), np.nan),
        "share_of_max": np.full((n_columns, n_layers), np.nan),
        "triangles": np.zeros((n_columns, n_layers), dtype=np.int64),
    }
    for c, column in enumerate(COLUMNS):
        stat = column.split("_", 1)[1]
        for layer in range(n_layers):
            d = distance(stat, values[c, layer, :, layer, :])
            share, share_of_max, count = ultrametric_shares(d, tol)
            out["share"][c, layer], out["share_of_max"][c, layer], out["triangles"][c, layer] = share, share_of_max, count
    return out


def baseline_layers(n_heads: int, *, triangles: int = BASELINE_TRIANGLES) -> int:
    """How many random layers `random_baseline` draws: enough for about ``triangles`` triangles of heads
    (between 1 and `BASELINE_MAX_LAYERS`; 0 below 3 heads, which have no triangle)."""
    per_layer = math.comb(n_heads, 3)
    if per_layer == 0:
        return 0
    return max(1, min(BASELINE_MAX_LAYERS, -(-triangles // per_layer)))


def random_baseline(
    n_heads: int,
    d_head: int,
    d_model: int,
    *,
    tol: float = TOLERANCE,
    seed: int = BASELINE_SEED,
    device: str | torch.device = "cpu",
    chunk_elements: int = 2**26,
) -> dict[str, dict[str, float | None]]:
    """The statistics of random heads of the model's shapes: `baseline_layers` independent layers of
    ``n_heads`` heads with standard Gaussian W_Q, W_K, W_O, W_V (float64, a fixed seed: the same numbers
    for the same shapes and tolerance), each layer separately (pairs and triangles within a layer).

    Returns:
        ``{"mean": {column: mean over pairs}, "rms": {column: root mean square}, "share": {column: ultrametric
        share over all triangles}, "share_of_max": {...}}``; the shares are None below 3 heads.
    """
    layers = max(1, baseline_layers(n_heads))
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn((4, layers, n_heads, d_head, d_model), generator=gen, dtype=torch.float64)  # W_Q, W_K, W_O^T, W_V
    values = similarity((w[0], w[1]), (w[2], w[3]), device=device, chunk_elements=chunk_elements, within_layers=True).numpy()
    upper = np.triu(np.ones((n_heads, n_heads), dtype=bool), 1)
    flat = np.stack([values[:, layer, :, layer, :][:, upper] for layer in range(layers)], axis=1).reshape(len(COLUMNS), -1)
    out: dict[str, dict[str, float | None]] = {
        "mean": {c: float(np.mean(flat[i])) for i, c in enumerate(COLUMNS)},
        "rms": {c: float(np.sqrt(np.mean(flat[i] ** 2))) for i, c in enumerate(COLUMNS)},
    }
    u = layer_ultrametricity(values, tol)  # (6, layers); every layer has the same triangles
    for key in ("share", "share_of_max"):
        out[key] = {c: (float(np.mean(u[key][i])) if n_heads >= 3 else None) for i, c in enumerate(COLUMNS)}
    return out


def expected(d_head: int, d_model: int) -> dict[str, float]:
    """The exact moments of random Gaussian heads' pair statistics (the module docstring derives them):
    ``frob_rms`` = 1/d_model (mean 0), ``col`` = ``row`` = d_head/d_model (means)."""
    return {"frob_mean": 0.0, "frob_rms": 1.0 / d_model, "col_mean": d_head / d_model, "row_mean": d_head / d_model}
