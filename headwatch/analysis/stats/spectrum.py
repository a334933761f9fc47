"""Exact singular values of W_QK = W_Q^T W_K from a d_head x d_head core, batched.

With A = W_Q^T and B = W_K^T (each d_model x d_head) and thin QR factorizations
A = Q_a R_a, B = Q_b R_b,

    W_QK = A B^T = Q_a (R_a R_b^T) Q_b^T.

Q_a and Q_b have orthonormal columns, so the non-zero singular values of the
d_model x d_model product are exactly those of the d_head x d_head core
R_a R_b^T. This costs O(d_model d_head^2) per head instead of the O(d_model^3)
of a dense SVD, and never forms the dense matrix. The core has exactly d_head
singular values; all of them are kept (some may be zero for a rank-deficient
head) and none are padded.

The R factors come from a Cholesky factorization of the d_head x d_head Gram matrix
(Cholesky-QR: A^T A = L L^T, R = L^T), which costs one batched matrix product and needs
no Householder reflections: 2 to 3 times faster here. Its error grows with the square
of the factor's condition number, so it is used only for a factor whose
||L||_F ||L^-1||_F (an upper bound on cond(A)) is at most `CHOLESKY_MAX_COND`; there the
relative error of the factor's singular values is about eps * cond^2 < 1e-8, far below
the float16 rounding of the weights. Any other factor (ill-conditioned, rank-deficient,
zero) and every float32 spectrum take Householder QR (error about eps * cond).
"""

from __future__ import annotations

import torch

from headwatch.analysis.stats.definitions import SPECTRAL_STATS as SPECTRAL_STATS  # the names its results carry

# Largest bound on a factor's condition number for which its R comes from Cholesky-QR
# (float64 only): eps_64 * 1e4^2 = 2e-8. Random heads bound near d_head (the Frobenius
# norms count every singular value); trained ones with cond up to ~100 stay well inside.
CHOLESKY_MAX_COND = 1e4


