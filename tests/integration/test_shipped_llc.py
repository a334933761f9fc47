"""The shipped stores' refined LLCs (``--lenses llc``): every one made under today's sampler defaults, with its chains.

Every store under ``data/`` with an ``llc.parquet`` must hold what `scripts/induction-runs.sh` makes: the
checkpoints listed in ``meta.json``, every head and the whole model at each, under the default sampler settings
(`precompute.settings.SamplerSettings`: 4 chains x (48 burn-in + 96 draws), the setting that ranks heads as the
paper's 4 x 200 chains do, docs/precompute.md), and every estimate's chains in ``llc_chains.parquet`` with its
flag (`analysis.llc.diagnostics`). An estimate under other settings, or without diagnostics, is not shipped (the
plain-text runs' 2 x 8 estimates were removed on 2026-11-26 for that reason).

The whole-model row moves every one of the model's parameters (counted here from its config, for GPT-2 and
GPT-NeoX) and a head's row its 3 d_head (d_model + 1) + d_model d_head; the initial loss of every row of a step and
distribution is the same (the same weights, the same batches), and on the held-out text equals the forward lens's loss
on the full evaluation set to within the spread of 8 of its 32 sequences. Stores with estimates under several
distributions (``--llc-data``) are checked under each.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from headwatch.analysis.llc.diagnostics import store_flags
from headwatch.analysis.store import open_store, read_table
from headwatch.analysis.store.lenses.attention import EVAL_LOSS
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, SamplerSettings, default_llc_data
from tests.conftest import SHIPPED_DATA

STORES = sorted(p for p in SHIPPED_DATA.iterdir() if (p / "meta.json").is_file())
WITH_LLC = [p for p in STORES if (p / LLC.file).is_file()]


def whole_model_parameters(config: dict) -> int:
    """The model's parameters from its config, each tensor once.

    GPT-2: token and position embeddings (V d + P d; the unembedding is the token embedding); per layer two layer
    norms (4 d), the fused Q, K, V with biases (3 d^2 + 3 d), the output projection (d^2 + d), the MLP (2 d i + i +
    d); the final layer norm (2 d). GPT-NeoX: untied embedding and unembedding (2 V d); per layer two layer norms
    (4 d), Q, K, V and the output projection with biases (4 d^2 + 4 d), the MLP (2 d i + i + d); the final layer
    norm (2 d).
    """
    if config["model_type"] == "gpt2":
        v, p, d, n = config["vocab_size"], config["n_positions"], config["n_embd"], config["n_layer"]
        i = config.get("n_inner") or 4 * d
        assert config.get("tie_word_embeddings", True)
        return v * d + p * d + n * (4 * d + 4 * d * d + 4 * d + 2 * d * i + i + d) + 2 * d
    v, d, i, n = config["vocab_size"], config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    assert not config.get("tie_word_embeddings")
    return 2 * v * d + n * (4 * d + 4 * d * d + 4 * d + 2 * d * i + i + d) + 2 * d


def test_the_induction_runs_ship_refined_llcs_and_no_other_store_ships_older_ones() -> None:
    assert sorted(p.name for p in WITH_LLC) == sorted(p.name for p in STORES if p.name.startswith("induction-"))
    for path in STORES:  # a store without the table says so in meta.json too
        assert (open_store(path).meta.llc is not None) == (path in WITH_LLC), path.name


@pytest.fixture(scope="module", params=WITH_LLC, ids=[p.name for p in WITH_LLC])
def store(request):
    return open_store(request.param)


def test_the_shipped_estimates_are_the_defaults_at_the_listed_checkpoints(store) -> None:
    stored = read_table(store.path, LLC)
    assert stored is not None
    table = stored.to_pandas()
    assert sorted(table["step"].unique()) == store.meta.llc["steps"]
    assert set(store.meta.llc["steps"]) <= {int(s) for s in store.steps}
    assert store.meta.llc["sampler"] == SamplerSettings().as_meta()
    n_layers, n_heads, d_model, d_head = store.n_layers, store.n_heads, int(store.d_model), store.d_head
    for _key, rows in table.groupby(["step", LLC_DATA_COLUMN] if LLC_DATA_COLUMN in table else ["step"]):
        assert len(rows) == n_layers * n_heads + 1
        whole = rows[rows["layer"] == -1]
        assert len(whole) == 1 and int(whole["params"].iloc[0]) == whole_model_parameters(store.meta.model.config)
        assert (rows[rows["layer"] >= 0]["params"] == 3 * d_head * (d_model + 1) + d_model * d_head).all()
        assert np.allclose(rows["init_loss"], rows["init_loss"].iloc[0], rtol=0, atol=1e-6)
        assert np.isfinite(rows[["llc", "llc_std", "init_loss"]].to_numpy()).all()


def test_every_estimate_carries_its_chains_and_a_flag(store) -> None:
    flags = store_flags(store)
    assert flags is not None, "no llc_chains.parquet"
    heads, model = flags
    listed = np.isin(store.steps, store.meta.llc["steps"])
    assert (heads[listed] != "").all() and (heads[~listed] == "").all()
    assert (model[listed] != "").all() and (model[~listed] == "").all()
    counts = Counter(heads[listed].ravel().tolist())
    assert "too few draws" not in counts and "diverged" not in counts, counts
    assert counts["converged"] >= 0.8 * heads[listed].size, counts  # 86 to 91% on the four runs (2026-11-26)


def by_distribution(store, table):
    """(distribution, its rows of llc.parquet, its flags) for every distribution the store's estimates were taken on
    (a store without the ``data`` column: its text estimates)."""
    if LLC_DATA_COLUMN not in table:
        yield None, table, store_flags(store)
        return
    for data, rows in table.groupby(LLC_DATA_COLUMN):
        yield data, rows, store_flags(store, data=str(data))


def test_no_negative_estimate_is_flagged_converged(store) -> None:
    """Issue 62: under every distribution, every negative estimate (read from llc.parquet with pyarrow, not through
    the store's reader) is flagged "negative", every positive one keeps a flag of its chains' traces."""
    stored = read_table(store.path, LLC)
    assert stored is not None
    index = {int(s): t for t, s in enumerate(store.steps)}
    for data, table, flags in by_distribution(store, stored.to_pandas()):
        assert flags is not None, data
        heads, model = flags
        for r in table.itertuples(index=False):
            got = model[index[r.step]] if r.layer == -1 else heads[index[r.step], r.layer, r.head]
            assert (got == "negative") == (r.llc < 0), (data, r.step, r.layer, r.head, r.llc, got)


def test_the_shipped_stores_negative_estimates_are_all_flagged_negative() -> None:
    """Issue 62 over every shipped store and distribution: as many estimates flagged "negative" as llc.parquet holds
    negative values (heads and whole model, counted with pandas), and the shipped stores hold some (the GPU-built
    stores of 2026-11-27 held 124 negative head estimates and 6 whole-model ones on text, 114 of them flagged
    converged before issue 62)."""
    negative = flagged = 0
    for path in WITH_LLC:
        stored = read_table(path, LLC)
        assert stored is not None
        for data, table, flags in by_distribution(open_store(path), stored.to_pandas()):
            assert flags is not None, (path.name, data)
            heads, model = flags
            negative += int((table["llc"] < 0).sum())
            flagged += int((heads == "negative").sum() + (model == "negative").sum())
    assert negative > 0
    assert flagged == negative


def test_no_rllc_rise_starts_or_ends_at_a_negative_estimate(store) -> None:
    """The Timeline's rLLC rises (`analysis.findings.events.rllc_rises`) read only estimates that are learning
    coefficients: none from or to a negative one (held before issue 62 too, by the values' sign)."""
    from headwatch.analysis.findings.events import rllc_rises

    stored = read_table(store.path, LLC)
    assert stored is not None
    default = default_llc_data(stored)  # the distribution a link leaves unnamed
    frame = stored.to_pandas()
    if LLC_DATA_COLUMN not in frame:
        frame[LLC_DATA_COLUMN] = default
    table = frame.set_index([LLC_DATA_COLUMN, "step", "layer", "head"])["llc"]
    steps = [int(s) for s in store.steps_with(LLC)]
    rises = rllc_rises(store)
    assert rises
    for event in rises:
        query = dict(event.query)
        data = query.get("data", default)
        layer, head = (int(v) for v in str(query["trace"])[1:].split("H"))
        before = steps[steps.index(event.step) - 1]
        assert table[(data, before, layer, head)] >= 0 and table[(data, event.step, layer, head)] >= 0, event


def test_the_initial_loss_is_near_the_forward_lenss_loss(store) -> None:
    stored = read_table(store.path, LLC)
    assert stored is not None
    table = stored.to_pandas()
    if LLC_DATA_COLUMN in table:  # the forward lens's loss is on the evaluation text: the estimates on it
        table = table[table[LLC_DATA_COLUMN] == "text"]
    assert len(table)
    loss = dict(zip((int(s) for s in store.steps), store.dense(EVAL_LOSS, "loss"), strict=True))
    for step, rows in table.groupby("step"):
        assert abs(rows["init_loss"].iloc[0] - loss[int(step)]) < 0.15 * loss[int(step)], step


def test_trained_heads_have_positive_refined_llcs(store) -> None:
    last = store.dense(LLC, "llc")[-1]
    assert np.isfinite(last).all()
    assert (last > 0).mean() > 0.9  # at the end of training the checkpoint is near a minimum: the loss rises
