"""The batched SGLD sampler of the refined LLC: every head of a layer, and every chain, in one computation.

It samples what devinterp's ``llc`` samples (`precompute.lenses.llc.estimate_llc`, the reference the
tests compare it with), with the same settings and the same estimator, but:

- the heads of a layer and their chains are *lanes* of one `torch.func.vmap`-ed computation, each lane
  with its own copy of its head's weights (`families.forward`'s per-head layout); the
  whole-model estimate's chains are lanes with a copy of every weight;
- the layer's input and the other heads' share of its attention output are computed once, at w*, for
  every sequence (`Frozen`), so a step runs only the moved head, the layers above it and the
  unembedding, and the backward pass stops at the layer;
- nothing is written to disk.

The SGLD step is devinterp's ``SGMCMC.sgld`` with localization (and no weight decay), per lane:

    w <- w - (lr / 2) (n_beta grad L_t(w) + gamma (w - w*)) + sqrt(lr) xi,   xi ~ N(0, I)

with ``L_t`` the mean per-token loss of step t's batch at w (recorded *before* the step, as devinterp's
``loss_trace``). The batches are devinterp's: one pass of a ``DataLoader(shuffle=True, drop_last=True)``
seeded with ``sampler.seed``, replayed (``itertools.cycle``), the same for every chain and head. The
initial loss ``L(w*)`` is the mean per-token loss over every sequence. Per chain
``llc_c = n_beta (mean over the steps after burn-in of L_t - L(w*))``.

The noise xi of each lane comes from its own ``torch.Generator`` seeded by `lane_seed` from
``(sampler.seed, layer, head, chain)`` (the whole model: layer = head = -1): an estimate does not
depend on which other lanes share its computation, and is reproduced from the recorded seed. It is not
devinterp's noise stream (devinterp draws a full-size normal per parameter tensor from the global
generator seeded ``seed + chain``); `NoiseSource` lets the tests replay that stream to compare traces.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from headwatch.analysis.errors import CheckpointError
from headwatch.analysis.store.lenses.llc import SamplerSettings
from headwatch.families.forward import HEAD_KEYS, Architecture, Params, architecture, parameters, token_loss

WHOLE_MODEL = -1
# Lanes of one vmap call are bounded by the logits they hold: lanes x batch x T x vocab floats at most this
# many (4 bytes each: 256 MiB per logits tensor; the step holds a few such tensors).
MAX_LANE_LOGITS = 1 << 26
# ... and, for the whole model, by the weights they copy: lanes x parameters at most this many (a lane holds
# its weights, w*, their gradient and its noise: four copies, 4 GiB at this bound).
MAX_LANE_PARAMETERS = 1 << 28


@dataclass(frozen=True)
class Lane:
    """One chain of one estimate: (layer, head) of a head, or (-1, -1) for the whole model."""

    layer: int
    head: int
    chain: int


def lane_seed(seed: int, lane: Lane) -> int:
    """The seed of ``lane``'s noise generator: numpy's ``SeedSequence([seed, layer + 1, head + 1, chain])``'s
    first 63-bit word (the whole model's layer and head are -1, so 0 there)."""
    state = np.random.SeedSequence([seed, lane.layer + 1, lane.head + 1, lane.chain]).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


class NoiseSource(Protocol):
    """Draws each lane's SGLD noise for one step, shaped like the lanes' parameters (leading lanes axis)."""

    def __call__(self, lanes: Sequence[Lane], shapes: dict[str, torch.Size], step: int) -> Params: ...


class LaneNoise:
    """The sampler's noise: per lane, a generator seeded by `lane_seed`, one flat standard normal
    draw per step over the lane's parameters in the order of ``shapes``, cut into them."""

    def __init__(self, seed: int, device: str) -> None:
        self.seed, self.device = seed, device
        self.generators: dict[Lane, torch.Generator] = {}

    def __call__(self, lanes: Sequence[Lane], shapes: dict[str, torch.Size], step: int) -> Params:
        sizes = [math.prod(s) for s in shapes.values()]
        stacked = torch.empty(len(lanes), sum(sizes), device=self.device)  # (lanes, parameters of a lane)
        for row, lane in zip(stacked, lanes, strict=True):
            g = self.generators.get(lane)
            if g is None:
                g = self.generators[lane] = torch.Generator(device=self.device).manual_seed(lane_seed(self.seed, lane))
            torch.randn(row.shape, generator=g, device=self.device, out=row)  # drawn in place: no stacking copy
        parts = stacked.split(sizes, dim=1)
        return {k: part.reshape(len(lanes), *s) for (k, s), part in zip(shapes.items(), parts, strict=True)}


@dataclass(frozen=True)
class Frozen:
    """What stays at w* while a layer's heads move, for every sampler sequence.

    Attributes:
        inputs: ``(S, T, d_model)`` the layer's input.
        ln_inputs: ``(S, T, d_model)`` its attention's layer-normed input.
        others: ``(n_heads, S, T, d_model)`` the layer's attention output less head h's share
            ``o_h W_o[h]^T`` (the output projection's bias kept).
        mlp: ``(S, T, d_model)`` the parallel residual's ``mlp(ln2 x)`` (None for a sequential residual).
    """

    inputs: torch.Tensor
    ln_inputs: torch.Tensor
    others: torch.Tensor
    mlp: torch.Tensor | None


def frozen_layers(arch: Architecture, params: Params, ids: torch.Tensor) -> tuple[list[Frozen], float]:
    """Every layer's `Frozen` at w* on ``(S, T)`` ids, and the initial loss ``L(w*)`` (mean over every token)."""
    out = []
    with torch.no_grad():
        x = arch.embed(params, ids)
        for layer in range(arch.n_layers):
            w = arch.attention_weights(params, layer)
            ln_x = arch.ln_attn(params, layer, x)
            shares = arch.project(arch.heads_output(ln_x, w), w)  # (S, H, T, d_model)
            attn = shares.sum(dim=1) + w["b_o"]  # (S, T, d_model)
            others = (attn[:, None] - shares).transpose(0, 1).contiguous()  # (H, S, T, d_model)
            mlp = arch.mlp(params, layer, arch.ln_mlp(params, layer, x)) if arch.parallel_residual else None
            out.append(Frozen(x, ln_x, others, mlp))
            x = arch.finish_layer(params, layer, x, attn, mlp)
        init_loss = float(token_loss(arch.logits(params, x), ids).mean())
    return out, init_loss


def batch_order(sequences: int, sampler: SamplerSettings) -> list[torch.Tensor]:
    """The sequence indices of each batch of one pass, in devinterp's order (its ``DataLoader``, seeded
    with ``sampler.seed``); the sampler replays this pass."""
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(sampler.seed)
    # the DataLoader itself, not its sampler alone: its iterator draws a base seed from g before the permutation
    loader = DataLoader(
        TensorDataset(torch.arange(sequences)), batch_size=sampler.batch_size, shuffle=True, generator=g, drop_last=True
    )
    return [b[0].to(torch.int64) for b in loader]


@dataclass(frozen=True)
class Traces:
    """Each lane's per-step loss ``(lanes, burnin + draws)`` (before the step) and the initial loss."""

    lanes: list[Lane]
    trace: np.ndarray
    init_loss: float


def _sgld(
    loss: Callable[..., torch.Tensor],
    theta0: Params,
    lanes: list[Lane],
    batch_inputs: Callable[[torch.Tensor], tuple],
    in_dims: tuple,
    batches: list[torch.Tensor],
    sampler: SamplerSettings,
    noise: NoiseSource,
) -> np.ndarray:
    """Run SGLD on every lane of ``theta0`` (leading lanes axis); ``loss(theta, *batch_inputs(idx))`` is one
    lane's loss, batched by ``in_dims``. Returns ``(lanes, steps)`` the losses before each step.

    Raises:
        CheckpointError: a lane's loss is not finite (devinterp's "Chain failed").
    """
    step_fn = torch.func.vmap(torch.func.grad_and_value(loss), in_dims=(0, *in_dims))
    steps = sampler.burnin + sampler.draws
    shapes = {k: v.shape[1:] for k, v in theta0.items()}
    theta = {k: v.clone() for k, v in theta0.items()}
    trace = torch.empty(len(lanes), steps, dtype=torch.float64)
    half_lr, root_lr = 0.5 * sampler.lr, math.sqrt(sampler.lr)
    for t in range(steps):
        grads, losses = step_fn(theta, *batch_inputs(batches[t % len(batches)]))
        if not bool(torch.isfinite(losses).all()):
            bad = lanes[int((~torch.isfinite(losses)).nonzero()[0, 0])]
            raise CheckpointError(
                f"SGLD diverged (layer {bad.layer} head {bad.head} chain {bad.chain}: loss not finite at step {t}); "
                "lower --llc-lr or raise --llc-localization"
            )
        trace[:, t] = losses.detach().double().cpu()
        xi = noise(lanes, shapes, t)
        with torch.no_grad():
            for k, w in theta.items():
                # w - half_lr (n_beta g + gamma (w - w*)) + root_lr xi, operation by operation as written (the same
                # roundings), in place on the step's own temporaries
                drift = grads[k].mul_(sampler.n_beta).add_((w - theta0[k]).mul_(sampler.localization))
                theta[k] = w.sub_(drift.mul_(half_lr)).add_(xi[k].mul_(root_lr))
    return trace.numpy()


def _groups(lanes: list[Lane], per_group: int) -> list[list[Lane]]:
    return [lanes[i : i + per_group] for i in range(0, len(lanes), per_group)]


def _lanes_per_group(arch_vocab: int, T: int, sampler: SamplerSettings, limit: int | None) -> int:
    per_lane = sampler.batch_size * T * arch_vocab
    return max(1, (limit or MAX_LANE_LOGITS) // per_lane)


def sample_layer_heads(
    arch: Architecture,
    params: Params,
    frozen: Frozen,
    layer: int,
    ids: torch.Tensor,
    sampler: SamplerSettings,
    *,
    heads: Sequence[int] | None = None,
    noise: NoiseSource,
    max_lane_logits: int | None = None,
) -> tuple[list[Lane], np.ndarray]:
    """SGLD traces of every chain of ``heads`` (default: all) of ``layer``, each moving only its head.

    Returns:
        The lanes (head-major, then chain) and their ``(lanes, burnin + draws)`` traces.
    """
    heads = list(range(arch.n_heads)) if heads is None else list(heads)
    lanes = [Lane(layer, h, c) for h in heads for c in range(sampler.chains)]
    vocab = arch.logits(params, frozen.inputs[:1, :1]).shape[-1]
    batches = batch_order(len(ids), sampler)
    weights = arch.attention_weights(params, layer)

    def lane_loss(
        w: Params, others: torch.Tensor, x: torch.Tensor, ln_x: torch.Tensor, mlp: torch.Tensor | None, ids_b: torch.Tensor
    ) -> torch.Tensor:
        o = arch.heads_output(ln_x, w)  # (B, T, d_head)
        attn = others + arch.project(o, w)  # (B, T, d_model)
        x = arch.finish_layer(params, layer, x, attn, mlp)
        return arch.loss_from(params, layer + 1, x, ids_b)

    traces = []
    per_group = _lanes_per_group(vocab, ids.shape[1], sampler, max_lane_logits)
    for group in _groups(lanes, per_group):
        head_of = torch.as_tensor([lane.head for lane in group], device=ids.device)
        theta0 = {k: weights[k][head_of].detach().clone() for k in HEAD_KEYS}  # (lanes, ...)
        others = frozen.others[head_of]  # (lanes, S, T, d_model)

        def inputs(idx: torch.Tensor, others: torch.Tensor = others) -> tuple:
            idx = idx.to(ids.device)
            mlp = frozen.mlp[idx] if frozen.mlp is not None else None
            return others[:, idx], frozen.inputs[idx], frozen.ln_inputs[idx], mlp, ids[idx]

        traces.append(_sgld(lane_loss, theta0, group, inputs, (0, None, None, None, None), batches, sampler, noise))
    return lanes, np.concatenate(traces)


def sample_whole_model(
    arch: Architecture,
    params: Params,
    ids: torch.Tensor,
    sampler: SamplerSettings,
    *,
    noise: NoiseSource,
    max_lane_logits: int | None = None,
) -> tuple[list[Lane], np.ndarray]:
    """SGLD traces of every chain of the whole-model estimate (every parameter moves)."""
    lanes = [Lane(WHOLE_MODEL, WHOLE_MODEL, c) for c in range(sampler.chains)]
    batches = batch_order(len(ids), sampler)
    vocab = arch.logits(params, arch.embed(params, ids[:1, :1])).shape[-1]
    traces = []
    n_params = sum(v.numel() for v in params.values())
    per_group = min(_lanes_per_group(vocab, ids.shape[1], sampler, max_lane_logits), max(1, MAX_LANE_PARAMETERS // n_params))
    for group in _groups(lanes, per_group):
        theta0 = {k: v[None].expand(len(group), *v.shape).clone() for k, v in params.items()}
        traces.append(_sgld(arch.loss, theta0, group, lambda idx: (ids[idx.to(ids.device)],), (None,), batches, sampler, noise))
    return lanes, np.concatenate(traces)


def checkpoint_traces(
    model: torch.nn.Module,
    tokens: np.ndarray,
    sampler: SamplerSettings,
    *,
    device: str = "cpu",
    noise: NoiseSource | None = None,
    whole_model: bool = True,
    layers: Sequence[int] | None = None,
    on_layer: Callable[[int], None] | None = None,
    max_lane_logits: int | None = None,
) -> Traces:
    """Every head's (and the whole model's) SGLD traces at the model's weights, one layer at a time.

    Args:
        model: a transformers GPT-2 or GPT-NeoX causal LM (left as it is).
        tokens: ``(sequences, T)`` int64 token ids.
        sampler: the SGLD settings.
        device: where to sample.
        noise: the lanes' noise (default `LaneNoise` from ``sampler.seed``).
        whole_model: also the whole-model estimate (its lanes last).
        layers: only these layers' heads (default: every layer).
        on_layer: called with the number of estimates finished after each layer (the progress bar).
        max_lane_logits: bound on the logits of one vmap call (default `MAX_LANE_LOGITS`).

    Raises:
        CheckpointError: a lane diverged.
        UnknownArchitectureError: a family without a pure forward pass here.
    """
    arch = architecture(model)
    params = {k: v.to(device) for k, v in parameters(model).items()}
    if arch.rotary is not None:
        cos, sin = arch.rotary
        arch = dataclasses.replace(arch, rotary=(cos.to(device), sin.to(device)))
    ids = torch.tensor(np.asarray(tokens), dtype=torch.int64, device=device)  # a copy: the tokens may be read-only (a Ray task's)
    noise = noise if noise is not None else LaneNoise(sampler.seed, device)
    frozen, init_loss = frozen_layers(arch, params, ids)
    lanes: list[Lane] = []
    traces = []
    for layer in range(arch.n_layers) if layers is None else layers:
        got, trace = sample_layer_heads(
            arch, params, frozen[layer], layer, ids, sampler, noise=noise, max_lane_logits=max_lane_logits
        )
        lanes += got
        traces.append(trace)
        if on_layer is not None:
            on_layer(arch.n_heads)
    if whole_model:
        got, trace = sample_whole_model(arch, params, ids, sampler, noise=noise, max_lane_logits=max_lane_logits)
        lanes += got
        traces.append(trace)
        if on_layer is not None:
            on_layer(1)
    return Traces(lanes, np.concatenate(traces), init_loss)