def r_factor(w: torch.Tensor, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """An upper-triangular R with R^T R = w w^T, i.e. the R of a thin QR of A = w^T, per head.

    Args:
        w: ``(..., d_head, d_model)`` factor (the layout used after extraction), d_head <= d_model.
        dtype: precision; float64 uses Cholesky-QR where the factor is well conditioned
            (module docstring), float32 always Householder QR.

    Returns:
        ``(..., d_head, d_head)`` in ``dtype``. R is unique up to the signs of its rows, and
        every use here (singular values, `top_singular_vectors`) is invariant to them.
    """
    w = w.to(dtype)  # one conversion (none for factors already in dtype)
    a = w.transpose(-1, -2)  # (..., d_model, d_head)
    if dtype != torch.float64:
        return torch.linalg.qr(a, mode="r").R
    gram = w @ a  # (..., d_head, d_head) = A^T A
    low, info = torch.linalg.cholesky_ex(gram)
    eye = torch.eye(gram.shape[-1], dtype=dtype, device=gram.device).expand_as(gram)
    inv = torch.linalg.solve_triangular(low, eye, upper=False)
    bound = torch.linalg.matrix_norm(low) * torch.linalg.matrix_norm(inv)  # >= cond(A) = cond(L)
    good = (info == 0) & torch.isfinite(bound) & (bound <= CHOLESKY_MAX_COND)
    r = low.transpose(-1, -2).contiguous()
    if not bool(good.all()):
        bad = ~good
        r[bad] = torch.linalg.qr(a[bad], mode="r").R
    return r


def singular_values(w_q: torch.Tensor, w_k: torch.Tensor, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Singular values of W_Q^T W_K for a batch of heads.

    Args:
        w_q: query weights, ``(..., d_head, d_model)``.
        w_k: key weights, same shape (one K head per query head).
        dtype: precision of the QR and the core SVD. float64 (default) keeps
            small singular values of ill-conditioned heads accurate; the cost
            is small next to the element-wise statistics.

    Returns:
        ``(..., d_head)`` singular values, descending, on the inputs' device.

    Raises:
        ValueError: mismatched shapes, or d_head > d_model.
    """
    if w_q.shape != w_k.shape:
        raise ValueError(f"W_Q shape {tuple(w_q.shape)} != W_K shape {tuple(w_k.shape)}")
    d_head, d_model = w_q.shape[-2:]
    if d_head > d_model:
        raise ValueError(f"d_head={d_head} exceeds d_model={d_model}; expected (..., d_head, d_model) inputs")
    r_a = r_factor(w_q, dtype=dtype)  # (..., d_head, d_head)
    r_b = r_factor(w_k, dtype=dtype)  # (..., d_head, d_head)
    core = r_a @ r_b.transpose(-1, -2)  # (..., d_head, d_head)
    return torch.linalg.svdvals(core)


def spectral_statistics(sv: torch.Tensor, *, d_model: int) -> dict[str, torch.Tensor]:
    """Scalar statistics of a spectrum, with lambda_k = s_k^2 (natural logs).

    - stable rank ``sum(lambda) / lambda_max``
    - spectral entropy ``-sum p ln p`` with ``p = lambda / sum(lambda)`` (0 ln 0 = 0)
    - participation ratio ``(sum lambda)^2 / sum(lambda^2)``
    - condition number ``s_max / s_min``; ``inf`` when the head is numerically
      rank-deficient, i.e. ``s_min <= s_max * d_model * eps`` (NumPy's
      ``matrix_rank`` rule, with eps of ``sv``'s dtype)
    - Frobenius norm ``sqrt(sum lambda)`` and spectral norm ``s_max``

    A head that is exactly zero has stable rank, entropy and participation
    ratio 0 and condition number inf. Nothing here returns NaN for finite input.

    Args:
        sv: ``(..., d_head)`` singular values, descending.
        d_model: the side of W_QK, for the rank tolerance.

    Returns:
        A dict of ``(...)`` tensors keyed by `SPECTRAL_STATS`.
    """
    lam = sv * sv
    total = lam.sum(-1)
    lam_max = lam[..., 0]
    s_max = sv[..., 0]
    s_min = sv[..., -1]
    nonzero = total > 0
    safe_total = torch.where(nonzero, total, torch.ones_like(total))
    p = lam / safe_total[..., None]
    entropy = -torch.special.xlogy(p, p).sum(-1)
    stable_rank = torch.where(nonzero, total / torch.where(nonzero, lam_max, torch.ones_like(lam_max)), 0.0)
    pr = torch.where(nonzero, safe_total**2 / torch.where(nonzero, (lam * lam).sum(-1), torch.ones_like(total)), 0.0)
    tol = s_max * d_model * torch.finfo(sv.dtype).eps
    deficient = (s_min <= tol) | ~nonzero
    cond = torch.where(
        deficient, torch.full_like(s_max, float("inf")), s_max / torch.where(deficient, torch.ones_like(s_min), s_min)
    )
    return {
        "stable_rank": stable_rank,
        "spectral_entropy": torch.where(nonzero, entropy, 0.0),
        "participation_ratio": pr,
        "condition_number": cond,
        "frob_norm": total.sqrt(),
        "spectral_norm": s_max,
    }


def top_singular_vectors(
    w_q: torch.Tensor, w_k: torch.Tensor, k: int, *, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All singular values and the leading ``k`` singular vectors of W_Q^T W_K, from the QR core, batched.

    With A = W_Q^T = Q_a R_a, B = W_K^T = Q_b R_b and the core's SVD
    C = R_a R_b^T = U_c S V_c^T, W_QK = (Q_a U_c) S (Q_b V_c)^T is an SVD of the
    product. Q_a is never formed: Q_a U_c = A R_a^{-1} U_c and R_a^{-1} U_c =
    R_a^{-1} C V_c S^{-1} = R_b^T V_c S^{-1}, so

        u_j = A R_b^T v_c,j / s_j,    v_j = B R_a^T u_c,j / s_j,

    two thin products per head on top of the R-only factorizations that
    `singular_values` does (forming Q_a and Q_b would triple the cost). Columns are
    renormalised against rounding. A direction whose s_j is zero by NumPy's rank
    rule (``s_j <= s_max * d_model * eps``) is undefined and returned as zeros.

    Args:
        w_q, w_k: ``(..., d_head, d_model)``.
        k: how many leading vectors, ``1 <= k <= d_head``.
        dtype: precision of the factorizations.

    Returns:
        ``(s, u, v)``: ``(..., d_head)`` singular values, all of them, descending (the same
        values as `singular_values` up to rounding), and ``(..., d_model, k)`` left and
        ``(..., d_model, k)`` right singular vectors of the ``k`` largest (unit columns).
    """
    if w_q.shape != w_k.shape:
        raise ValueError(f"W_Q shape {tuple(w_q.shape)} != W_K shape {tuple(w_k.shape)}")
    d_head, d_model = w_q.shape[-2:]
    if not 1 <= k <= d_head:
        raise ValueError(f"k={k} must be between 1 and d_head={d_head}")
    w_q, w_k = w_q.to(dtype), w_k.to(dtype)  # converted once for the R factors and the vectors
    r_a = r_factor(w_q, dtype=dtype)  # (..., d_head, d_head)
    r_b = r_factor(w_k, dtype=dtype)
    u_c, s, v_ch = torch.linalg.svd(r_a @ r_b.transpose(-1, -2))  # core (..., d_head, d_head)
    s_k = s[..., None, :k]  # (..., 1, k)
    defined = s_k > s[..., None, :1] * d_model * torch.finfo(dtype).eps
    scale = torch.where(defined, 1.0 / torch.where(defined, s_k, 1.0), 0.0)
    # u^T = (v_c^T R_b) A^T: the product with the (d_head, d_model) rows as stored runs at matmul speed
    u = ((v_ch[..., :k, :] @ r_b) @ w_q).transpose(-1, -2) * scale  # (..., d_model, k)
    v = ((u_c[..., :k].transpose(-1, -2) @ r_a) @ w_k).transpose(-1, -2) * scale
    u = u / torch.linalg.vector_norm(u, dim=-2, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
    v = v / torch.linalg.vector_norm(v, dim=-2, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
    return s, u, v
