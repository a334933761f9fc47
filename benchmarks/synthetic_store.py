"""Synthetic statistics stores with realistic shapes, for the dashboard's tests and benchmark.

The numbers are made up but internally consistent, so every view has something
real-looking to draw and every identity the app relies on holds:

- singular values descend, one row of ``d_head`` per head, never padded; every
  spectral column (stable rank, entropy, ...) is computed from them by its
  docs/design-notes.md definition;
- ``hist_z`` is the bin mass of a unit-variance two-Gaussian mixture over the
  fixed edges (underflow and overflow included), so it sums to 1, and
  ``kl_gauss`` is computed from it against the Gaussian bin masses;
- ``std`` grows over training with a head-specific time scale, and each head's
  tail weight (its kurtosis) rises and relaxes at a head-specific step;
- lambda_0 stands apart from lambda_1 except around a head-specific step where the
  two approach and part again;
- checkpoints follow the Pythia schedule (0, 1, 2, 4, ..., 512, then every
  1000); one entry duplicates an earlier checkpoint's weights, like Pythia's
  steps 0 and 2, and has no rows;
- ``meta.training`` carries a loss curve;
- every per-head matrix (``qk`` and ``ov`` by default) has rows of its own dynamics, with a
  symmetric fraction drifting from 1/2 and an eigenvalue positivity in [-1, 1];
- ``overlaps.parquet`` (`add_synthetic_overlaps`) holds, per matrix, orthogonal near-identity
  overlap matrices and a relative change |std(t+1) - std(t)| / std(t), in which, at each close
  approach of two leading levels, heads
  with even ``layer + head`` swap the pair's directions (a crossing) and the others
  keep them (a repulsion).

Used by ``tests/app`` (small stores) and ``benchmarks/bench_dashboard.py``
(Pythia-1.4B and 12B dimensions). Needs numpy, pyarrow and scipy (``ndtr``).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
from scipy.special import ndtr

from headwatch.analysis.store import CheckpointEntry, ModelInfo
from headwatch.analysis.store.format import HEADS, HIST_Z_EDGES
from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS
from headwatch.analysis.store.lenses.overlaps import OVERLAPS
from headwatch.analysis.store.meta import new_meta
from headwatch.precompute.store.tables import heads_rows
from headwatch.precompute.store.writer import commit_store

# Pythia's released revisions: step0 and log-spaced 1, 2, 4, ..., 512, then every
# 1000 steps up to 143000 (154 revisions).
PYTHIA_STEPS = (0, *(2**i for i in range(10)), *range(1000, 143001, 1000))
PYTHIA_TOKENS_PER_STEP = 2_097_152


def schedule(n_checkpoints: int) -> list[int]:
    """The first few log-spaced Pythia steps, then evenly thinned later ones: ``n_checkpoints`` steps.

    Raises:
        ValueError: fewer than 4 or more than 154 checkpoints asked for.
    """
    if not 4 <= n_checkpoints <= len(PYTHIA_STEPS):
        raise ValueError(f"n_checkpoints must be in [4, {len(PYTHIA_STEPS)}], got {n_checkpoints}")
    if n_checkpoints == len(PYTHIA_STEPS):
        return list(PYTHIA_STEPS)
    early = [s for s in PYTHIA_STEPS if s < 1000][: max(3, n_checkpoints // 3)]
    late = np.array([s for s in PYTHIA_STEPS if s >= 1000])
    pick = np.unique(np.linspace(0, len(late) - 1, n_checkpoints - len(early)).round().astype(int))
    return early + late[pick].tolist()


def _bin_mass(edges: np.ndarray, scale: np.ndarray | float) -> np.ndarray:
    """Mass of N(0, scale^2) in each bin between consecutive edges, accurate in both tails."""
    lo, hi = edges[:-1] / scale, edges[1:] / scale
    upper = lo >= 0  # right half: subtract survival functions so tiny masses do not round to 0
    return np.where(upper, ndtr(-lo) - ndtr(-hi), ndtr(hi) - ndtr(lo))


def synthetic_statistics(
    steps: np.ndarray, *, n_layers: int, n_heads: int, d_head: int, d_model: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """Statistics for every (step, layer, head), shaped ``(n_steps, n_layers, n_heads, ...)``."""
    rng = np.random.default_rng(seed)
    t = np.asarray(steps, dtype=np.float64)[:, None, None]  # (S, 1, 1)
    shape_lh = (1, n_layers, n_heads)
    layer_frac = (np.arange(n_layers) / max(n_layers - 1, 1))[None, :, None]

    # sigma(t): grows on a head-specific time scale (earlier layers faster), then saturates.
    # entries of W_QK at Pythia's small init: sqrt(d_head) * sigma0^2 with sigma0^2 = 2 / (5 d_model)
    sigma0 = np.sqrt(d_head) * 2.0 / (5 * d_model)
    tau = 10 ** rng.uniform(2.0, 4.0, shape_lh) * (0.3 + layer_frac)
    growth = 10 ** rng.uniform(0.5, 1.5, shape_lh)
    std = sigma0 * (1 + growth * (1 - np.exp(-t / tau)))

    # tail weight: a bump at a head-specific step (outliers that grow and partly relax).
    t_peak = 10 ** rng.uniform(2.0, 4.8, shape_lh)
    width = rng.uniform(0.3, 0.8, shape_lh)
    bump = np.exp(-((np.log10(t + 1) - np.log10(t_peak)) ** 2) / (2 * width**2))
    eps = 0.02 + 0.15 * bump * rng.uniform(0.3, 1.0, shape_lh) + 0.05 * (1 - np.exp(-t / 5e4))
    ratio = 2.0 + 3.0 * rng.uniform(0, 1, shape_lh) * (1 - np.exp(-t / tau))  # s2 / s1 > 1
    # unit variance: (1 - eps) s1^2 + eps s2^2 = 1 with s2 = ratio * s1
    s1 = 1.0 / np.sqrt((1 - eps) + eps * ratio**2)
    s2 = ratio * s1
    s1, s2, eps = (np.broadcast_to(a, std.shape) for a in (s1, s2, eps))

    ext = np.concatenate([[-np.inf], HIST_Z_EDGES, [np.inf]])  # 203 edges -> 202 bins
    hist = (1 - eps[..., None]) * _bin_mass(ext, s1[..., None]) + eps[..., None] * _bin_mass(ext, s2[..., None])
    hist /= hist.sum(axis=-1, keepdims=True)
    gauss = _bin_mass(ext, np.float64(1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(hist > 0, hist * np.log(hist / gauss), 0.0).sum(axis=-1)
    fourth = 3 * ((1 - eps) * s1**4 + eps * s2**4)
    kurtosis = fourth - 3.0
    skew = rng.normal(0, 0.02, std.shape)
    mean = rng.normal(0, 0.01, std.shape) * std
    min_ = mean - std * (6 + 4 * eps * ratio)
    max_ = mean + std * (6 + 4 * eps * ratio)

    # singular values: W_QK Frobenius norm^2 = d_model^2 * std^2 (mean ~ 0), spread over d_head
    # values whose decay sharpens early (collapse onto a few directions), then partly relaxes.
    k = np.arange(d_head, dtype=np.float64)
    collapse = np.exp(-((np.log10(t + 1) - np.log10(t_peak / 3)) ** 2) / 0.8)
    decay = d_head * (0.5 + 0.4 * rng.uniform(0, 1, shape_lh)) / (1 + 12 * collapse)
    lam = np.exp(-k / decay[..., None]) + 0.02 * rng.uniform(0, 1, (*std.shape, d_head))
    lam = -np.sort(-lam, axis=-1)
    # lambda_0 stands well apart (x 2.5) except around a head-specific step, where it comes down
    # to lambda_1 and parts again: a close approach of the two leading levels in every head
    t_meet = t[rng.integers(2, max(len(t) - 2, 3), shape_lh), 0, 0]  # at an interior checkpoint
    meet = np.exp(-((np.log10(t + 1) - np.log10(t_meet + 1)) ** 2) / (2 * 0.25**2))
    lam[..., 0] = lam[..., 1] * (1.03 + 1.5 * (1 - meet)) + (lam[..., 0] - lam[..., 1]) * (1 - meet)
    frob2 = (d_model * std) ** 2 + (d_model * mean) ** 2
    lam *= (frob2 / lam.sum(axis=-1))[..., None]
    sv = np.sqrt(lam)
    total = lam.sum(axis=-1)
    p = lam / total[..., None]
    return {
        "mean": mean,
        "std": std,
        "skew": skew,
        "kurtosis": kurtosis,
        "min": min_,
        "max": max_,
        "kl_gauss": kl,
        "stable_rank": total / lam[..., 0],
        "spectral_entropy": -(p * np.log(p)).sum(axis=-1),
        "participation_ratio": total**2 / (lam**2).sum(axis=-1),
        "condition_number": sv[..., 0] / sv[..., -1],
        "frob_norm": np.sqrt(total),
        "spectral_norm": sv[..., 0],
        "sv": sv,
        "hist_z": hist,
        # circuit columns: symmetric fraction drifts from 1/2 (random) towards a head's own value,
        # eigenvalue positivity from 0 towards a head-specific sign
        "sym_frac": 0.5 + (rng.uniform(-0.45, 0.45, shape_lh)) * (1 - np.exp(-t / tau)),
        "eig_positivity": rng.uniform(-0.9, 0.9, shape_lh) * (1 - np.exp(-t / tau)) + rng.normal(0, 0.02, std.shape),
    }


def write_synthetic_store(
    path: str | Path,
    *,
    n_layers: int = 4,
    n_heads: int = 4,
    d_head: int = 16,
    d_model: int = 64,
    n_checkpoints: int = 12,
    duplicate: bool = True,
    training: bool = True,
    model_id: str = "synthetic/tiny",
    seed: int = 0,
    overlaps: bool = True,
    matrices: tuple[str, ...] = ("qk", "ov"),
    steps: list[int] | None = None,
    tokens_per_step: int = PYTHIA_TOKENS_PER_STEP,
) -> Path:
    """Write a synthetic store (``meta.json`` + ``heads.parquet``) at ``path`` and return it.

    Args:
        path: the store directory (created or replaced).
        n_layers, n_heads, d_head, d_model: model dimensions.
        n_checkpoints: checkpoints with statistics (see `schedule`).
        duplicate: add one checkpoint entry whose weights duplicate step 0 (no rows).
        training: record ``meta.training`` with tokens per step and a loss curve.
        model_id: the ``model.id`` written into meta.
        seed: random seed of the made-up dynamics.
        overlaps: also write ``overlaps.parquet`` (`add_synthetic_overlaps`).
        matrices: the per-head products with rows (``meta.json`` ``matrices``), each its own dynamics.
        steps: the checkpoint steps, ascending (default: `schedule` of ``n_checkpoints``).
        tokens_per_step: tokens per optimizer step (each checkpoint's ``tokens`` and ``meta.training``).
    """
    steps = schedule(n_checkpoints) if steps is None else [int(s) for s in steps]
    stats = {
        m: synthetic_statistics(
            np.asarray(steps), n_layers=n_layers, n_heads=n_heads, d_head=d_head, d_model=d_model, seed=seed + 17 * i
        )
        for i, m in enumerate(matrices)
    }
    model = ModelInfo(
        id=model_id,
        family="gpt_neox",
        model_type="gpt_neox",
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        d_model=d_model,
        d_head=d_head,
    )
    meta = new_meta(
        model, settings={"synthetic": True, "seed": seed}, software={"generator": __name__}, hist_edges=HIST_Z_EDGES.tolist()
    )
    meta.matrices = list(matrices)
    for i, s in enumerate(steps):
        meta.add_checkpoint(CheckpointEntry(step=s, revision=f"step{s}", tokens=s * tokens_per_step, sha256=f"{i:064x}"))
    if duplicate:
        # A revision that serves step 0's weights again, between two real checkpoints.
        dup_step = next(s for s in range(1, steps[-1]) if s not in steps)
        meta.add_checkpoint(
            CheckpointEntry(
                step=dup_step,
                revision=f"step{dup_step}",
                tokens=dup_step * tokens_per_step,
                sha256=f"{0:064x}",
                duplicate_of=steps[0],
            )
        )
    if training:
        loss_steps = sorted(set(steps))
        meta.training = {
            "tokens_per_step": tokens_per_step,
            "config": {"note": "synthetic"},
            "seed": seed,
            "corpus": "synthetic",
            "wall_time_s": 1.0,
            "device": "cpu",
            "losses": [
                {
                    "step": s,
                    "train_loss": 2.2 + 8.6 * np.exp(-s / 300) + 0.3 * np.exp(-s / 20000),
                    "val_loss": (2.35 + 8.6 * np.exp(-s / 300) + 0.3 * np.exp(-s / 20000)) if i % 2 == 0 else None,
                }
                for i, s in enumerate(loss_steps)
            ],
        }
    tables = [
        heads_rows(s, {name: a[i] for name, a in stats[m].items()}, d_model=d_model, matrix=m)
        for m in matrices
        for i, s in enumerate(steps)
    ]
    commit_store(path, meta, {HEADS.name: HEADS.sorted(pa.concat_tables(tables))})
    if overlaps:
        add_synthetic_overlaps(path, seed=seed)
    return Path(path)


def add_synthetic_overlaps(path: str | Path, *, k: int = 8, seed: int = 0) -> Path:
    """Write ``overlaps.parquet`` for a synthetic store (see the module docstring).

    Between consecutive checkpoints each head's K directions turn a little: the overlaps
    are |R| for a random orthogonal R near the identity. At a close approach of levels
    (i, i+1) (`analysis.stats.crossings.close_approaches` on the stored ``sv``), columns i and
    i+1 of R are exchanged on the step into its closest checkpoint for heads with even
    ``layer + head``.
    """
    from headwatch.analysis.store import open_store
    from headwatch.precompute.store.pairs import matrix_rows, overlaps_meta, update

    store = open_store(path)
    k = min(k, store.d_head)
    steps = [int(s) for s in store.steps]
    tables = [
        _matrix_overlaps(store, steps, k, np.random.default_rng(seed + 1 + i), matrix, matrix_rows)
        for i, matrix in enumerate(store.meta.matrices)
    ]
    table = update(OVERLAPS.empty(), steps, tables)
    commit_store(path, store.meta.with_record("overlaps", overlaps_meta(k)), {OVERLAPS.name: table})
    return Path(path)


def _matrix_overlaps(store, steps: list[int], k: int, rng: np.random.Generator, matrix: str, matrix_rows) -> pa.Table:
    from headwatch.analysis.stats.crossings import close_approaches, relative_gap

    n_pairs, n_layers, n_heads = len(steps) - 1, store.n_layers, store.n_heads
    mats = []
    for _ in range(2):  # u and v
        noise = np.eye(k) + 0.08 * rng.standard_normal((n_pairs, n_layers, n_heads, k, k))
        q, r = np.linalg.qr(noise)
        mats.append(q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :])  # the rotation nearest I
    s = store.array("sv", matrix=matrix)[..., : min(k, 4)].astype(np.float64)  # (S, L, H, m)
    for lay in range(n_layers):
        for hd in range(n_heads):
            if (lay + hd) % 2:
                continue
            for i in range(s.shape[-1] - 1):
                for _, _, t in close_approaches(relative_gap(s[:, lay, hd, i], s[:, lay, hd, i + 1])):
                    for m in mats:  # the step into the approach's closest checkpoint swaps the pair
                        m[t - 1, lay, hd][:, [i, i + 1]] = m[t - 1, lay, hd][:, [i + 1, i]]
    o_u, o_v = np.abs(mats[0]), np.abs(mats[1])
    std = store.array("std", matrix=matrix)
    change = np.abs(np.diff(std, axis=0)) / std[:-1] + 0.01 * rng.uniform(0, 1, std[:-1].shape)
    return pa.concat_tables(
        [
            matrix_rows(a, b, o_u[t], o_v[t], matrix=matrix, rel_change=change[t])
            for t, (a, b) in enumerate(itertools.pairwise(steps))
        ]
    )


def add_stand_in_embeddings(path: str | Path, *, statistics: tuple[str, ...] | None = None) -> Path:
    """Write ``embeddings.parquet`` like `precompute.lenses.embeddings.add_embeddings`, placing heads by PCA instead of UMAP.

    Same table, same ``meta["embeddings"]`` (method says ``pca``) and exact kNN edges, in
    milliseconds instead of UMAP's numba compilation: for tests of the pages that read it.
    """
    from headwatch.analysis.store import open_store
    from headwatch.analysis.trajectories.maps import EmbeddingSettings, knn, normalise, trajectories
    from headwatch.precompute.lenses.embeddings import DEFAULT_STATISTICS, embedding_rows, embeddings_meta

    statistics = statistics or DEFAULT_STATISTICS
    store = open_store(path)
    settings = EmbeddingSettings()
    parts = []
    for matrix in store.meta.matrices:
        for stat in statistics:
            x = normalise(trajectories(store.array(stat, matrix=matrix)), "zscore")
            centred = x - x.mean(axis=0)
            u, s, _ = np.linalg.svd(centred, full_matrices=False)
            xy = u[:, :2] * s[:2]
            parts.append(
                embedding_rows(
                    xy,
                    knn(x, settings.knn_k),
                    statistic=stat,
                    normalisation="zscore",
                    n_layers=store.n_layers,
                    n_heads=store.n_heads,
                    matrix=matrix,
                )
            )
    info = embeddings_meta(store, statistics=statistics, normalisation="zscore", settings=settings)
    info["method"] = "pca (test stand-in for umap)"
    commit_store(path, store.meta.with_record("embeddings", info), {EMBEDDINGS.name: pa.concat_tables(parts)})
    return Path(path)


def add_synthetic_layer_matrices(path: str | Path, *, d_mlp: int | None = None, seed: int = 0) -> Path:
    """Write ``layers.parquet`` for every checkpoint with statistics: GPT-NeoX-shaped block weights
    (attn_qkv, attn_out, mlp_in, mlp_out) that start Gaussian and grow a few spikes and a wider
    bulk over training, through the job's own statistics (`analysis.weights.layers`); for tests
    and benchmarks of the Weight matrices page. Needs torch.
    """
    import torch

    from headwatch.analysis.store import open_store
    from headwatch.analysis.store.lenses.layers import LAYERS
    from headwatch.analysis.weights.layers import layer_matrix_statistics
    from headwatch.precompute.store.tables import layers_rows

    store = open_store(path)
    d = store.d_model
    d_mlp = d_mlp or 4 * d
    shapes = {"attn_qkv": (3 * d, d), "attn_out": (d, d), "mlp_in": (d_mlp, d), "mlp_out": (d, d_mlp)}
    rng = np.random.default_rng(seed)
    steps = store.meta.done_steps
    parts = []
    for i, step in enumerate(steps):
        t = i / max(len(steps) - 1, 1)
        blocks = {}
        for role, (r, c) in shapes.items():
            mats = []
            for layer in range(store.n_layers):
                w = rng.standard_normal((r, c)) * 0.02 * (1 + 0.5 * t)
                k = 1 + layer % 3
                u, _ = np.linalg.qr(rng.standard_normal((r, k)))
                v, _ = np.linalg.qr(rng.standard_normal((c, k)))
                w += t * 4 * 0.02 * (np.sqrt(r) + np.sqrt(c)) * (u @ v.T)  # k spikes, growing
                mats.append(torch.tensor(w, dtype=torch.float32))
            blocks[role] = mats
        parts.append(layers_rows(step, layer_matrix_statistics(blocks)))
    commit_store(path, store.meta, {LAYERS.name: LAYERS.sorted(pa.concat_tables(parts))})
    return Path(path)


def add_synthetic_forward(path: str | Path, *, seed: int = 0) -> Path:
    """Give a store forward-lens tables (`analysis.store.format.ATTENTION_TABLES`) with stand-in values:
    entropy and span falling from the uniform value as a head sharpens, head-type scores rising for a
    few heads, a falling loss. For dashboard tests and benchmarks; no model is run."""
    from headwatch.analysis.store import ForwardInfo, open_store
    from headwatch.precompute.lenses.attention import attention_rows

    path = Path(path)
    store = open_store(path)
    n_layers, n_heads, steps = store.n_layers, store.n_heads, store.meta.done_steps
    t, repeat = 64, 32
    rng = np.random.default_rng(seed)
    i = np.arange(1, t + 1, dtype=np.float64)
    sharp = rng.uniform(0.2, 1.0, size=(n_layers, n_heads))  # how far each head gets from uniform
    kind = rng.integers(0, 3, size=(n_layers, n_heads))  # 0 previous-token, 1 induction, 2 sink
    tables: dict[str, list[pa.Table]] = {}
    for n, step in enumerate(steps):
        progress = n / max(len(steps) - 1, 1)
        ramp = sharp * progress  # (L, H) in [0, 1)
        stats = {
            "entropy": np.mean(np.log2(i)) * (1 - 0.9 * ramp),
            "entropy_std": 0.5 + ramp,
            "span": np.mean((i - 1) / 2) * (1 - 0.8 * ramp),
            "sink": np.mean(1 / i) + (kind == 2) * 0.7 * ramp,
            "prev_token": np.mean(1 / i[1:]) + (kind == 0) * 0.8 * ramp,
            "induction": np.mean(1 / (repeat + np.arange(1, repeat))) + (kind == 1) * 0.6 * ramp,
            "current_token": np.full((n_layers, n_heads), np.mean(1 / i[1:])),  # uniform: no current-token head
        }
        offsets = np.exp(-np.arange(t)[None, :] / (1 + 30 * (1 - progress) * np.arange(1, n_layers + 1)[:, None]))
        p = offsets / offsets.sum(axis=1, keepdims=True)
        m = (p[:, None] + p[None]) / 2
        stats["jsd"] = 0.5 * (np.sum(p[:, None] * np.log2(p[:, None] / m), -1) + np.sum(p[None] * np.log2(p[None] / m), -1))
        stats["loss"] = 1.5 + 4.0 * np.exp(-6 * progress)
        stats["tokens"] = 8 * (t - 1)
        stats["probe_copy_loss"] = 5.55 - 5.0 / (1 + np.exp(-12 * (progress - 0.5)))  # drops as induction forms
        for name, table in attention_rows(step, stats).items():
            tables.setdefault(name, []).append(table)
    info = ForwardInfo(
        lenses=("attention",),
        n_sequences=8,
        seq_len=t,
        seed=0,
        text="synthetic",
        text_sha256="0" * 64,
        tokens_sha256="0" * 64,
        tokenizer="bytes (vocabulary 256)",
        induction_repeat=repeat,
        induction_sequences=8,
        induction_seed=1,
    )
    commit_store(path, store.meta.with_record("forward", info), {name: pa.concat_tables(parts) for name, parts in tables.items()})
    return path


# The stand-in estimates `add_synthetic_llc` makes unusual, as (layer, head, position among the chosen steps).
SYNTHETIC_NEGATIVE = (0, 0, 0)  # estimate -0.1: below the loss at w*
SYNTHETIC_RISING = (0, 1, -1)  # its chains' traces climb linearly: "still rising"


def add_synthetic_llc(path: str | Path, *, steps: list[int] | None = None, data: tuple[str, ...] = ("text",)) -> Path:
    """Give a store a stand-in ``llc.parquet`` and ``llc_chains.parquet`` (and meta.json ``llc``) at ``steps``
    (default: its first, middle and last checkpoint with statistics): the heads of even layers rise over those
    steps, those of odd layers fall (two curve shapes a clustering must separate), 0.01 x head apart; the
    whole-model row 40, 45, 50, ... Two chains per estimate at llc -/+ llc_std, 8 draws each of one sequence (so
    every draw is a pass of `analysis.llc.diagnostics`): flat traces
    (alternating +-0.002 nats around the plateau) except `SYNTHETIC_RISING`'s, which climb 0.1 nats;
    `SYNTHETIC_NEGATIVE` is -0.1. Under each distribution of ``data`` (the k-th scaled by 1 + k/2; with ``text`` alone,
    meta.json ``llc`` as a store written before distributions were named). For dashboard tests and benchmarks; no
    sampler is run."""
    from headwatch.analysis.llc.diagnostics import chain_diagnostics
    from headwatch.analysis.store import open_store
    from headwatch.analysis.store.lenses.llc import LLC, LLC_CHAINS, LLC_MODEL

    path = Path(path)
    store = open_store(path)
    done = store.meta.done_steps
    chosen = steps if steps is not None else [done[0], done[len(done) // 2], done[-1]]
    n_layers, n_heads = store.n_layers, store.n_heads
    rows = []
    for k, name in enumerate(data):
        scale = 1 + k / 2
        for i, step in enumerate(chosen):
            rows.append((step, name, LLC_MODEL, LLC_MODEL, scale * (40.0 + 5 * i), 0.5, 2.0 - 0.3 * i, n_layers * n_heads * 100))
            for layer in range(n_layers):
                for head in range(n_heads):
                    trend = i if layer % 2 == 0 else len(chosen) - 1 - i
                    value = scale * (0.2 + 0.3 * trend + 0.01 * head)
                    if (layer, head) == SYNTHETIC_NEGATIVE[:2] and i == range(len(chosen))[SYNTHETIC_NEGATIVE[2]]:
                        value = -0.1
                    rows.append((step, name, layer, head, value, 0.05, 2.0 - 0.3 * i, 100))
    cols = list(zip(*rows, strict=True))
    table = pa.table(
        {name: pa.array(col, LLC.schema.field(name).type) for name, col in zip(LLC.schema.names, cols, strict=True)},
        schema=LLC.schema,
    )
    n_beta, draws = 30.0, 8
    wiggle = 0.002 * np.array([1, -1, 1, -1, -1, 1, -1, 1])  # zero mean in each half
    climb = np.linspace(-0.05, 0.05, draws)
    chain_rows = []
    for step, name, layer, head, value, std, init, _ in rows:
        i = chosen.index(step)
        rising = (layer, head) == SYNTHETIC_RISING[:2] and i == range(len(chosen))[SYNTHETIC_RISING[2]]
        for c, estimate in enumerate((value - std, value + std)):
            trace = init + estimate / n_beta + wiggle + (climb if rising else 0.0)
            d = chain_diagnostics(trace[None, :], batches=1)  # one sequence: every draw is a pass
            chain_rows.append(
                (
                    step,
                    name,
                    layer,
                    head,
                    c,
                    float(n_beta * (trace.mean() - init)),
                    float(d.first_half[0]),
                    float(d.second_half[0]),
                    float(d.slope[0]),
                    float(d.half_se[0]),
                    trace.astype(np.float32),
                )
            )
    chain_cols = list(zip(*chain_rows, strict=True))
    chains = pa.table(
        {
            name: pa.array(col, LLC_CHAINS.schema.field(name).type)
            for name, col in zip(LLC_CHAINS.schema.names, chain_cols, strict=True)
        },
        schema=LLC_CHAINS.schema,
    )
    record = {
        "sampler": {
            "lr": 0.001,
            "n_beta": 30.0,
            "localization": 300.0,
            "chains": 2,
            "draws": 8,
            "batch_size": 1,
            "burnin": 0,
            "seed": 0,
            "sequences": 1,
        },
        "evaluation": {"text": "synthetic", "n_sequences": 8, "seq_len": 64, "sequences": 1},
        "devinterp": "2.0.1",
        "steps": list(chosen),
        "seconds": {},
    }
    if data != ("text",):
        record["data"] = {
            name: {"description": f"synthetic {name}", "sequences": 1, "seq_len": 64, "tokens_sha256": name, "seconds": {}}
            for name in data
        }
    commit_store(
        path, store.meta.with_record("llc", record), {LLC.name: LLC.sorted(table), LLC_CHAINS.name: LLC_CHAINS.sorted(chains)}
    )
    return path


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.synthetic_store", description="Write a synthetic store.")
    p.add_argument("out", help="the store directory to write")
    p.add_argument(
        "dims",
        nargs="*",
        type=int,
        metavar="N",
        help="n_layers n_heads d_head d_model n_checkpoints (default: Pythia-1.4B's, 154 checkpoints)",
    )
    args = p.parse_args(argv)
    dims = args.dims[:5] or [24, 16, 128, 2048, 154]
    write_synthetic_store(args.out, n_layers=dims[0], n_heads=dims[1], d_head=dims[2], d_model=dims[3], n_checkpoints=dims[4])
    print(args.out)


if __name__ == "__main__":
    main()
