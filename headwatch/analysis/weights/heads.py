"""All statistics of every head of one checkpoint, batched per layer, on CPU or CUDA.

Input is the one per-head layout used everywhere after extraction:
``W_Q, W_K: (n_layers, n_heads, d_head, d_model)``. The spectrum of all heads
goes through one batched QR-core call (`analysis.stats.spectrum`); the element-wise
statistics need the dense d_model x d_model product, which is built one layer
at a time (all heads of the layer in one batched matmul) so memory stays at
one layer's worth, n_heads * d_model^2 floats, per layer in flight: on CPU one
layer per core (`analysis.threads`), on CUDA one.
"""

from __future__ import annotations

import queue
from typing import Literal

import numpy as np
import torch

from headwatch.analysis.rmt.nullmodel import null_columns
from headwatch.analysis.stats.circuits import circuit_statistics
from headwatch.analysis.stats.elementwise import elementwise_statistics, fused_available
from headwatch.analysis.stats.spectrum import singular_values, spectral_statistics, top_singular_vectors
from headwatch.analysis.store.format import HIST_Z_EDGES
from headwatch.analysis.threads import map_per_core

Device = Literal["auto", "cpu", "cuda"]


def resolve_device(device: Device) -> torch.device:
    """``auto`` picks CUDA when available, else CPU.

    Raises:
        ValueError: unknown name, or ``cuda`` requested where none is available.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was requested but torch sees no CUDA device; use 'cpu' or 'auto'")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose auto, cpu or cuda")
    return torch.device(device)


def factor_shape(qk: tuple[torch.Tensor, torch.Tensor], ov: tuple[torch.Tensor, torch.Tensor]) -> tuple[int, int, int, int]:
    """The shape ``(n_layers, n_heads, d_head, d_model)`` that a checkpoint's four per-head factors share:
    ``(W_Q, W_K)`` and ``(W_O^T, W_V)`` (`families.extract`), whose products' QR cores need ``d_head <= d_model``.

    Raises:
        ValueError: the four factors do not share one 4-D shape, or ``d_head > d_model``.
    """
    shapes = {tuple(t.shape) for t in (*qk, *ov)}
    if len(shapes) != 1 or len(next(iter(shapes))) != 4:
        raise ValueError(f"expected four factors of one shape (n_layers, n_heads, d_head, d_model), got {sorted(shapes)}")
    n_layers, n_heads, d_head, d_model = next(iter(shapes))
    if d_head > d_model:
        raise ValueError(f"d_head {d_head} exceeds d_model {d_model}: the factors' QR cores need d_head <= d_model")
    return n_layers, n_heads, d_head, d_model


# Element budget of one dense work buffer: 2**26 floats (256 MiB in float32)
# holds all 16 heads of a Pythia-1.4B layer (16 x 2048^2); larger layers are
# processed a few heads at a time. On CPU one such buffer is live per core (the
# compiled element-wise kernels need no scratch); on CUDA four are (the product and
# the torch passes' three scratch buffers).
DEFAULT_CHUNK_ELEMENTS = 2**26


def checkpoint_statistics(
    w_q: torch.Tensor | np.ndarray,
    w_k: torch.Tensor | np.ndarray,
    *,
    device: Device = "cpu",
    dtype: torch.dtype = torch.float32,
    spectrum_dtype: torch.dtype = torch.float64,
    edges: np.ndarray = HIST_Z_EDGES,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    vectors: int = 0,
) -> dict[str, np.ndarray]:
    """Element-wise, spectral and circuit statistics of W_QK = W_Q^T W_K for every head.

    Any per-head product ``left^T right`` goes the same way: pass ``(W_O^T, W_V)`` from
    `families.extract.extract_ov` for W_OV.

    Args:
        w_q: ``(n_layers, n_heads, d_head, d_model)`` query weights (the left factor).
        w_k: the same shape; for grouped-query models, K repeated per query head.
        device: ``cpu``, ``cuda`` or ``auto``.
        dtype: precision of the dense product and the element-wise statistics.
        spectrum_dtype: precision of the QR core (`analysis.stats.spectrum.singular_values`),
            applied to the weights as given (not to their ``dtype`` copy).
        edges: standardized histogram edges.
        chunk_elements: at most this many dense entries are held per work
            buffer; a layer's heads are processed in chunks that fit.
        vectors: also return the left and right singular vectors of this many
            leading singular values (0: none), from the same factorization as ``sv``
            (`_layer_spectrum`), for the level-crossing overlaps.

    Returns:
        numpy arrays: every scalar statistic (the null-model columns of
        `analysis.rmt.nullmodel.null_columns` and the ``sym_frac`` / ``eig_positivity`` of
        `analysis.stats.circuits.circuit_statistics` included) as ``(n_layers, n_heads)`` float64,
        ``sv`` as ``(n_layers, n_heads, d_head)`` and ``hist_z`` as
        ``(n_layers, n_heads, len(edges) + 1)``, both float64. With ``vectors``, also
        ``u`` and ``v`` as ``(n_layers, n_heads, d_model, vectors)`` float32.

    Raises:
        ValueError: shapes disagree or are not 4-D.
    """
    w_q = torch.as_tensor(w_q)
    w_k = torch.as_tensor(w_k)
    if w_q.ndim != 4 or w_q.shape != w_k.shape:
        raise ValueError(
            f"expected W_Q and W_K of one shape (n_layers, n_heads, d_head, d_model), "
            f"got {tuple(w_q.shape)} and {tuple(w_k.shape)}"
        )
    dev = resolve_device(device)
    n_layers, n_heads, _d_head, d_model = w_q.shape
    n = d_model * d_model
    chunk = max(1, min(n_heads, chunk_elements // n))
    fused = fused_available(dev)  # the compiled element-wise kernels, which need no scratch
    free: queue.SimpleQueue[tuple[torch.Tensor, ...]] = queue.SimpleQueue()  # work buffers of finished layers

    def buffers() -> tuple[torch.Tensor, ...]:
        """A dense product buffer (and the torch path's scratch), reused across the layers of a thread."""
        try:
            return free.get_nowait()
        except queue.Empty:
            shapes: list[tuple[tuple[int, ...], torch.dtype]] = [((chunk, d_model, d_model), dtype)]
            if not fused:
                shapes += [((chunk, n), dtype), ((chunk, n), dtype), ((chunk, n), torch.int32)]
            return tuple(torch.empty(shape, dtype=dt, device=dev) for shape, dt in shapes)

    def layer_statistics(layer: int) -> dict[str, torch.Tensor]:
        q_given = w_q[layer].to(dev)  # (n_heads, d_head, d_model), in the caller's precision
        k_given = w_k[layer].to(dev)  # (n_heads, d_head, d_model)
        # From the weights as given, not from their `dtype` copy: rounding float64
        # weights to float32 first would bury small singular values.
        # One float64 copy of the factors serves the spectrum and the circuit statistics.
        q64, k64 = q_given.to(torch.float64), k_given.to(torch.float64)
        sv, u, v = _layer_spectrum(q64, k64, vectors, dtype=spectrum_dtype)  # (n_heads, d_head)
        frob_sq = (sv.to(torch.float64) ** 2).sum(-1)  # ||W||_F^2
        # The mean of W = Q^T K is (Q 1) . (K 1) / n and E[w^2] = ||W||_F^2 / n, both exact
        # in float64 from the factors: the element-wise pass needs neither from the dense W.
        mean = (q64.sum(-1) * k64.sum(-1)).sum(-1) / n
        q, k = q_given.to(dtype), k_given.to(dtype)
        dense, *scratch = buffers()
        torch_scratch = (scratch[0], scratch[1], scratch[2]) if scratch else None  # None: the compiled kernels
        parts: list[dict[str, torch.Tensor]] = []
        for h0 in range(0, n_heads, chunk):
            h1 = min(h0 + chunk, n_heads)
            out = dense[: h1 - h0]
            torch.matmul(q[h0:h1].transpose(-1, -2), k[h0:h1], out=out)  # (heads, d_model, d_model)
            moments = (mean[h0:h1], frob_sq[h0:h1] / n)
            parts.append(
                elementwise_statistics(out.view(h1 - h0, n), edges=edges, scratch=torch_scratch, moments=moments, fused=fused)
            )
        free.put((dense, *scratch))
        stats = {name: torch.cat([p[name] for p in parts]) for name in parts[0]}
        stats.update(spectral_statistics(sv, d_model=d_model))
        # from d_head x d_head cores in float64; ||W||_F^2 from the singular values
        stats.update(circuit_statistics(q64, k64, frob_sq=frob_sq))
        stats["sv"] = sv
        out_layer = {name: t.detach().to("cpu", torch.float64) for name, t in stats.items()}
        if vectors:
            assert u is not None and v is not None  # _layer_spectrum gives vectors when asked for them
            out_layer.update(u=u.detach().to("cpu", torch.float32), v=v.detach().to("cpu", torch.float32))
        return out_layer

    # On CPU one layer per core (`analysis.threads`): each layer's small LAPACK calls and
    # single-threaded passes then keep every core busy. On CUDA, one layer after another.
    layers = (
        map_per_core(layer_statistics, range(n_layers)) if dev.type == "cpu" else list(map(layer_statistics, range(n_layers)))
    )
    out = {name: torch.stack([lay[name] for lay in layers]).numpy() for name in layers[0]}
    out.update(null_columns(out["sv"], out, d_model=d_model))
    return out


def checkpoint_vectors(
    w_q: torch.Tensor | np.ndarray,
    w_k: torch.Tensor | np.ndarray,
    k: int,
    *,
    device: Device = "cpu",
    spectrum_dtype: torch.dtype = torch.float64,
    values: bool = False,
) -> tuple[np.ndarray, ...]:
    """Only the leading singular vectors of every head: what `checkpoint_statistics` returns
    as ``u`` and ``v`` with ``vectors=k``, bit for bit (same factorization, same layers).

    Returns:
        ``(u, v)``, each ``(n_layers, n_heads, d_model, k)`` float32; with ``values``, also the
        singular values ``(n_layers, n_heads, d_head)`` float64, as ``sv`` of `checkpoint_statistics`.
    """
    w_q = torch.as_tensor(w_q)
    w_k = torch.as_tensor(w_k)
    dev = resolve_device(device)

    def layer_vectors(layer: int) -> tuple[torch.Tensor, ...]:
        s, u, v = _layer_spectrum(w_q[layer].to(dev), w_k[layer].to(dev), k, dtype=spectrum_dtype)
        assert u is not None and v is not None  # k > 0 vectors asked for
        return u.detach().to("cpu", torch.float32), v.detach().to("cpu", torch.float32), s.detach().to("cpu", torch.float64)

    # split as `checkpoint_statistics` splits it, so that every product has the same thread count
    layers = range(w_q.shape[0])
    us, vs, ss = zip(*(map_per_core(layer_vectors, layers) if dev.type == "cpu" else map(layer_vectors, layers)), strict=True)
    out = (torch.stack(us).numpy(), torch.stack(vs).numpy())
    return (*out, torch.stack(ss).numpy()) if values else out


def _layer_spectrum(
    q: torch.Tensor, k: torch.Tensor, vectors: int, *, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Singular values of one layer's heads and, when ``vectors`` > 0, that many leading
    left/right singular vectors (one factorization for both)."""
    if not vectors:
        return singular_values(q, k, dtype=dtype), None, None
    return top_singular_vectors(q, k, vectors, dtype=dtype)
