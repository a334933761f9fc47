"""devinterp's SGLD noise stream for the batched sampler (`precompute.lenses.llc_sampler`), replayed from its
definition: the reference the tests drive the sampler with (tests/integration/test_llc_sampler.py: under it every
trace is devinterp's step for step), and a path of `benchmarks.llc_batched` (``batched-devinterp-noise``) that
separates what the noise's layout does from what the computation does."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from headwatch.families.forward import Params, architecture, parameters
from headwatch.precompute.lenses.llc import head_masks
from headwatch.precompute.lenses.llc_sampler import WHOLE_MODEL, Lane


class DevinterpNoise:
    """devinterp's noise stream, from its definition (``sample_single_chain`` and ``SGMCMC.step``): chain c
    seeds the global generator with ``seed + c``; each step draws, for every parameter tensor in the mask
    dict's order, a standard normal of the tensor's full shape; the mask keeps the head's entries."""

    def __init__(self, model: torch.nn.Module, seed: int) -> None:
        self.model, self.seed = model, seed
        self.arch = architecture(model)
        self.params = parameters(model)
        self.generators: dict[Lane, torch.Generator] = {}

    def names(self, lane: Lane) -> Sequence[str]:
        return list(self.params) if lane.layer == WHOLE_MODEL else list(head_masks(self.model, lane.layer, lane.head))

    def __call__(self, lanes: Sequence[Lane], shapes: dict[str, torch.Size], step: int) -> Params:
        out: dict[str, list[torch.Tensor]] = {k: [] for k in shapes}
        for lane in lanes:
            g = self.generators.setdefault(lane, torch.Generator().manual_seed(self.seed + lane.chain))
            drawn = {n: torch.normal(0.0, 1.0, size=self.params[n].shape, generator=g) for n in self.names(lane)}
            if lane.layer == WHOLE_MODEL:
                one = drawn
            else:
                full = {**{n: torch.zeros_like(v) for n, v in self.params.items()}, **drawn}
                one = self.arch.head(full, lane.layer, lane.head)
            for k in shapes:
                out[k].append(one[k])
        return {k: torch.stack(v) for k, v in out.items()}
