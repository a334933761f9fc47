"""The ablation lens's computation: every head ablated, one at a time, as lanes of one batched forward pass.

`ablation_pass` is the core. The identity it relies on: a layer's attention output is a sum over heads,
``attn = b_o + sum_h z_h W_o[h]^T`` (`families.forward`), so replacing head k's output z_k by m_k (its mean over the
evaluation text's tokens, or 0) changes the layer's attention output to ``attn - z_k W_o[k]^T + m_k W_o[k]^T`` and
nothing below the layer. The intact forward pass runs once, layer by layer over every sequence; at each layer l its
input x_l, its heads' outputs (whose average over the text is the heads' mean: the intact pass is the means' pass)
and their projections are computed once, and the layer's H heads become H lanes that share them: each lane's
attention output is the intact one with its head's projection swapped, then the lanes (H x sequences) run through
the layers above and the unembedding together, a few hundred lane-tokens at a time. Nothing runs one forward pass
per head, and what lies below a head's layer is computed once. The tokens in context's attention rows are read from
the intact pass's layer inputs, only the rows shown (`attention_over`).

The checkpoint's weights come from transformers (`precompute.lenses.attention.load_model`) into the functional
forward (`families.forward.architecture`: GPT-2, GPT-NeoX and the Llama family); the statistics are
`analysis.attention.losses`'. The rows: ablation.parquet at every checkpoint; head_contexts.parquet computed at every
checkpoint of the pass and kept, once the run's stages are known, at the checkpoints of ``--ablation-steps``
(`AblationComputation.fill`; `context_steps`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from headwatch.analysis.attention.losses import icl_probe, icl_text, mean_increase, top_contexts
from headwatch.analysis.errors import CheckpointError, StoreError
from headwatch.analysis.store import Meta, open_store
from headwatch.analysis.store.lenses.ablation import (
    ABLATION,
    ABLATION_LENS,
    CONTEXTS_PER_HEAD,
    HEAD_CONTEXTS,
    AblationMethod,
    AblationOptions,
)
from headwatch.analysis.store.lenses.losses import icl_positions, probe_positions
from headwatch.analysis.store.lenses.stages import STAGES
from headwatch.families.family import ModelShape
from headwatch.families.forward import Architecture, Params, architecture, check_functional, parameters
from headwatch.precompute.evalset import BYTE_TOKENIZER, EvalSet, EvalTextError
from headwatch.precompute.job.context import BaseComputation, ComputationSetup, RunContext, fill_missing, lens_device, tensor_of
from headwatch.precompute.lenses.attention import BATCH_SEQUENCES, load_model
from headwatch.precompute.lenses.losses import check_same_sequences, per_token_losses
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched

log = logging.getLogger("precompute")

# The tokens in context's attention weights are rounded to multiples of 1 / ATTENTION_GRID (error under 7.7e-6): the
# low mantissa bits of float32 softmax values are noise to any drawing and, kept, would double head_contexts.parquet.
ATTENTION_GRID = 2.0**16
# Floats of logits one chunk of lanes may hold at once (lanes x sequences x T x vocab): 2^26, 256 MiB in float32.
LOGIT_BUDGET = 1 << 26
# Lane-tokens a chunk of lanes runs through the layers above at once (at least one sequence): products of a few
# hundred rows run as fast per multiply-add as larger ones, and their activations are reused from the allocator's
# free memory instead of fresh pages.
LANE_ROWS = 512


# ------------------------------------------------------------------ the batched forward with heads as lanes


class _SplitNorm:
    """The first matrix of a layer's MLP on the LayerNorm of each lane's residual, with the product over d_model done
    once for the layer's intact residual and d_head wide per lane.

    Lane k's residual after attention is ``v = h + W_o[k] u``, h the intact one and ``u = m_k - z_k`` (d_head), so
    its centred form is ``c(h) + A_k u`` with ``A_k = W_o[k]`` centred over d_model, and the LayerNorm's output times
    the MLP's first matrix W_1 (bias b_1), with gain g and bias b, is::

        W_1 LN(v) + b_1 = r_v (P + u N_k^T) + beta,   P = (g * c(h)) W_1^T,   N_k = W_1 diag(g) A_k,
        beta = W_1 b + b_1,   r_v = 1 / sqrt(|c(h) + A_k u|^2 / d + eps),
        |c(h) + A_k u|^2 = |c(h)|^2 + 2 (W_o[k]^T c(h)) . u + u^T (A_k^T A_k) u

    P (d_model x d_mlp per token) is the intact pass's own product; a lane adds ``u N_k^T`` (d_head x d_mlp per
    lane-token) and ``u^T A_k^T A_k u`` (d_head^2). The same function of the weights as ``W_1 LN(v) + b_1`` (float32
    rounding apart), fewer multiply-adds: the lanes' MLP keeps its second matrix only at full width.
    """

    def __init__(self, arch: Architecture, params: Params, layer: int, w_o: torch.Tensor) -> None:
        gain, bias = arch.norm_parameters(params, layer)
        w1, b1 = arch.mlp_first(params, layer)  # (d_mlp, d_model)
        self.d, self.eps, self.gain, self.w1, self.w_o = arch.d_model, arch.eps, gain, w1, w_o
        centred = w_o - w_o.mean(dim=1, keepdim=True)  # (H, d_model, d_head): A_k
        self.n = torch.einsum("fd,hde->hef", w1 * gain, centred)  # (H, d_head, d_mlp): N_k^T
        self.gram = centred.transpose(1, 2) @ centred  # (H, d_head, d_head): A_k^T A_k
        beta = w1 @ bias if bias is not None else w1.new_zeros(w1.shape[0])
        self.beta = beta + b1 if b1 is not None else beta

    def intact(self, h: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The intact MLP's first product from the residual ``h`` ``(B, T, d_model)``, and what the lanes of
        ``u`` ``(H, B, T, d_head)`` (each head's ``m_k - z_k``) need kept: their ``1 / sqrt(var + eps)``."""
        c = h - h.mean(dim=-1, keepdim=True)
        square = c.square().sum(dim=-1)  # (B, T)
        self.p = torch.nn.functional.linear(c * self.gain, self.w1)  # (B, T, d_mlp)
        s = torch.einsum("btd,hde->hbte", c, self.w_o)  # (H, B, T, d_head): W_o[k]^T c(h)
        ug = torch.einsum("hbte,hef->hbtf", u, self.gram)
        var = (square[None] + 2 * (s * u).sum(dim=-1) + (ug * u).sum(dim=-1)) / self.d  # (H, B, T)
        H, B, T, dh = u.shape
        self.r = torch.rsqrt(var + self.eps).reshape(H * B, T, 1)
        self.u = u.reshape(H * B, T, dh)
        return self.p * torch.rsqrt(square / self.d + self.eps)[..., None] + self.beta

    def lanes(self, start: int, stop: int, batch: int) -> torch.Tensor:
        """The first product of lane-sequences ``start:stop`` (lane k's sequences at ``k * batch``, in order), after
        `intact`: ``(stop - start, T, d_mlp)``."""
        rows = torch.arange(start, min(stop, len(self.u)), device=self.u.device)
        own = torch.bmm(self.u[start:stop], self.n[rows // batch])  # (n, T, d_mlp)
        if start % batch == 0 and len(rows) % batch == 0:  # whole lanes: P broadcast over them, not gathered
            own.view(-1, *self.p.shape).add_(self.p)
        else:
            own.add_(self.p[rows % batch])
        return own.mul_(self.r[start:stop]).add_(self.beta)


class AblationPass(NamedTuple):
    """`ablation_pass`'s result: the means ``(n_layers, n_heads, d_head)``, the ``(S, T)`` intact and ``(n_layers,
    n_heads, S, T)`` ablated float64 losses (column 0 NaN), and, where asked for, each layer's intact input for every
    sequence ``(S, T, d_model)`` (`attention_over` reads the tokens in context's attention from them)."""

    means: torch.Tensor
    base: np.ndarray
    ablated: np.ndarray
    inputs: list[torch.Tensor] | None


@torch.no_grad()
def ablation_pass(
    arch: Architecture,
    params: Params,
    ids: torch.Tensor,
    *,
    means: torch.Tensor | None = None,
    text: int | None = None,
    batch: int = BATCH_SEQUENCES,
    logit_budget: int = LOGIT_BUDGET,
    layers: Collection[int] | None = None,
    keep_inputs: bool = False,
) -> AblationPass:
    """Per-token losses intact and with each head ablated, every head of a layer a lane of one computation.

    Layer by layer over every sequence of ``ids``: the intact layer (its input x_l held for every sequence), the
    heads' means from its heads' outputs where ``means`` is None (the intact pass is the means' pass), then, a batch
    of sequences at a time, the layer's heads as lanes: lane h's attention output is the intact one with head h's
    term ``z_h W_o[h]^T`` swapped for ``m_h W_o[h]^T``; the lanes (heads x sequences) run through the rest of the
    layer, the layers above and the unembedding together, a memory-bounded chunk at a time.

    Args:
        arch, params: the model (`families.forward`).
        ids: ``(S, T)`` token ids.
        means: ``(n_layers, n_heads, d_head)`` what replaces each head's output z (its mean; zeros for zero
            ablation); None: each head's mean over every position of the first ``text`` sequences of ``ids``.
        text: the sequences the means are taken over (None: all of ``ids``).
        batch: sequences per intact product and per lanes' batch.
        logit_budget: floats of logits a chunk of lanes may hold.
        layers: the layers whose heads are ablated (None: every layer; the others' rows are NaN).
        keep_inputs: keep each layer's intact input (`AblationPass.inputs`; n_layers tensors of ``(S, T, d_model)``).

    Raises:
        ValueError: no text sequence to take the means over.
    """
    L, H = arch.n_layers, arch.n_heads
    S, T = ids.shape
    n_text = S if text is None else text
    if means is None and n_text < 1:
        raise ValueError("ablation_pass: the means need at least one text sequence (text >= 1)")
    base = np.empty((S, T))
    ablated = np.full((L, H, S, T), np.nan)
    dtype = params[arch.family.token_embedding].dtype
    vocab = params[arch.family.token_embedding].shape[0]
    chosen = set(range(L) if layers is None else layers)
    # lane-sequences per chunk above the layer: at most LANE_ROWS lane-tokens (and the logits' budget)
    chunk = max(1, min(logit_budget // (T * vocab), LANE_ROWS // T))
    packs = [arch.packed_attention(params, layer) for layer in range(L)]
    spans = [(s, min(s + batch, S)) for s in range(0, S, batch)]
    # a lane's MLP input differs from the intact one by its head's term only, d_head wide: under a LayerNorm before
    # an MLP of two matrices (GPT-2), the first matrix's product splits (`_SplitNorm`)
    low_rank = not arch.parallel_residual and not arch.family.rms_norm and len(arch.family.mlp_projections) == 2
    found = []
    inputs: list[torch.Tensor] | None = [] if keep_inputs else None
    x = arch.embed(params, ids)  # (S, T, d_model): the current layer's input, every sequence
    for layer in range(L):
        if inputs is not None:
            inputs.append(x)
        pack = packs[layer]
        z = torch.cat([arch.packed_heads(arch.ln_attn(params, layer, x[a:b]), pack) for a, b in spans])  # (S, H, T, dh)
        m = z[:n_text].sum(dim=(0, 2)) / (n_text * T) if means is None else means[layer].to(x.device, dtype)
        found.append(m)
        swapped = torch.einsum("he,hde->hd", m, pack["W_o_heads"]) if layer in chosen else None  # (H, d)
        split = _SplitNorm(arch, params, layer, pack["W_o_heads"]) if swapped is not None and low_rank else None
        x_next = torch.empty_like(x)
        for a, b in spans:
            xb, zb = x[a:b], z[a:b]
            B = b - a
            if swapped is None:
                x_next[a:b] = arch.finish_layer(params, layer, xb, arch.packed_merge(zb, pack))
                continue
            # each head's term z_h W_o[h]^T of the attention output, lane-major: (H, B, T, d_model)
            lanes = torch.einsum("bhte,hde->hbtd", zb, pack["W_o_heads"])
            attn = lanes.sum(dim=0) + pack["b_o"]  # (B, T, d_model)
            h = xb + attn  # the residual after attention
            if split is not None:
                out = h + arch.mlp_rest(params, layer, split.intact(h, m[:, None, None, :] - zb.transpose(0, 1)))
            else:
                out = arch.finish_layer(params, layer, xb, attn)
            x_next[a:b] = out
            # lane h, in place: the layer's residual after attention (GPT-NeoX's parallel residual: its output, whose
            # MLP reads the unchanged input) with head h's term swapped, (H B, T, d_model), lane h's sequences in order
            lanes = lanes.neg_().add_(swapped[:, None, None, :]).add_(out if arch.parallel_residual else h)
            lanes = lanes.view(H * B, T, -1)
            targets = ids[a:b].repeat(H, 1)  # (H B, T)
            lost = []
            for c in range(0, H * B, chunk):
                y = lanes[c : c + chunk]
                if split is not None:
                    y = y + arch.mlp_rest(params, layer, split.lanes(c, c + chunk, B))
                elif not arch.parallel_residual:
                    y = y + arch.mlp(params, layer, arch.ln_mlp(params, layer, y))
                for above in range(layer + 1, L):
                    y = arch.packed_layer(params, above, y, packs[above])
                lost.append(per_token_losses(arch.logits(params, y), targets[c : c + chunk]))
            ablated[layer, :, a:b] = torch.cat(lost).reshape(H, B, T).cpu().numpy()
        x = x_next
    for a, b in spans:
        base[a:b] = per_token_losses(arch.logits(params, x[a:b]), ids[a:b]).cpu().numpy()
    return AblationPass(torch.stack(found), base, ablated, inputs)


def ablated_losses(
    arch: Architecture,
    params: Params,
    ids: torch.Tensor,
    means: torch.Tensor,
    *,
    batch: int = BATCH_SEQUENCES,
    logit_budget: int = LOGIT_BUDGET,
    layers: Collection[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`ablation_pass` with the given ``means``: ``(S, T)`` intact and ``(n_layers, n_heads, S, T)`` ablated float64
    losses, column 0 NaN."""
    done = ablation_pass(arch, params, ids, means=means, batch=batch, logit_budget=logit_budget, layers=layers)
    return done.base, done.ablated


@torch.no_grad()
def attention_over(
    arch: Architecture,
    params: Params,
    ids: torch.Tensor,
    wanted: Mapping[int, list[tuple[int, int, int]]],
    inputs: list[torch.Tensor] | None = None,
) -> dict[tuple[int, int, int, int], np.ndarray]:
    """The intact attention rows asked for: ``wanted`` maps a layer to ``(sequence, head, query)`` triples of
    ``ids`` ``(S, T)``; returns ``(layer, sequence, head, query) -> (T,)`` attention over the keys (0 past the
    query). Only those rows' probabilities are computed (their queries against the keys, Q and K of the sequences
    that hold them), from ``inputs`` (each layer's input for every sequence, `ablation_pass`'s ``inputs``) or, without
    them, from an intact pass over those sequences up to the highest layer asked for."""
    out: dict[tuple[int, int, int, int], np.ndarray] = {}
    layers = sorted(layer for layer, triples in wanted.items() if triples)
    if not layers:
        return out
    sequences = sorted({s for triples in wanted.values() for s, _, _ in triples})
    row_of = {s: i for i, s in enumerate(sequences)}
    if inputs is None:
        x = arch.embed(params, ids[sequences])
        inputs = []
        for layer in range(layers[-1] + 1):
            inputs.append(x)
            if layer < layers[-1]:
                x = arch.packed_layer(params, layer, x, arch.packed_attention(params, layer))
        rows_in = {layer: inputs[layer] for layer in layers}
    else:
        index = torch.tensor(sequences, device=ids.device)
        rows_in = {layer: inputs[layer][index] for layer in layers}
    T, dh = ids.shape[1], arch.d_head
    keys = torch.arange(T, device=ids.device)
    for layer in layers:
        triples = wanted[layer]
        w = arch.attention_weights(params, layer)
        ln_x = arch.ln_attn(params, layer, rows_in[layer])  # (U, T, d_model)
        q, k = arch.queries_keys(ln_x, w)  # (U, H, T, d_head)
        seq = torch.tensor([row_of[s] for s, _, _ in triples], device=ids.device)
        head = torch.tensor([h for _, h, _ in triples], device=ids.device)
        query = torch.tensor([p for _, _, p in triples], device=ids.device)
        scores = torch.einsum("ne,nke->nk", q[seq, head, query], k[seq, head]) * dh**-0.5  # (n, T)
        alpha = torch.softmax(scores.masked_fill(keys[None] > query[:, None], float("-inf")), dim=-1)
        for (s, h, p), row in zip(triples, alpha.double().cpu().numpy(), strict=True):
            out[(layer, s, h, p)] = row
    return out


# ------------------------------------------------------------------ decoding tokens


@functools.lru_cache(maxsize=4)
def _decoder(tokenizer: str, kwargs: tuple[tuple[str, Any], ...] = ()) -> Callable[[int], str]:
    """The evaluation set's tokenizer as a function id -> text of that token alone: a byte as UTF-8 where it is
    one character, else as an escape (``\\xe2``); else the tokenizer at ``tokenizer`` loaded as the pass loaded it
    (``kwargs``: `CheckpointSource.tokenizer_location`'s, the revision and cache among them), its ``decode([id])``.

    Raises:
        EvalTextError: no tokenizer loads there (the tokens in context would be unreadable ids).
    """
    if tokenizer == BYTE_TOKENIZER:
        return lambda i: bytes([i]).decode("utf-8", errors="backslashreplace")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(tokenizer, **dict(kwargs))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvalTextError(
            f"the ablation lens cannot load the evaluation set's tokenizer at {tokenizer!r} "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}) to decode its tokens in context; save "
            "the model's tokenizer beside its config (tokenizer.save_pretrained), or run without --lenses ablation"
        ) from exc
    return lambda i: str(tok.decode([i]))


def tokenizer_kwargs(src: CheckpointSource, todo: list[CheckpointRef], tokenizer: str) -> tuple[tuple[str, Any], ...]:
    """How the pass loads the evaluation set's tokenizer at ``tokenizer`` (the revision, the cache), as
    `precompute.job.run` asks the source for it; none for byte tokens or another location."""
    if tokenizer == BYTE_TOKENIZER:
        return ()
    location, kwargs = src.tokenizer_location(todo[0]) if todo else (src.name, {})
    return tuple(sorted(kwargs.items())) if location == tokenizer else ()


# ------------------------------------------------------------------ one checkpoint


@dataclass(frozen=True)
class AblationJob:
    """What the ablation lens needs besides the checkpoint (the same for every checkpoint of a run); its share of
    the pass over each checkpoint (`precompute.job.context.PassJob`)."""

    eval_set: EvalSet
    method: AblationMethod = "mean"
    window: int = 64
    device: str = "cpu"
    batch: int = BATCH_SEQUENCES
    tokenizer_kwargs: tuple[tuple[str, Any], ...] = ()  # how the evaluation set's tokenizer loads (`tokenizer_kwargs`)

    def checkpoint_rows(
        self, fetched: Fetched, shape: ModelShape, settings: StoreSettings, src: CheckpointSource | None
    ) -> Mapping[str, pa.Table]:
        assert src is not None, "the ablation lens needs the source"
        return ablation_work(src, fetched.ref, self)


def ablation_work(src: CheckpointSource, ref: CheckpointRef, job: AblationJob) -> dict[str, pa.Table]:
    """One checkpoint's rows of the ablation lens (both tables).

    Raises:
        CheckpointError: it cannot be loaded, its family has no functional forward, or its losses are not finite.
    """
    with src.checkpoint_folder(ref) as folder:
        model = load_model(folder, device=job.device, attn_implementation="sdpa")
        try:
            arch = architecture(model, sampler=False)
            params = parameters(model)
            return ablation_rows(ref.step, arch, params, job)
        finally:
            del model


def ablation_rows(step: int, arch: Architecture, params: Params, job: AblationJob) -> dict[str, pa.Table]:
    """One checkpoint's rows of ablation.parquet and head_contexts.parquet, from the model in the functional
    forward's terms.

    Raises:
        CheckpointError: the intact losses are not finite.
    """
    device = params[arch.family.token_embedding].device
    text_ids = tensor_of(job.eval_set.tokens).to(device)
    probe_ids = tensor_of(job.eval_set.induction).to(device)
    zeros = None
    if job.method == "zero":
        zeros = torch.zeros(arch.n_layers, arch.n_heads, arch.d_head, dtype=torch.float32, device=device)
    text_pass = ablation_pass(arch, params, text_ids, means=zeros, batch=job.batch, keep_inputs=True)
    probe_pass = ablation_pass(arch, params, probe_ids, means=text_pass.means, batch=job.batch, keep_inputs=True)
    text_base, text_abl = text_pass.base, text_pass.ablated
    probe_base, probe_abl = probe_pass.base, probe_pass.ablated
    if not (np.isfinite(text_base[:, 1:]).all() and np.isfinite(probe_base[:, 1:]).all()):
        raise CheckpointError("the per-token losses are not finite; the checkpoint diverged")
    L, H = arch.n_layers, arch.n_heads
    info = job.eval_set.info
    t, repeat = info.seq_len, info.induction_repeat
    early, late = icl_positions(t)
    text = mean_increase(text_base, text_abl.reshape(L * H, *text_base.shape), range(1, t))
    probe = mean_increase(probe_base, probe_abl.reshape(L * H, *probe_base.shape), probe_positions(repeat)[1])
    icl_t = icl_text(text_abl.reshape(L * H, *text_base.shape), early, late)
    icl_p = icl_probe(probe_abl.reshape(L * H, *probe_base.shape), repeat)
    n = L * H
    table = {
        "step": np.full(n, step, dtype=np.int64),
        "layer": np.repeat(np.arange(L, dtype=np.int32), H),
        "head": np.tile(np.arange(H, dtype=np.int32), L),
        "method": [job.method] * n,
        "text_increase": text.score,
        "text_increase_sem": text.sem,
        "probe_increase": probe.score,
        "probe_increase_sem": probe.sem,
        "icl_text": icl_t.score,
        "icl_text_sem": icl_t.sem,
        "icl_probe": icl_p.score,
        "icl_probe_sem": icl_p.sem,
    }
    contexts = context_rows(step, arch, params, job, (text_ids, text_pass), (probe_ids, probe_pass))
    return {ABLATION.name: ABLATION.sorted(pa.table(table, schema=ABLATION.schema)), HEAD_CONTEXTS.name: contexts}


def context_rows(
    step: int,
    arch: Architecture,
    params: Params,
    job: AblationJob,
    text: tuple[torch.Tensor, AblationPass],
    probe: tuple[torch.Tensor, AblationPass],
) -> pa.Table:
    """Each head's `CONTEXTS_PER_HEAD` tokens whose loss rises most when it is ablated, pooled over the text and
    the probe: ``(ids, its ablation_pass)`` per set (the attention over their windows read from the pass's layer
    inputs where it kept them)."""
    L, H = arch.n_layers, arch.n_heads
    sets = tuple((name, ids, done.base, done.ablated) for name, (ids, done) in (("text", text), ("probe", probe)))
    inputs = {"text": text[1].inputs, "probe": probe[1].inputs}
    increases = np.concatenate(
        [(abl - base[None, None]).reshape(L * H, -1) for _, _, base, abl in sets], axis=1
    )  # (L H, M): the text's tokens, then the probe's, each row-major (sequence, position)
    picked, values = top_contexts(increases, CONTEXTS_PER_HEAD)
    sizes = [base.size for _, _, base, _ in sets]
    decode = _decoder(job.eval_set.info.tokenizer, job.tokenizer_kwargs)
    repeat = job.eval_set.info.induction_repeat
    rows: dict[str, list[Any]] = {c: [] for c in HEAD_CONTEXTS.schema.names}
    wanted: dict[str, dict[int, list[tuple[int, int, int]]]] = {"text": {}, "probe": {}}
    chosen = []
    for lane in range(L * H):
        layer, head = divmod(lane, H)
        for rank, (flat, value) in enumerate(zip(picked[lane], values[lane], strict=True), start=1):
            if not np.isfinite(value):
                continue
            which = 0 if flat < sizes[0] else 1
            name, _, base, _ = sets[which]
            seq, pos = divmod(int(flat - (sizes[0] if which else 0)), base.shape[1])
            chosen.append((layer, head, rank, name, seq, pos, float(value), float(base[seq, pos])))
            wanted[name].setdefault(layer, []).append((seq, head, pos - 1))
    attention = {name: attention_over(arch, params, ids, wanted[name], inputs[name]) for name, ids, _, _ in sets}
    id_lists = {name: ids.cpu().numpy() for name, ids, _, _ in sets}
    for layer, head, rank, name, seq, pos, value, base_loss in chosen:
        start = max(0, pos - job.window + 1)
        window = id_lists[name][seq, start : pos + 1]
        alpha = np.round(attention[name][(layer, seq, head, pos - 1)][start : pos + 1] * ATTENTION_GRID) / ATTENTION_GRID
        rows["step"].append(step)
        rows["layer"].append(layer)
        rows["head"].append(head)
        rows["rank"].append(rank)
        rows["set"].append(name)
        rows["sequence"].append(seq)
        rows["position"].append(pos)
        rows["second_copy"].append(name == "probe" and pos >= repeat + 1)
        rows["start"].append(start)
        rows["target"].append(decode(int(window[-1])))
        rows["tokens"].append([decode(int(i)) for i in window])
        rows["attention"].append(alpha.astype(np.float32).tolist())
        rows["loss_increase"].append(value)
        rows["base_loss"].append(base_loss)
    return HEAD_CONTEXTS.sorted(pa.table(rows, schema=HEAD_CONTEXTS.schema))


# ------------------------------------------------------------------ which checkpoints keep their contexts


def context_steps(option: str | None, done: list[int], boundaries: list[int]) -> list[int]:
    """The checkpoints whose tokens in context are kept, among ``done`` (the store's checkpoints with rows).

    Args:
        option: ``--ablation-steps``: None (the last checkpoint and each stage boundary), ``last``, ``all``, or
            comma-separated steps (those the store has).
        done: the checkpoints with ablation rows, ascending.
        boundaries: the first checkpoint of each of the run's stages (stages.parquet basis run).
    """
    if not done:
        return []
    if option == "all":
        return list(done)
    if option == "last":
        return [done[-1]]
    if option is None:
        return sorted({done[-1], *boundaries} & set(done))
    asked = {int(s) for s in option.split(",")}
    lacking = sorted(asked - set(done))
    if lacking:
        log.warning(
            "--ablation-steps: the store has no checkpoint at step%s %s (it has %s); no tokens in context there",
            "s" if len(lacking) > 1 else "",
            ", ".join(f"{s:,}" for s in lacking),
            _steps_text(done),
        )
    return sorted(asked & set(done))


def _steps_text(steps: list[int]) -> str:
    """``0, 1, 4`` or ``0, 1, ..., 4,000 (50 checkpoints)``."""
    if len(steps) <= 8:
        return ", ".join(f"{s:,}" for s in steps)
    return f"{steps[0]:,}, {steps[1]:,}, ..., {steps[-1]:,} ({len(steps)} checkpoints)"


def stage_boundaries(out: Path) -> list[int]:
    """The first checkpoint of each stage after the first, stages.parquet basis run, of the store at ``out`` (none
    without stages)."""
    try:
        stages = open_store(out).read(STAGES, columns=["basis", "stage", "start_step"])
    except (StoreError, OSError):
        return []
    if stages is None:
        return []
    run = stages.filter(pc.equal(stages["basis"], "run"))
    return sorted({int(s) for s, k in zip(run["start_step"].to_pylist(), run["stage"].to_pylist(), strict=True) if k > 0})


# ------------------------------------------------------------------ the computation


class AblationComputation(BaseComputation):
    """The ablation lens: computed in the pass over each new checkpoint, and afterwards for the store's checkpoints
    computed without it; its tokens in context kept, at the end, at the chosen checkpoints (the stages known)."""

    lens = ABLATION_LENS

    def __init__(self, setup: ComputationSetup) -> None:
        """Refuse a family without a functional forward and a context too short for the ICL positions.

        Raises:
            UnknownArchitectureError: the family has no functional forward (`families.forward.check_functional`).
            ValueError: T < 3.
            EvalTextError: the evaluation set's tokenizer does not load (`_decoder`).
        """
        super().__init__(setup)
        assert setup.eval_set is not None, "the ablation lens needs the evaluation sequences"
        check_functional(setup.plan.model.config, who="the ablation lens")
        icl_positions(setup.eval_set.info.seq_len)
        self.options: AblationOptions = setup.options.lens_options_for(self.lens.name)
        plan = setup.plan
        kwargs = tokenizer_kwargs(plan.src, list(plan.todo), setup.eval_set.info.tokenizer)
        _decoder(setup.eval_set.info.tokenizer, kwargs)  # a tokenizer that does not load: refused before any work
        self.pass_job = self.job = AblationJob(
            setup.eval_set,
            method=self.options.method,
            window=self.options.window,
            device=lens_device(setup.options),
            tokenizer_kwargs=kwargs,
        )

    def record(self) -> dict[str, Any]:
        """What ``meta.json`` ``ablation`` records (its ``context_steps`` filled at the end of the run)."""
        info = self.job.eval_set.info
        second = probe_positions(info.induction_repeat)[1]
        return {
            "method": self.options.method,
            "window": self.options.window,
            "steps": self.options.steps,
            "contexts_per_head": CONTEXTS_PER_HEAD,
            "forward": info.as_dict(),
            "mean_over": f"every position of the {info.n_sequences} x {info.seq_len} evaluation text tokens, per checkpoint",
            "text_positions": [1, info.seq_len - 1],
            "probe_positions": [second.start, second.stop - 1],
            "icl_positions": list(icl_positions(info.seq_len)),
            "context_steps": [],
        }

    def check_store(self, out: Path, stored: Meta | None) -> None:
        check_same_sequences(out, stored, "ablation", self.job.eval_set, "ablations")
        record = stored.records.get("ablation") if stored is not None else None
        if record is None:
            return
        for flag, field in (("--ablation-method", "method"), ("--ablation-window", "window")):
            if record.get(field) != getattr(self.options, field):
                raise StoreError(
                    f"store {str(out)!r} has ablations made with {flag} {record.get(field)} (now "
                    f"{getattr(self.options, field)}); pass {flag} {record.get(field)}, or write to a new --out"
                )

    def begin(self, run: RunContext) -> None:
        stored = run.state.meta.records.get("ablation")
        record = self.record()
        if stored is not None:
            record["context_steps"] = stored.get("context_steps", [])
        run.state.meta.set_record("ablation", record)

    def fill(self, run: RunContext) -> None:
        """The ablation rows of the store's checkpoints that lack them; then the tokens in context kept at the
        chosen checkpoints (read again where a chosen one lacks them), the others' dropped."""
        plan, state = run.plan, run.state
        fill_missing(
            run,
            self.lens,
            lambda ref: ablation_work(plan.src, ref, self.job),
            what="ablation lens",
            left_out_as="its ablation rows",
            note="note: {n} checkpoints have no ablation rows (steps {steps}): see the warnings above; rerun to retry them",
        )
        done = sorted(state.steps_with(ABLATION.name))
        keep = context_steps(self.options.steps, done, stage_boundaries(state.out))
        lacking = [s for s in keep if s not in state.steps_with(HEAD_CONTEXTS.name)]
        for step in lacking:
            ref = plan.ref(state.meta.entry(step))
            try:
                rows = ablation_work(plan.src, ref, self.job)
            except CheckpointError as exc:
                log.warning("%s: cannot re-read it for its tokens in context (%s); left out", ref.revision, exc)
                run.report.notes.append(f"note: no tokens in context at step {step}: its checkpoint cannot be read again")
                keep.remove(step)
                continue
            state.put({HEAD_CONTEXTS.name: rows[HEAD_CONTEXTS.name]})
        held = state.tables.get(HEAD_CONTEXTS.name, HEAD_CONTEXTS.empty())
        state.tables[HEAD_CONTEXTS.name] = held.filter(pc.is_in(held["step"], pa.array(keep, pa.int64())))
        record = dict(state.meta.records.get("ablation") or self.record())
        record["context_steps"] = keep
        state.meta.set_record("ablation", record)
        state.commit(heads=False)
