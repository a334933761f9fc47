"""Symmetry, eigenvalue signs and checkpoint-to-checkpoint change of per-head circuits, from their factors.

A head's circuit is ``W = A B^T`` (d_model x d_model, rank <= d_head) with ``A = left^T`` and
``B = right^T``, given in the layout used everywhere after extraction
(`families.extract`): ``left, right: (..., d_head, d_model)``, so ``W = left^T @ right``
(``qk``: ``(W_Q, W_K)``; ``ov``: ``(W_O^T, W_V)``). Nothing here forms W; everything
comes from d_head x d_head matrices (docs/design-notes.md section 7):

- the core ``M = B^T A = right @ left^T``: ``W`` and ``M`` have the same non-zero
  eigenvalues (``AB^T`` and ``B^T A`` share them), and ``tr(W W) = tr(M M)``;
- ``||W||_F^2 = tr(A^T A B^T B) = sum((left left^T) * (right right^T))``;
- the symmetric fraction ``||(W + W^T)/2||_F^2 / ||W||_F^2 = (1 + tr(W W) / ||W||_F^2) / 2``
  (since ``<W, W^T> = tr(W W)``): 1 for a symmetric W, 0 for an antisymmetric one, 1/2
  on average for a random one;
- the eigenvalue positivity ``sum_i Re(mu_i) / sum_i |mu_i|`` over the eigenvalues of M: in
  [-1, 1], 1 when every non-zero eigenvalue is positive (a copying OV head; a QK head that
  prefers tokens like the query), -1 when every one is negative. Zero eigenvalues add
  nothing to either sum, so "over the non-zero eigenvalues" needs no threshold;
- the relative change ``||W' - W||_F / ||W||_F`` between two checkpoints, with
  ``||W' - W||^2 = ||W'||^2 + ||W||^2 - 2 <W', W>`` and
  ``<W', W> = tr(B'^T B A^T A') = sum((left' left^T) * (right' right^T))``.

All sums run in float64. The change is a difference of O(||W||^2) terms, so its absolute
error is about sqrt(eps_64) ~ 1e-8 of ||W|| (tests/unit/test_circuits.py): far below the
changes between checkpoints of a training run, and clamped at 0 for identical factors.
"""

from __future__ import annotations

import torch


def _frob_sq(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``||left^T right||_F^2`` per head, from the two d_head x d_head Gram matrices."""
    g_left = left @ left.transpose(-1, -2)  # (..., d_head, d_head) = A^T A
    g_right = right @ right.transpose(-1, -2)  # (..., d_head, d_head) = B^T B
    return (g_left * g_right).sum((-1, -2))


def circuit_statistics(
    left: torch.Tensor, right: torch.Tensor, *, frob_sq: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Symmetric fraction and eigenvalue positivity of ``W = left^T right`` for a batch of heads.

    Args:
        left, right: ``(..., d_head, d_model)`` factors (any float dtype; computed in float64).
        frob_sq: ``||W||_F^2`` per head when the caller has it (the sum of the squared singular
            values: saves two d_head x d_head Gram products per head); else computed here.

    Returns:
        ``sym_frac`` and ``eig_positivity``, each ``(...)`` float64; NaN for a head whose W is zero.

    Raises:
        ValueError: the shapes differ or are not at least 2-D.
    """
    if left.shape != right.shape or left.ndim < 2:
        raise ValueError(
            f"expected two factors of one shape (..., d_head, d_model), got {tuple(left.shape)} and {tuple(right.shape)}"
        )
    a_t = left.to(torch.float64)
    b_t = right.to(torch.float64)
    core = b_t @ a_t.transpose(-1, -2)  # (..., d_head, d_head): M = B^T A
    frob_sq = _frob_sq(a_t, b_t) if frob_sq is None else frob_sq.to(torch.float64)
    tr_ww = (core * core.transpose(-1, -2)).sum((-1, -2))  # tr(M M)
    zero = frob_sq <= 0
    safe = torch.where(zero, torch.ones_like(frob_sq), frob_sq)
    sym = torch.where(zero, torch.nan, 0.5 * (1.0 + tr_ww / safe)).clamp(0.0, 1.0)
    mu = torch.linalg.eigvals(core)  # (..., d_head) complex: the non-zero eigenvalues of W, and zeros
    mag = mu.abs().sum(-1)
    pos = torch.where(mag > 0, mu.real.sum(-1) / torch.where(mag > 0, mag, torch.ones_like(mag)), torch.nan)
    return {"sym_frac": sym, "eig_positivity": pos}


def relative_change(
    before: tuple[torch.Tensor, torch.Tensor],
    after: tuple[torch.Tensor, torch.Tensor],
    *,
    frob_sq: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``||W' - W||_F / ||W||_F`` per head, with ``W = before[0]^T before[1]`` and ``W'`` from ``after``.

    Args:
        before: ``(left, right)`` at checkpoint t, each ``(..., d_head, d_model)``.
        after: the same at checkpoint t'.
        frob_sq: ``(||W||_F^2, ||W'||_F^2)`` per head when the caller has them (from the singular
            values); else computed here (four more Gram products per head).

    Returns:
        ``(...)`` float64; NaN where ``W`` is zero (inf would say nothing more).

    Raises:
        ValueError: the four shapes differ.
    """
    shapes = {tuple(t.shape) for t in (*before, *after)}
    if len(shapes) != 1:
        raise ValueError(f"relative_change needs four factors of one shape, got {sorted(shapes)}")
    l0, r0 = (t.to(torch.float64) for t in before)
    l1, r1 = (t.to(torch.float64) for t in after)
    if frob_sq is None:
        n0, n1 = _frob_sq(l0, r0), _frob_sq(l1, r1)
    else:
        n0, n1 = (torch.as_tensor(n, dtype=torch.float64) for n in frob_sq)
    cross = ((l1 @ l0.transpose(-1, -2)) * (r1 @ r0.transpose(-1, -2))).sum((-1, -2))  # <W', W>
    diff = (n1 + n0 - 2.0 * cross).clamp_min(0.0)
    return torch.where(n0 > 0, diff.sqrt() / torch.where(n0 > 0, n0, torch.ones_like(n0)).sqrt(), torch.nan)
