"""The ablation lens's computation: every head ablated, one at a time, as lanes of one batched forward pass.

`ablated_losses` is the core. The identity it relies on: a layer's attention output is a sum over heads,
``attn = b_o + sum_h z_h W_o[h]^T`` (`families.forward`), so replacing head k's output z_k by m_k (its mean over the
evaluation text's tokens, or 0) changes the layer's attention output to ``attn - z_k W_o[k]^T + m_k W_o[k]^T`` and
nothing below the layer. For each batch of sequences the intact forward pass runs once; at each layer l its input
x_l, its heads' outputs and their projections are computed once, and the layer's H heads become H lanes that share
them: each lane's attention output is the intact one with its head's projection swapped, then the lanes (H x
sequences) run through the layers above and the unembedding together, a memory-bounded chunk at a time. Nothing
runs one forward pass per head, and what lies below a head's layer is computed once per batch.

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
from typing import Any

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
from headwatch.precompute.job.context import BaseComputation, ComputationSetup, RunContext, fill_missing, lens_device
from headwatch.precompute.lenses.attention import BATCH_SEQUENCES, load_model
from headwatch.precompute.lenses.losses import check_same_sequences
from headwatch.precompute.settings import StoreSettings
from headwatch.precompute.sources.revisions import CheckpointRef
from headwatch.precompute.sources.source import CheckpointSource, Fetched

log = logging.getLogger("precompute")

# The tokens in context's attention weights are rounded to multiples of 1 / ATTENTION_GRID (error under 7.7e-6): the
# low mantissa bits of float32 softmax values are noise to any drawing and, kept, would double head_contexts.parquet.
ATTENTION_GRID = 2.0**16
# Floats of logits one chunk of lanes may hold at once (lanes x sequences x T x vocab): 2^26, 256 MiB in float32.
LOGIT_BUDGET = 1 << 26


# ------------------------------------------------------------------ the batched forward with heads as lanes


def per_token_losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``(..., T)`` float64 next-token cross-entropy with column 0 NaN, from ``logits`` ``(..., T, V)`` and ``ids``
    ``(..., T)`` (broadcast over leading lane axes), computed in the logits' dtype (float32 at least)."""
    head = logits[..., :-1, :]
    logp = torch.log_softmax(head.float() if head.dtype.itemsize < 4 else head, dim=-1)
    target = ids[..., 1:].expand(logp.shape[:-1])
    lost = -logp.gather(-1, target[..., None])[..., 0].double()
    nan = torch.full((*lost.shape[:-1], 1), float("nan"), dtype=lost.dtype, device=lost.device)
    return torch.cat((nan, lost), dim=-1)


@torch.no_grad()
def head_means(arch: Architecture, params: Params, ids: torch.Tensor, *, batch: int = BATCH_SEQUENCES) -> torch.Tensor:
    """Every head's output z_h (its attention-weighted values, before the output projection) averaged over every
    position of every sequence of ``ids`` ``(S, T)``: ``(n_layers, n_heads, d_head)``."""
    total = None
    for start in range(0, len(ids), batch):
        x = arch.embed(params, ids[start : start + batch])
        sums = []
        for layer in range(arch.n_layers):
            w = arch.attention_weights(params, layer)
            z = arch.heads_output(arch.ln_attn(params, layer, x), w)  # (B, H, T, d_head)
            sums.append(z.sum(dim=(0, 2)))  # (H, d_head)
            attn = arch.project(z, w).sum(dim=1) + w["b_o"]
            x = arch.finish_layer(params, layer, x, attn)
        step = torch.stack(sums)  # (L, H, d_head)
        total = step if total is None else total + step
    assert total is not None, "no sequences"
    return total / ids.numel()


