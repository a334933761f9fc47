"""Statistics of attention patterns (docs/design-notes.md section 8): what a head does on real text.

Inputs are attention probabilities ``alpha`` of one layer, ``(B, H, T, T)``, row ``i``
(query) a distribution over keys ``j <= i`` (causal: ``alpha[..., i, j] = 0`` for
``j > i``). Positions are 1-based in the formulas and 0-based in the arrays.

Per head, averaged over every query position and sequence:

- entropy ``H_i = -sum_j alpha_ij log2 alpha_ij`` (bits); uniform causal attention gives
  ``mean_i log2(i)``; its spread is the standard deviation of ``H_i`` over queries and
  sequences;
- span ``sum_j alpha_ij (i - j)``; uniform gives ``mean_i (i - 1)/2``;
- sink mass ``alpha_i1`` (every ``i``; ``alpha_11 = 1``);
- previous-token score ``alpha_i,i-1`` over ``i > 1``;
- current-token score ``alpha_ii`` over ``i > 1`` (``alpha_11 = 1`` for every head, its only key, so the
  first query says nothing of the head and is left out; uniform gives ``mean_{i=2..T} 1/i``).

Per layer, the mean attention at relative offset ``d = i - j`` over heads, queries and
sequences, ``p_l(d)``: every query row sums to 1, so ``p_l`` is a distribution over
``d = 0 .. T-1``. Two layers are compared by the Jensen-Shannon divergence (bits)
``JSD(p||q) = KL(p||m)/2 + KL(q||m)/2`` with ``m = (p + q)/2``, between 0 and 1.

Induction: on ``R`` random tokens repeated twice, the mean attention from position
``R + k`` (the second occurrence of token ``k``) to ``k + 1`` (the token after its first
occurrence), for ``k = 1 .. R-1``.

`AttentionSums` accumulates batches so that a checkpoint's sequences need not be
held at once; every function here takes tensors and returns new ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

HEAD_STATISTICS = ("entropy", "entropy_std", "span", "sink", "prev_token", "current_token")


def _check(alpha: torch.Tensor) -> tuple[int, int, int]:
    assert alpha.dim() == 4 and alpha.shape[-1] == alpha.shape[-2], alpha.shape
    b, h, t, _ = alpha.shape
    return b, h, t


def query_entropy(alpha: torch.Tensor) -> torch.Tensor:
    """``H_i`` in bits for every query: ``(B, H, T, T) -> (B, H, T)`` (0 log 0 = 0)."""
    return -torch.xlogy(alpha, alpha).sum(-1) / torch.log(torch.tensor(2.0, dtype=alpha.dtype))


def query_span(alpha: torch.Tensor) -> torch.Tensor:
    """``sum_j alpha_ij (i - j)`` for every query: ``(B, H, T, T) -> (B, H, T)``."""
    t = alpha.shape[-1]
    pos = torch.arange(t, dtype=alpha.dtype, device=alpha.device)
    distance = (pos[:, None] - pos[None, :]).clamp(min=0)  # (T, T): i - j on and below the diagonal
    return (alpha * distance).sum(-1)


def offset_sums(alpha: torch.Tensor) -> torch.Tensor:
    """Attention summed over heads, queries and sequences at each offset ``d = i - j``: ``(T,)``.

    Uses ``sum_{b,h,i} alpha[b,h,i,i-d]`` = the sum of the d-th lower diagonal of the (T, T) matrix summed
    over sequences and heads, taken for every d at once by scattering each entry to its offset.
    """
    total = alpha.sum(dim=(0, 1))  # (T, T)
    t = total.shape[0]
    pos = torch.arange(t, device=total.device)
    offset = pos[:, None] - pos[None, :]  # (T, T): d = i - j
    causal = offset >= 0
    return torch.zeros(t, dtype=total.dtype, device=total.device).index_add_(0, offset[causal], total[causal])


@dataclass
class AttentionSums:
    """Running sums of one checkpoint's per-head and per-layer attention statistics.

    Attributes:
        n_layers, n_heads, seq_len: the geometry (every batch has ``seq_len`` queries).
    """

    n_layers: int
    n_heads: int
    seq_len: int
    sequences: int = 0
    _head: dict[str, torch.Tensor] = field(default_factory=dict)
    _offsets: torch.Tensor | None = None

    def add(self, layer: int, alpha: torch.Tensor) -> None:
        """Add one layer's attention on a batch, ``(B, H, T, T)``; call for every layer of a batch,
        then `next_batch`."""
        _b, h, t = _check(alpha)
        assert h == self.n_heads and t == self.seq_len, (alpha.shape, self.n_heads, self.seq_len)
        a = alpha.double()
        ent = query_entropy(a)  # (B, H, T)
        sums = {
            "entropy": ent.sum(dim=(0, 2)),
            "entropy_sq": (ent * ent).sum(dim=(0, 2)),
            "span": query_span(a).sum(dim=(0, 2)),
            "sink": a[..., :, 0].sum(dim=(0, 2)),
            "prev_token": torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).sum(dim=(0, 2)),
            "current_token": torch.diagonal(a, dim1=-2, dim2=-1)[..., 1:].sum(dim=(0, 2)),  # queries i = 2..T
        }
        for name, value in sums.items():
            if name not in self._head:
                self._head[name] = torch.zeros(self.n_layers, self.n_heads, dtype=torch.float64)
            self._head[name][layer] += value.cpu()
        if self._offsets is None:
            self._offsets = torch.zeros(self.n_layers, t, dtype=torch.float64)
        self._offsets[layer] += offset_sums(a).cpu()

    def next_batch(self, size: int) -> None:
        """Count the ``size`` sequences whose layers were just added."""
        self.sequences += size

    def head_statistics(self) -> dict[str, torch.Tensor]:
        """``HEAD_STATISTICS`` name -> ``(n_layers, n_heads)`` float64."""
        n = self.sequences * self.seq_len  # queries per head
        assert n > 0, "no batch added"
        mean = self._head["entropy"] / n
        var = (self._head["entropy_sq"] / n - mean * mean).clamp(min=0.0)
        return {
            "entropy": mean,
            "entropy_std": var.sqrt(),
            "span": self._head["span"] / n,
            "sink": self._head["sink"] / n,
            "prev_token": self._head["prev_token"] / (self.sequences * (self.seq_len - 1)),
            "current_token": self._head["current_token"] / (self.sequences * (self.seq_len - 1)),
        }

    def offset_distributions(self) -> torch.Tensor:
        """``p_l(d)``: ``(n_layers, T)`` float64, each row summing to 1."""
        assert self._offsets is not None, "no batch added"
        return self._offsets / (self.sequences * self.n_heads * self.seq_len)


def js_divergence(p: torch.Tensor) -> torch.Tensor:
    """Pairwise Jensen-Shannon divergences in bits between the rows of ``p``: ``(L, D) -> (L, L)``.

    Each row is a distribution; terms with zero mass contribute 0. Symmetric, zero diagonal, in [0, 1].
    """
    p = p.double()
    a, b = p[:, None, :], p[None, :, :]  # (L, 1, D), (1, L, D)
    m = (a + b) / 2

    def kl(x: torch.Tensor) -> torch.Tensor:  # sum x log2(x / m), 0 where x = 0
        ratio = torch.where(x > 0, x / torch.where(m > 0, m, 1.0), 1.0)
        return (x * torch.log2(ratio)).sum(-1)

    out = (kl(a) + kl(b)) / 2
    return out.clamp(min=0.0)


def induction_scores(alpha: torch.Tensor, repeat: int) -> torch.Tensor:
    """Mean attention from position ``R + k`` to ``k + 1`` (1-based), ``k = 1 .. R-1``, over the batch.

    Args:
        alpha: one layer's attention on sequences of ``R`` tokens repeated twice, ``(B, H, 2R, 2R)``.
        repeat: ``R``.

    Returns:
        ``(H,)`` float64.
    """
    _b, _h, t = _check(alpha)
    assert t == 2 * repeat and repeat >= 2, (t, repeat)
    k = torch.arange(1, repeat, device=alpha.device)  # 1-based k = 1 .. R-1
    rows, cols = repeat + k - 1, k  # 0-based positions of R + k and k + 1
    return alpha.double()[:, :, rows, cols].mean(dim=(0, 2)).cpu()


def uniform_induction_baseline(repeat: int) -> float:
    """What `induction_scores` gives for uniform causal attention: mean over k of 1/(R + k)."""
    return sum(1.0 / (repeat + k) for k in range(1, repeat)) / (repeat - 1)
