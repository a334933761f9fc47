"""Statistics of every whole-layer weight matrix of one checkpoint, batched per role, on CPU or CUDA.

Input: `families.blocks.extract_blocks`' role -> one ``(rows, cols)`` tensor per layer.
Per matrix W (m = min(rows, cols), n = max(rows, cols)):

- the element-wise statistics of the heads (`analysis.stats.elementwise`: moments, the
  standardized histogram, ``kl_gauss``), in float32;
- all m singular values, from the eigenvalues of the m x m Gram matrix G = W W^T (or
  W^T W when rows > cols) in float64: lambda_k = s_k^2 = eig_k(G). G is accumulated in
  float64 from slices of W's long side, so no float64 copy of W is held. A dense SVD
  of W costs O(m^2 n) too, but with a much larger constant (docs/benchmarks.md, "Whole-layer
  matrices": `python -m benchmarks.bench_layers` times both). Accuracy:
  an eigenvalue is exact to about eps64 * lambda_max (rounding of G and of the
  symmetric eigensolver), so s_k has absolute error ~ eps64 * s_max^2 / s_k: relative
  1e-16 .. 1e-12 for any s_k above 1e-4 s_max (the tests bound it against numpy's SVD).
  Values below ~1e-8 s_max are not resolved (they come out as noise of that size, or 0);
- ``frob_norm`` sqrt(sum lambda), ``spectral_norm`` s_max, ``stable_rank`` sum(lambda)/lambda_max;
- the departure from Marchenko-Pastur (`analysis.rmt.marchenko_pastur`): ``mp_kl``,
  ``mp_spikes``, ``mp_below`` with the matrix's own entry variance (``std``^2), and the
  power-law tail fit of the lambda_k (``alpha``, ``alpha_xmin``, ``alpha_ks``).

Memory: per chunk of b layers of one role (b = ``chunk_elements`` // (rows cols), at
least 1), the float32 copy and the element-wise statistics' three work buffers
(16 bytes per entry), a float64 slice of 1024 rows or columns, and the Gram matrices (8 m^2 bytes each).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from headwatch.analysis.rmt.marchenko_pastur import mp_below, mp_kl, mp_scaled, mp_spikes, powerlaw_fit
from headwatch.analysis.stats.elementwise import elementwise_statistics, fused_available
from headwatch.analysis.store.format import HIST_Z_EDGES
from headwatch.analysis.threads import map_per_core
from headwatch.analysis.weights.heads import Device, resolve_device

# Dense entries per chunk of one role's layers (as for heads: 2**26 floats, 256 MiB in float32).
LAYER_CHUNK_ELEMENTS = 2**26
# Rows or columns of the long side converted to float64 at a time while accumulating a Gram matrix.
GRAM_SLICE = 1024
# Row blocks of the Gram matrix's lower triangle (k blocks: (k + 1) / 2k of a full product's work).
GRAM_ROW_BLOCKS = 8


def gram_eigenvalues(w: torch.Tensor) -> torch.Tensor:
    """Eigenvalues lambda_k = s_k^2 of the smaller Gram matrix of each ``(b, rows, cols)`` matrix.

    G (m x m, m = min(rows, cols)) is accumulated in float64 over slices of ``GRAM_SLICE``
    rows or columns of the long side, taken along whichever axis is contiguous, so no float64
    copy of W is held. Only G's lower triangle is formed (blocks of ``m / GRAM_ROW_BLOCKS``
    rows: about 56% of the multiply-adds of a full product), which is all that
    ``eigvalsh(UPLO="L")`` reads; each entry is the same float64 dot product as in a full
    product.

    Returns:
        ``(b, min(rows, cols))`` float64, descending, clamped at 0.
    """
    b, rows, cols = w.shape
    tall = rows > cols  # G = W^T W from row slices, else G = W W^T from column slices
    m, n = (cols, rows) if tall else (rows, cols)
    g = torch.zeros(b, m, m, dtype=torch.float64, device=w.device)
    step = -(-m // GRAM_ROW_BLOCKS)
    for j in range(0, n, GRAM_SLICE):
        if tall:
            part = w[:, j : j + GRAM_SLICE, :].to(torch.float64).transpose(-1, -2)  # (b, m, slice)
        else:
            part = w[..., j : j + GRAM_SLICE].to(torch.float64)  # (b, m, slice)
        for r0 in range(0, m, step):
            r1 = min(m, r0 + step)
            g[:, r0:r1, :r1].baddbmm_(part[:, r0:r1], part[:, :r1].transpose(-1, -2))
    lam = torch.linalg.eigvalsh(g, UPLO="L")  # ascending; reads the lower triangle only
    return lam.flip(-1).clamp_min(0.0)


def _gram_eigenvalues_batch(w: torch.Tensor) -> torch.Tensor:
    """`gram_eigenvalues` of a ``(b, rows, cols)`` batch: batched on CUDA; on CPU one matrix per
    core (`analysis.threads.map_per_core`).

    The symmetric eigensolve is memory-bound and gains little from threads within one
    solve (and loses much when the machine is shared: idle threads spin), so one matrix
    per core is the faster split; LAPACK releases the GIL. Results equal the batched call's
    to rounding (the eigensolver's thread count changes the order of its sums).
    """
    if w.device.type != "cpu":
        return gram_eigenvalues(w)
    return torch.cat(map_per_core(lambda i: gram_eigenvalues(w[i : i + 1]), range(w.shape[0])))


def layer_matrix_statistics(
    blocks: Mapping[str, Sequence[torch.Tensor]],
    *,
    device: Device = "cpu",
    chunk_elements: int = LAYER_CHUNK_ELEMENTS,
    edges: np.ndarray = HIST_Z_EDGES,
) -> list[dict[str, object]]:
    """Every statistic of every (layer, role) matrix.

    Args:
        blocks: role -> the role's matrix of each layer, ``(rows, cols)``, any float dtype.
        device: ``cpu``, ``cuda`` or ``auto``.
        chunk_elements: dense entries per batch of one role's layers.
        edges: standardized histogram edges.

    Returns:
        One record per matrix, layer-major, roles in the order given: ``layer``, ``role``,
        ``rows``, ``cols``, the element-wise statistics (floats), ``hist_z`` and ``sv``
        (numpy float64 arrays, ``sv`` descending), ``frob_norm``, ``spectral_norm``,
        ``stable_rank``, ``mp_kl``, ``mp_spikes`` (int), ``mp_below``, ``alpha``,
        ``alpha_xmin``, ``alpha_ks``.

    Raises:
        ValueError: a role's matrices differ in shape or are not 2-D.
    """
    dev = resolve_device(device)
    records: dict[tuple[int, str], dict[str, object]] = {}
    for role, mats in blocks.items():
        if not mats:
            continue
        rows, cols = mats[0].shape
        if any(t.ndim != 2 or tuple(t.shape) != (rows, cols) for t in mats):
            raise ValueError(f"{role}: every layer's matrix must be 2-D of shape {(rows, cols)}")
        m, n = min(rows, cols), max(rows, cols)
        size = rows * cols
        chunk = max(1, min(len(mats), chunk_elements // size))
        scratch = (
            None
            if fused_available(dev)
            else (  # the torch passes' work buffers
                torch.empty(chunk, size, dtype=torch.float32, device=dev),
                torch.empty(chunk, size, dtype=torch.float32, device=dev),
                torch.empty(chunk, size, dtype=torch.int32, device=dev),
            )
        )
        for l0 in range(0, len(mats), chunk):
            given = torch.stack([t.to(dev) for t in mats[l0 : l0 + chunk]])  # (b, rows, cols), as stored
            b = given.shape[0]
            stats = elementwise_statistics(given.to(torch.float32).view(b, size), edges=edges, scratch=scratch)
            lam = _gram_eigenvalues_batch(given).cpu().numpy()  # (b, m), descending
            elem = {k: v.detach().to("cpu", torch.float64).numpy() for k, v in stats.items()}
            del given
            x = mp_scaled(lam, n=n, variance=elem["std"] ** 2)  # (b, m)
            kl, spikes, below = mp_kl(x, m / n), mp_spikes(x, m / n), mp_below(x, m / n)
            for i in range(b):
                total, top = float(lam[i].sum()), float(lam[i, 0])
                alpha, xmin, ks = powerlaw_fit(lam[i])
                rec: dict[str, object] = {"layer": l0 + i, "role": role, "rows": rows, "cols": cols}
                rec.update({k: float(v[i]) for k, v in elem.items() if k != "hist_z"})
                rec.update(
                    hist_z=elem["hist_z"][i],
                    sv=np.sqrt(lam[i]),
                    frob_norm=np.sqrt(total),
                    spectral_norm=np.sqrt(top),
                    stable_rank=total / top if top > 0 else 0.0,
                    mp_kl=float(kl[i]),
                    mp_spikes=int(spikes[i]),
                    mp_below=float(below[i]) if np.isfinite(x[i]).all() else float("nan"),
                    alpha=alpha,
                    alpha_xmin=xmin,
                    alpha_ks=ks,
                )
                records[(l0 + i, role)] = rec
    order = list(blocks)
    return [records[k] for k in sorted(records, key=lambda k: (k[0], order.index(k[1])))]