@torch.no_grad()
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
    """Per-token losses intact and with each head ablated, every head of a layer a lane of one computation.

    Args:
        arch, params: the model (`families.forward`).
        ids: ``(S, T)`` token ids.
        means: ``(n_layers, n_heads, d_head)`` what replaces each head's output z (its mean; zeros for zero ablation).
        batch: sequences per intact pass.
        logit_budget: floats of logits a chunk of lanes may hold.
        layers: the layers whose heads are ablated (None: every layer; the others' rows are NaN).

    Returns:
        ``(S, T)`` intact and ``(n_layers, n_heads, S, T)`` ablated float64 losses, column 0 NaN.
    """
    L, H = arch.n_layers, arch.n_heads
    S, T = ids.shape
    base = np.empty((S, T))
    ablated = np.full((L, H, S, T), np.nan)
    vocab = params[arch.family.token_embedding].shape[0]
    chosen = range(L) if layers is None else sorted(layers)
    swapped = {  # what replaces each head's term of its layer's attention output: m_h W_o[h]^T, (H, d_model)
        layer: torch.einsum("he,hde->hd", means[layer].to(params[arch.family.token_embedding].dtype), w["W_o"])
        for layer in chosen
        for w in [arch.attention_weights(params, layer)]
    }
    for start in range(0, S, batch):
        b_ids = ids[start : start + batch]  # (B, T)
        B = len(b_ids)
        chunk = max(1, logit_budget // (T * vocab))  # lane-sequences per chunk above the layer
        x = arch.embed(params, b_ids)
        for layer in range(L):
            w = arch.attention_weights(params, layer)
            z = arch.heads_output(arch.ln_attn(params, layer, x), w)  # (B, H, T, d_head)
            contrib = arch.project(z, w)  # (B, H, T, d_model): each head's z_h W_o[h]^T
            attn = contrib.sum(dim=1) + w["b_o"]  # (B, T, d_model)
            mlp_x = arch.mlp(params, layer, arch.ln_mlp(params, layer, x)) if arch.parallel_residual else None
            if layer not in swapped:
                x = arch.finish_layer(params, layer, x, attn, mlp_x)
                continue
            lanes = attn[None] - contrib.transpose(0, 1) + swapped[layer][:, None, None, :]  # (H, B, T, d_model)
            flat = lanes.reshape(H * B, T, -1)
            x_rep_ids = b_ids.repeat(H, 1)  # (H B, T): lane h's sequences in order
            out = []
            for c in range(0, H * B, chunk):
                rows = torch.arange(c, min(c + chunk, H * B), device=x.device) % B  # lane-sequence r reads x[r % B]
                y = arch.finish_layer(params, layer, x[rows], flat[c : c + chunk], mlp_x[rows] if mlp_x is not None else None)
                for above in range(layer + 1, L):
                    y = arch.layer(params, above, y)
                out.append(per_token_losses(arch.logits(params, y), x_rep_ids[c : c + chunk]))
            ablated[layer, :, start : start + B] = torch.cat(out).reshape(H, B, T).cpu().numpy()
            x = arch.finish_layer(params, layer, x, attn, mlp_x)
        base[start : start + B] = per_token_losses(arch.logits(params, x), b_ids).cpu().numpy()
    return base, ablated


@torch.no_grad()
def attention_over(
    arch: Architecture, params: Params, ids: torch.Tensor, wanted: Mapping[int, list[tuple[int, int, int]]]
) -> dict[tuple[int, int, int, int], np.ndarray]:
    """The intact attention rows asked for: ``wanted`` maps a layer to ``(sequence, head, query)`` triples of
    ``ids`` ``(S, T)``; returns ``(layer, sequence, head, query) -> (T,)`` attention over the keys (0 past the
    query)."""
    out: dict[tuple[int, int, int, int], np.ndarray] = {}
    sequences = sorted({s for triples in wanted.values() for s, _, _ in triples})
    if not sequences:
        return out
    row_of = {s: i for i, s in enumerate(sequences)}
    x = arch.embed(params, ids[sequences])
    for layer in range(arch.n_layers):
        w = arch.attention_weights(params, layer)
        z, alpha = arch.heads_attention(arch.ln_attn(params, layer, x), w)  # alpha (U, H, T, T)
        for s, h, q in wanted.get(layer, []):
            out[(layer, s, h, q)] = alpha[row_of[s], h, q].double().cpu().numpy()
        if layer + 1 < arch.n_layers and any(k > layer for k in wanted):
            attn = arch.project(z, w).sum(dim=1) + w["b_o"]
            x = arch.finish_layer(params, layer, x, attn)
        elif not any(k > layer for k in wanted):
            break
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
    text_ids = torch.from_numpy(job.eval_set.tokens).to(device)
    probe_ids = torch.from_numpy(job.eval_set.induction).to(device)
    means = head_means(arch, params, text_ids, batch=job.batch)
    if job.method == "zero":
        means = torch.zeros_like(means)
    text_base, text_abl = ablated_losses(arch, params, text_ids, means, batch=job.batch)
    probe_base, probe_abl = ablated_losses(arch, params, probe_ids, means, batch=job.batch)
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
    contexts = context_rows(step, arch, params, job, (text_ids, text_base, text_abl), (probe_ids, probe_base, probe_abl))
    return {ABLATION.name: ABLATION.sorted(pa.table(table, schema=ABLATION.schema)), HEAD_CONTEXTS.name: contexts}


def context_rows(
    step: int,
    arch: Architecture,
    params: Params,
    job: AblationJob,
    text: tuple[torch.Tensor, np.ndarray, np.ndarray],
    probe: tuple[torch.Tensor, np.ndarray, np.ndarray],
) -> pa.Table:
    """Each head's `CONTEXTS_PER_HEAD` tokens whose loss rises most when it is ablated, pooled over the text and
    the probe: ``(ids, intact (S, T), ablated (L, H, S, T))`` per set."""
    L, H = arch.n_layers, arch.n_heads
    sets = (("text", *text), ("probe", *probe))
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
    attention = {name: attention_over(arch, params, ids, wanted[name]) for name, ids, _, _ in sets}
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
