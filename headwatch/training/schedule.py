"""When to save a checkpoint and how large each update's learning rate is.

Both follow Pythia's shape, shrunk to a run that fits a laptop:

- checkpoints: step 0 (the initialisation, saved before any update), then the
  powers of two 1, 2, 4, ..., 512, then every ``every`` steps up to the last step;
  optionally also every ``dense_every`` steps in a window ``dense_from .. dense_to``
  (where a phenomenon forms, e.g. induction heads: `docs/induction-recipe.md`);
- learning rate: linear warmup, then cosine decay to ``min_lr`` at the last step.

Update ``u`` (counting from 1) turns checkpoint ``u - 1`` into checkpoint ``u``.
"""

from __future__ import annotations

import math

# Pythia saves log-spaced checkpoints 1, 2, 4, ..., 512 before switching to an even
# spacing (every 1000 steps there). We keep the log-spaced part as is.
LOG_SPACED_UNTIL = 512


def checkpoint_steps(total_steps: int, *, every: int, dense_from: int = 0, dense_to: int = 0, dense_every: int = 0) -> list[int]:
    """The steps at which a run saves its weights, ascending.

    Args:
        total_steps: the number of updates in the run; the last step is always saved.
        every: the even spacing used after `LOG_SPACED_UNTIL`; the evenly spaced
            checkpoints are the multiples of ``every`` above 512.
        dense_from, dense_to, dense_every: a window of extra checkpoints, the multiples of
            ``dense_every`` from ``dense_from`` to ``dense_to`` (both included, cut at
            ``total_steps``); ``dense_every = 0`` (the default) adds none.

    Returns:
        ``[0, 1, 2, 4, ..., 512, k*every, ..., total_steps]`` cut at ``total_steps``
        (a run shorter than 512 steps keeps only the powers of two below it, plus its end),
        merged with the dense window.

    Raises:
        ValueError: ``total_steps < 1``, ``every < 1``, ``dense_every < 0``, or a dense
            window with ``dense_from > dense_to``.
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be at least 1, got {total_steps}")
    if every < 1:
        raise ValueError(f"every must be at least 1, got {every}")
    if dense_every < 0 or (dense_every and not 0 <= dense_from <= dense_to):
        raise ValueError(
            f"dense checkpoints need 0 <= dense_from <= dense_to and dense_every >= 0, got "
            f"{dense_from}..{dense_to} every {dense_every}"
        )
    steps = {0, total_steps}
    if dense_every:
        first = -(-dense_from // dense_every)  # ceil
        steps.update(k * dense_every for k in range(first, min(dense_to, total_steps) // dense_every + 1))
    power = 1
    while power <= min(LOG_SPACED_UNTIL, total_steps):
        steps.add(power)
        power *= 2
    first = LOG_SPACED_UNTIL // every + 1
    steps.update(k * every for k in range(first, total_steps // every + 1))
    return sorted(steps)


def learning_rate(update: int, *, max_lr: float, min_lr: float, warmup: int, total_steps: int) -> float:
    """Learning rate of update number ``update`` (1-based).

    Warmup rises linearly, ``max_lr * update / warmup`` for ``update <= warmup``, so the
    very first update already moves the weights (the rate is never 0). After it,
    ``min_lr + (max_lr - min_lr) * (1 + cos(pi * t)) / 2`` with
    ``t = (update - warmup) / (total_steps - warmup)`` running from 0 to 1.

    Raises:
        ValueError: ``update`` outside ``1..total_steps`` or ``warmup`` outside ``0..total_steps``.
    """
    if not 1 <= update <= total_steps:
        raise ValueError(f"update must be in 1..{total_steps}, got {update}")
    if not 0 <= warmup <= total_steps:
        raise ValueError(f"warmup must be in 0..{total_steps}, got {warmup}")
    if update <= warmup:
        return max_lr * update / warmup
    t = (update - warmup) / (total_steps - warmup)
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))
