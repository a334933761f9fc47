"""The shipped induction-head runs (``data/induction-*``, `scripts/induction-runs.sh`): issue 27's bar, on the stores.

The recipe (`docs/induction-recipe.md`, "The recipe"): 2-layer GPT-2s of three widths on
Shakespeare bytes at context 64, every training window carrying two repeats of random bytes. What
a researcher should find in them, checked here against values computed from definitions:

- step 0 is the initialisation: attention uniform over the causal prefix (entropy mean_i log2 i,
  induction mean_k 1/(R + k) with T = 64, R = 32), and the W_QK spectra on the free product of two
  Marchenko-Pastur laws (pooled E[x^2] against the same statistic of numpy-drawn Gaussian weights of
  each store's shape: GPT-2 draws W_Q and W_K i.i.d. N(0, 0.02^2));
- in every run of the middle size (d_model 128) or larger: a layer-1 head whose induction score is
  at least 0.3 at the last checkpoint and at most twice uniform at step 0, a layer-0 head whose
  previous-token score is at least 0.5, and the loss on the probe's second copy at most half as large
  at the end of the window in which the induction score rises as at its start;
- the ladder: three sizes whose parameter counts span at least 10x under one recipe and one data
  order (the seed), the middle size twice (two seeds).
"""

from __future__ import annotations

import numpy as np
import pytest

from headwatch.analysis.attention.patterns import uniform_induction_baseline
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.attention import ATTENTION, EVAL_LOSS
from tests.conftest import SHIPPED_DATA

RUNS = sorted(p for p in SHIPPED_DATA.glob("induction-*") if (p / "meta.json").is_file())
MIDDLE_D_MODEL = 128


def recipe(store) -> dict:
    """run.json's config less what differs between the runs of one ladder (shape and seed; the transformers config
    repeats the shape; the software it ran on)."""
    config = dict(store.meta.training["config"])
    config["model"] = {k: v for k, v in config["model"].items() if k not in ("n_heads", "d_model", "d_mlp", "d_head")}
    config["transformers_config"] = {
        k: v for k, v in config["transformers_config"].items() if k not in ("n_head", "n_embd", "n_inner")
    }
    config.pop("seed")
    config.pop("software", None)  # the torch the run was trained with (CPU-built and GPU-built rungs), not the recipe
    return config


def n_params(store) -> int:
    m = store.meta.training["config"]["model"]
    d, layers, context = m["d_model"], m["n_layers"], m["context"]
    per_layer = 4 * d * d + 4 * d + 2 * d * m["d_mlp"] + m["d_mlp"] + d + 4 * d  # attention, MLP, two LayerNorms
    return 256 * d + context * d + layers * per_layer + 2 * d  # tied embeddings, positions, final LayerNorm


@pytest.fixture(scope="module", params=RUNS, ids=[p.name for p in RUNS])
def store(request):
    return open_store(request.param)


def test_the_runs_are_shipped():
    assert RUNS, "no data/induction-* store: make them with `bash scripts/induction-runs.sh`"


def test_step0_attends_uniformly_and_its_spectra_are_random(store):
    info = store.meta.forward
    t, r = info.seq_len, info.induction_repeat
    assert (t, r) == (64, 32) and store.steps[0] == 0
    entropy = store.dense(ATTENTION, "entropy")[0]
    uniform = np.mean(np.log2(np.arange(1, t + 1)))
    assert (entropy <= uniform + 1e-9).all() and (entropy > uniform - 0.05).all()
    np.testing.assert_allclose(store.dense(ATTENTION, "induction")[0], uniform_induction_baseline(r), rtol=0.2)
    # W_QK: the pooled second moment of x = lambda / mean(lambda) against 200 draws of Gaussian W_Q, W_K.
    # W_Q W_K^T = U_q (R_q R_k^T) U_k^T (QR factors): its d_head singular values are those of R_q R_k^T
    sv0 = store.array("sv")[0].astype(np.float64)
    x = sv0**2 / (sv0**2).mean(axis=-1, keepdims=True)
    pooled = float((x**2).mean())
    rng = np.random.default_rng(0)
    heads, d_model, d_head = store.n_layers * store.n_heads, store.d_model, store.d_head
    null = []
    for _ in range(200):
        q, k = rng.standard_normal((2, heads, d_model, d_head))
        r_q, r_k = np.linalg.qr(q, mode="r"), np.linalg.qr(k, mode="r")
        lam = np.linalg.svd(r_q @ r_k.transpose(0, 2, 1), compute_uv=False) ** 2
        xs = lam / lam.mean(axis=-1, keepdims=True)
        null.append((xs**2).mean())
    lo, hi = np.quantile(null, [0.0005, 0.9995])
    assert lo - 0.01 <= pooled <= hi + 0.01, f"E[x^2] = {pooled:.4f}; random heads give {lo:.4f} .. {hi:.4f}"


def test_induction_and_previous_token_heads_form(store):
    if store.d_model < MIDDLE_D_MODEL:
        pytest.skip(f"d_model {store.d_model}: the bar is for the middle size and larger")
    ind = store.dense(ATTENTION, "induction")  # (step, layer, head)
    prev = store.dense(ATTENTION, "prev_token")
    uniform = uniform_induction_baseline(store.meta.forward.induction_repeat)
    layer, head = np.unravel_index(np.nanargmax(ind[-1]), ind[-1].shape)
    assert ind[-1, layer, head] >= 0.3 and ind[0, layer, head] <= 2 * uniform
    assert layer >= 1, "an induction head needs an earlier layer to find the previous token"
    assert np.nanmax(prev[-1, :layer]) >= 0.5  # a previous-token head in an earlier layer


def test_the_copy_loss_falls_while_the_induction_score_rises(store):
    if store.d_model < MIDDLE_D_MODEL:
        pytest.skip(f"d_model {store.d_model}: the bar is for the middle size and larger")
    steps = store.steps
    best = np.nanmax(store.dense(ATTENTION, "induction").reshape(len(steps), -1), axis=1)
    copy = store.dense(EVAL_LOSS, "probe_copy_loss")
    # the rise: from the last checkpoint at 10% of the way from step 0's score to the final one, to the first at 90%
    lo, hi = best[0] + 0.1 * (best[-1] - best[0]), best[0] + 0.9 * (best[-1] - best[0])
    end = int(np.argmax(best >= hi))
    start = int(np.flatnonzero(best[:end] <= lo)[-1])
    assert steps[end] > steps[start]
    assert copy[end] <= 0.5 * copy[start], (steps[start], steps[end], copy[start], copy[end])


def test_one_recipe_three_sizes_and_two_seeds():
    stores = [open_store(p) for p in RUNS]
    assert len({s.d_model for s in stores}) >= 3
    recipes = [recipe(s) for s in stores]
    assert all(r == recipes[0] for r in recipes), "every run of the ladder is trained under one recipe"
    sizes = [n_params(s) for s in stores]
    assert max(sizes) >= 10 * min(sizes)
    # one data order: the three sizes share a seed (the batches and repeats do not depend on the model)
    by_seed: dict[int, set[int]] = {}
    for s in stores:
        by_seed.setdefault(s.meta.training["config"]["seed"], set()).add(s.d_model)
    assert max(len(sizes) for sizes in by_seed.values()) >= 3
    middle = [s for s in stores if s.d_model == MIDDLE_D_MODEL]
    assert len({s.meta.training["config"]["seed"] for s in middle}) >= 2
    assert all(s.meta.training["config"]["repeats"]["share"] == 1.0 for s in stores)  # stated, not hidden
