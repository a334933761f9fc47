"""The reference store's forward lens (``data/shakespeare-pythia-6x8``, `--lenses attention`).

Step 0 is the initialisation: query and key weights of std sqrt(2/(5 d_model)), so the
attention scores are small and every head attends almost uniformly over its causal
prefix. The uniform values are computed here from their definitions (T = 256 positions,
R = 128): entropy mean_i log2 i = 6.578 bits (an attention row can only lose entropy by
departing from uniform, so the heads sit just below it), span (T - 1)/4 = 63.75, sink
mean_i 1/i, previous-token mean_{i>1} 1/i, induction mean_k 1/(R + k). The layers'
offset distributions are then all nearly the same: JSD near 0. The loss at step 0 is
about ln 256 (uniform over bytes); training at least halves it.

Another store can be checked with HEADWATCH_REFERENCE_STORE=PATH. A store without the
forward tables is skipped with the command that adds them.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.attention import ATTENTION, EVAL_LOSS, LAYER_DIVERGENCE
from tests.conftest import require_table

STORE = Path(
    os.environ.get("HEADWATCH_REFERENCE_STORE") or Path(__file__).resolve().parents[2] / "data" / "shakespeare-pythia-6x8"
)


@pytest.fixture(scope="module")
def store():
    opened = open_store(STORE)
    require_table(
        opened.has(ATTENTION), STORE, f"{STORE} has no forward-lens tables: regenerate it with `bash scripts/reference-run.sh`"
    )
    return opened


def test_step0_attends_almost_uniformly(store) -> None:
    info = store.meta.forward
    t, r = info.seq_len, info.induction_repeat
    assert (t, r, info.n_sequences) == (256, 128, 32)
    i = np.arange(1, t + 1, dtype=np.float64)
    uniform = {
        "entropy": np.mean(np.log2(i)),
        "entropy_std": np.std(np.log2(i)),
        "span": np.mean((i - 1) / 2),
        "sink": np.mean(1 / i),
        "prev_token": np.mean(1 / i[1:]),
        "induction": np.mean(1 / (r + np.arange(1, r))),
    }
    assert store.steps[0] == 0
    entropy = store.dense(ATTENTION, "entropy")[0]
    assert (entropy <= uniform["entropy"] + 1e-9).all()  # uniform is the maximum
    assert (entropy > uniform["entropy"] - 0.2).all()
    for name in ("entropy_std", "span"):
        np.testing.assert_allclose(store.dense(ATTENTION, name)[0], uniform[name], rtol=0.05, err_msg=name)
    for name in ("sink", "prev_token", "induction"):
        np.testing.assert_allclose(store.dense(ATTENTION, name)[0], uniform[name], rtol=0.2, err_msg=name)
    assert np.nanmax(store.dense(LAYER_DIVERGENCE, "jsd")[0]) < 0.005
    assert abs(store.dense(EVAL_LOSS, "loss")[0] - math.log(256)) < 0.15


def test_training_sharpens_attention_and_lowers_the_loss(store) -> None:
    loss = store.dense(EVAL_LOSS, "loss")
    assert np.isfinite(loss).all() and loss[-1] < 0.5 * loss[0]
    entropy = store.dense(ATTENTION, "entropy")
    assert np.nanmean(entropy[-1]) < np.nanmean(entropy[0]) - 1.0  # at least a bit sharper on average
    assert np.nanmax(store.dense(ATTENTION, "prev_token")[-1]) > 0.5  # some head attends mostly to i - 1
