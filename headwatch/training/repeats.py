"""Repeated spans: training sequences in which a span of tokens occurs a second time, later.

Induction heads complete a repeat: having seen ``... A B ...``, at a later ``A`` they attend
to the ``B`` after the first ``A`` and predict it. Natural text rewards that rarely (a
character's name, a refrain), so a small model trained on a few million bytes of it never
forms one (`docs/induction-recipe.md`). `insert_repeats` makes a chosen share of the training
sequences carry one repeat each:

- with probability ``share`` a sequence of ``T + 1`` tokens is picked (one draw per sequence);
- a length ``L`` uniform in ``min_span .. max_span`` (at most ``(T + 1) // 2``), a source start
  ``s`` uniform in ``0 .. T + 1 - 2L`` and a destination start ``d`` uniform in ``s + L .. T + 1 - L``;
- ``content="random"``: tokens ``s .. s+L-1`` become ``L`` bytes drawn uniformly from the whole
  vocabulary (0..255, as the induction probe's tokens are); ``content="text"``: they stay the
  text's own bytes;
- tokens ``d .. d+L-1`` are overwritten with a copy of tokens ``s .. s+L-1``;
- all of the above is done ``spans`` times in turn (each pass draws its rows, lengths and places
  anew, on the output of the pass before), so a sequence carries up to ``spans`` repeats; a later
  pass may overwrite part of an earlier pass's source or copy.

So from ``d + 1`` on, every token of the second copy is predictable from the first copy, and
only from it when the content is random. The draws come from their own generator, so a run with
``share = 0`` draws nothing and sees exactly the batches of the plain corpus.
"""

from __future__ import annotations

import torch

from headwatch.training.model import VOCAB_SIZE
from headwatch.training.settings import RepeatSettings


def insert_repeats(windows: torch.Tensor, repeats: RepeatSettings, *, generator: torch.Generator) -> torch.Tensor:
    """A copy of ``windows`` in which, per pass (``repeats.spans`` of them), a share of the rows gets one repeated span.

    Args:
        windows: ``(B, T + 1)`` int64 token windows (`training.train.sample_batch`).
        repeats: share, span lengths and content (`training.settings.RepeatSettings`).
        generator: draws which rows, the lengths, positions and random content.

    Returns:
        ``(B, T + 1)`` int64; rows not picked are unchanged. ``windows`` is not modified.
    """
    out = windows.clone()
    if repeats.share <= 0.0:
        return out
    for _ in range(repeats.spans):
        _one_pass(out, repeats, generator)
    return out


def _one_pass(out: torch.Tensor, repeats: RepeatSettings, generator: torch.Generator) -> None:
    """One repeat in a share of the rows of ``out``, in place (the draws of `insert_repeats`)."""
    n, width = out.shape
    picked = torch.rand(n, generator=generator) < repeats.share  # (B,)
    for row in torch.nonzero(picked).flatten().tolist():
        top = min(repeats.max_span, width // 2)
        length = int(torch.randint(min(repeats.min_span, top), top + 1, (1,), generator=generator))
        src = int(torch.randint(0, width - 2 * length + 1, (1,), generator=generator))
        dst = int(torch.randint(src + length, width - length + 1, (1,), generator=generator))
        if repeats.content == "random":
            out[row, src : src + length] = torch.randint(0, VOCAB_SIZE, (length,), generator=generator)
        out[row, dst : dst + length] = out[row, src : src + length].clone()
