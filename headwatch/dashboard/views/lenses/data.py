"""What the Forward lenses compute before they draw: their CSVs' tidy rows (the two losses over training, the
layer-pair divergence at every step)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def loss_rows(run: str, steps: np.ndarray, eval_loss: np.ndarray, copy_loss: np.ndarray) -> pd.DataFrame:
    """Both losses as tidy rows (run, statistic, step, value), nats per token.

    Args:
        steps: the S steps.
        eval_loss, copy_loss: ``(S,)`` the loss on the evaluation text and on the induction probe's second copy.
    """
    n = len(steps)
    return pd.DataFrame(
        {
            "run": run,
            "statistic": ["eval_loss"] * n + ["probe_copy_loss"] * n,
            "step": np.concatenate([np.asarray(steps, dtype=np.int64)] * 2),
            "value": np.concatenate([np.asarray(eval_loss, dtype=np.float64), np.asarray(copy_loss, dtype=np.float64)]),
        }
    )


def pair_rows(run: str, jsd: np.ndarray, steps: list[int]) -> pd.DataFrame:
    """The layer-pair divergences ``jsd[step, a, b]`` as tidy rows (run, statistic, step, layer, other_layer, value).

    Args:
        jsd: ``(S, n_layers, n_layers)`` Jensen-Shannon divergence in bits.
        steps: the S steps.
    """
    s, n, _ = jsd.shape
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")  # (n, n) each: the row's layer, the column's
    return pd.DataFrame(
        {
            "run": run,
            "statistic": "jsd_bits",
            "step": np.repeat(np.asarray(steps, dtype=np.int64), n * n),
            "layer": np.tile(a.ravel(), s),
            "other_layer": np.tile(b.ravel(), s),
            "value": np.asarray(jsd, dtype=np.float64).ravel(),  # (S * n * n,), step-major as the rows
        }
    )
