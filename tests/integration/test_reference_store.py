"""The committed reference store (``data/shakespeare-pythia-6x8``) is a real, healthy run.

It is what the dashboard opens by default, so these checks guard the science, not the
code: training worked (validation loss at least halved), every checkpoint is a
distinct training state, and step 0 is the random-matrix initialisation while the
last checkpoint is far from it.

Random-matrix reference: at step 0 W_Q and W_K of every head have i.i.d. N(0, s0^2)
entries, s0^2 = 2 / (5 d_model). The d_head non-zero eigenvalues lambda_k = s_k^2 of
W_QK W_QK^T, scaled by (d_model s0^2)^2, follow the free product of two
Marchenko-Pastur laws of ratio c = d_head / d_model: first moment 1, second moment
1 + 2c. With x = lambda_k / mean_k(lambda) (no dependence on s0), the pooled mean of
x^2 over the 48 heads of this size (c = 1/8) has, over 100 independent draws of
random weights (numpy, dense SVD of the QR core): mean 1.258 (a finite-size excess of
0.008 over 1.25), standard deviation 0.0023, range 1.253 to 1.264. The pooled first
moment has mean 1.000 and standard deviation 0.003.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.layers import LAYERS
from tests.conftest import require_table

STORE = Path(__file__).resolve().parents[2] / "data" / "shakespeare-pythia-6x8"
TRAINING_KEYS = {"tokens_per_step", "config", "seed", "corpus", "wall_time_s", "device", "losses"}

# Step 0 must sit within this of 1 + 2c (about 20 null standard deviations).
STEP0_TOLERANCE = 0.05
# The last checkpoint must exceed 1 + 2c by at least this: five times the step-0
# acceptance band, about 100 null standard deviations. A trained head concentrates
# its spectrum on a few directions, which raises the second moment of x.
FINAL_MIN_EXCESS = 0.25


@pytest.fixture(scope="module")
def store():
    if not (STORE / "meta.json").is_file():
        pytest.fail(f"{STORE} is missing: regenerate it with `bash scripts/reference-run.sh`")
    return open_store(STORE)


def pooled_second_moment(sv: np.ndarray) -> float:
    """Mean over heads of mean_k x_k^2, x_k = lambda_k / mean(lambda), from ``sv`` of shape (layer, head, k)."""
    lam = sv.astype(np.float64) ** 2
    x = lam / lam.mean(axis=-1, keepdims=True)
    return float((x**2).mean(axis=-1).mean())


def per_head_second_moment(sv: np.ndarray) -> np.ndarray:
    lam = sv.astype(np.float64) ** 2
    x = lam / lam.mean(axis=-1, keepdims=True)
    return (x**2).mean(axis=-1).ravel()


def test_size_and_schedule(store):
    assert store.n_layers * store.n_heads >= 48
    steps = store.steps.tolist()
    assert len(steps) >= 40
    log_part = [0] + [2**i for i in range(10)]  # 0, 1, 2, 4, ..., 512
    assert steps[: len(log_part)] == log_part
    assert len(set(np.diff(steps[len(log_part) - 1 :]).tolist())) == 1  # evenly spaced after 512
    size = sum(f.stat().st_size for f in STORE.rglob("*") if f.is_file())
    assert size < 20 * 2**20, f"store is {size / 2**20:.1f} MiB; the limit is 20 MiB"


def test_no_duplicate_checkpoints(store):
    ckpts = store.meta.checkpoints
    assert [c.step for c in ckpts] == store.steps.tolist()
    assert all(c.duplicate_of is None and not c.shared_files for c in ckpts)
    assert len({c.sha256 for c in ckpts}) == len(ckpts)


def test_training_record(store):
    training = store.meta.training
    assert set(training) == TRAINING_KEYS
    assert len(training["corpus"]["sha256"]) == 64
    assert training["corpus"]["n_train_tokens"] > 4_000_000 and training["corpus"]["n_val_tokens"] > 100_000
    assert training["config"]["model"]["n_layers"] == store.n_layers
    assert training["config"]["model"]["d_head"] == store.d_head
    assert 0 < training["wall_time_s"] < 90 * 60
    tokens = [c.tokens for c in store.meta.checkpoints]
    assert tokens == [s * training["tokens_per_step"] for s in store.steps.tolist()]


def test_validation_loss_at_least_halved(store):
    losses = store.meta.training["losses"]
    assert [row["step"] for row in losses] == store.steps.tolist()
    first, last = losses[0], losses[-1]
    # the untrained model predicts bytes almost uniformly: about ln 256 = 5.55 nats
    assert abs(first["val_loss"] - math.log(256)) < 0.3
    assert last["val_loss"] <= 0.5 * first["val_loss"]
    assert all(np.isfinite([row["train_loss"] for row in losses] + [row["val_loss"] for row in losses]))


def test_step0_matches_the_random_matrix_reference(store):
    sv0 = store.array("sv")[0]  # (layer, head, k) at step 0
    c = store.d_head / store.d_model
    assert pooled_second_moment(sv0) == pytest.approx(1 + 2 * c, abs=STEP0_TOLERANCE)
    # first moment, which does depend on the init scale s0^2 = 2 / (5 d_model)
    d_model = store.d_model
    scale = (d_model * 2 / (5 * d_model)) ** 2
    assert float((sv0.astype(np.float64) ** 2).mean()) / scale == pytest.approx(1.0, abs=0.03)


def test_final_checkpoint_departs_from_the_reference(store):
    sv = store.array("sv")
    c = store.d_head / store.d_model
    final = pooled_second_moment(sv[-1])
    assert final - (1 + 2 * c) >= FINAL_MIN_EXCESS, f"pooled E[x^2] at the last step is only {final:.3f}"
    # and not through a few outliers: most heads left the step-0 range
    step0_max = per_head_second_moment(sv[0]).max()
    assert np.mean(per_head_second_moment(sv[-1]) > step0_max) >= 0.75


def test_block_weights_start_on_marchenko_pastur_and_leave_it():
    """Whole-layer matrices (``layers.parquet``): at step 0 every block weight is a random matrix, on its
    Marchenko-Pastur law (KL on the law's 8 quantile bins below 0.01, at most one value past the upper
    edge: a Gaussian matrix's largest value fluctuates around the edge); by the last checkpoint every
    weight has several values above the edge (measured on the regenerated run: 10 to 29 each).
    Stores made before the table existed skip this: `bash scripts/reference-run.sh` adds it."""
    store = open_store(STORE)
    require_table(store.has(LAYERS), STORE, "no layers.parquet; regenerate the store with bash scripts/reference-run.sh")
    table = store.frame(LAYERS, columns=["mp_kl", "mp_spikes", "alpha"])
    assert set(table["role"]) == {"attn_qkv", "attn_out", "mlp_in", "mlp_out"}
    first = table[table["step"] == store.steps[0]]
    last = table[table["step"] == store.steps[-1]]
    assert len(first) == len(last) == 4 * store.n_layers
    assert (first["mp_kl"] < 0.01).all() and (first["mp_spikes"] <= 1).all()
    assert (last["mp_spikes"] >= 5).all()
    assert (last["alpha"] < first["alpha"].median()).all()  # heavier tails than at initialisation
