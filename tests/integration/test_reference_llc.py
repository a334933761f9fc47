"""The reference store's refined LLCs (``data/shakespeare-pythia-6x8``, ``--lenses llc``).

The shipped table must be what `scripts/reference-run.sh` makes: the default checkpoints
(`precompute.lenses.llc.default_llc_steps` of the store's steps), every head and the whole model at each,
under the sampler settings that were the defaults when it was made (2 chains x 8 draws, no burn-in; the
defaults are longer since `benchmarks.llc_agreement` measured these, docs/precompute.md) on the store's own
evaluation sequences. The whole-model row moves
every one of the model's parameters (counted here from its config) and a head's row its
3 d_head (d_model + 1) + d_model d_head; the
initial loss of every row of a step is the same (the same weights, the same batches), and equals the
forward lens's loss on the full evaluation set to within the spread of 8 of its 32 sequences.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from analysis.store import open_store, read_table
from analysis.store.format import EVAL_LOSS, LLC
from precompute.lenses.llc import default_llc_steps
from precompute.settings import SamplerSettings
from tests.conftest import require_table

STORE = Path(
    os.environ.get("HEADWATCH_REFERENCE_STORE") or Path(__file__).resolve().parents[2] / "data" / "shakespeare-pythia-6x8"
)


SHIPPED_SAMPLER = SamplerSettings(chains=2, draws=8, burnin=0)  # scripts/reference-run.sh passes these


def whole_model_parameters(config: dict) -> int:
    """A GPT-NeoX's parameters from its config: untied embedding and unembedding (V d each); per layer two
    layer norms (4 d), Q, K, V and the output projection with biases (4 d^2 + 4 d), the MLP (2 d i + i + d);
    the final layer norm (2 d)."""
    v, d, i, n = config["vocab_size"], config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    assert not config.get("tie_word_embeddings")
    return 2 * v * d + n * (4 * d + 4 * d * d + 4 * d + 2 * d * i + i + d) + 2 * d


@pytest.fixture(scope="module")
def store():
    opened = open_store(STORE)
    require_table(
        opened.has(LLC),
        STORE,
        f"{STORE} has no llc.parquet: add it with `python -m precompute --source RUN --out STORE --lenses llc`",
    )
    return opened


def test_the_shipped_estimates_are_the_default_run(store) -> None:
    table = read_table(store.path, LLC).to_pandas()
    steps = default_llc_steps([int(s) for s in store.steps])
    assert sorted(table["step"].unique()) == steps == store.meta.llc["steps"]
    assert store.meta.llc["sampler"] == SHIPPED_SAMPLER.as_meta()
    n_layers, n_heads, d_model, d_head = store.n_layers, store.n_heads, int(store.d_model), store.d_head
    for _step, rows in table.groupby("step"):
        assert len(rows) == n_layers * n_heads + 1
        whole = rows[rows["layer"] == -1]
        assert len(whole) == 1 and int(whole["params"].iloc[0]) == whole_model_parameters(store.meta.model.config)
        assert (rows[rows["layer"] >= 0]["params"] == 3 * d_head * (d_model + 1) + d_model * d_head).all()
        assert np.allclose(rows["init_loss"], rows["init_loss"].iloc[0], rtol=0, atol=1e-6)
        assert np.isfinite(rows[["llc", "llc_std", "init_loss"]].to_numpy()).all()


def test_the_initial_loss_is_near_the_forward_lenss_loss(store) -> None:
    table = read_table(store.path, LLC).to_pandas()
    loss = dict(zip((int(s) for s in store.steps), store.dense(EVAL_LOSS, "loss"), strict=True))
    for step, rows in table.groupby("step"):
        assert abs(rows["init_loss"].iloc[0] - loss[int(step)]) < 0.15 * loss[int(step)], step


def test_trained_heads_have_positive_refined_llcs(store) -> None:
    rllc = store.dense(LLC, "llc")
    last = rllc[-1]
    assert np.isfinite(last).all()
    assert (last > 0).mean() > 0.9  # at the end of training the checkpoint is near a minimum: the loss rises
