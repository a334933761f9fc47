"""The Heads table shows one kind of row at a time and says what each row is measured against (issue 25).

Through AppTest. Before: W_QK and W_OV rows were interleaved with ranks computed within each kind (two
"rank 1" rows), OV rows read ``None`` under "÷ random head", and a forward-lens statistic showed
``matrix = qk``, crossings columns that do not apply and a caption blaming "the run has no step 0" on
a run that has step 0. Every expected number is computed here: the references from
`analysis.rmt.references` with the init scale of the chosen matrix's step-0 heads, the uniform-attention
values from their formulas (analysis/store/format.py ATTENTION_COLUMN_DOCS) by plain loops.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.synthetic_store import add_synthetic_forward
from headwatch.analysis.store import open_store
from tests.app.conftest import notices, open_page, serve_only

HEADS = "pages/heads_table.py"


def _table(at):
    return next(d.value for d in at.dataframe if d.proto.id.endswith("-heads_table"))


def _ranks_over_all_heads(table) -> None:
    """rank = 1 + the number of heads with a larger value, over every row of the table (one ranking)."""
    v = table["value"].to_numpy()
    assert table["rank"].tolist() == [1 + int((v > x).sum()) for x in v]
    assert (table["rank"] == 1).sum() == (v == v.max()).sum()


def _caption(at) -> str:
    return " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("matrix", ["qk", "ov"])
def test_one_matrix_per_table_ranked_once_against_its_own_reference(app_env, matrix):
    from headwatch.analysis.rmt.references import gaussian_references, init_sigma

    store = open_store(app_env)
    n = store.n_layers * store.n_heads
    at = open_page(HEADS, {"stat": "stable_rank", "matrix": matrix})
    assert not notices(at)
    table = _table(at)
    assert len(table) == n and set(table["matrix"]) == {matrix}
    _ranks_over_all_heads(table)  # one rank 1 (it was one per kind of matrix)
    v = store.array("stable_rank", matrix=matrix)[-1]
    for row in table.itertuples(index=False):
        assert row.value == pytest.approx(v[row.layer, row.head])
    sigma0 = init_sigma(store.array("std", matrix=matrix)[0].ravel(), store.d_head)
    ref = gaussian_references(store.d_model, store.d_head, sigma0)[0]["stable_rank"]
    assert table["over reference"].notna().all()
    np.testing.assert_allclose(table["over reference"], table["value"] / ref.mean)
    words = "W_O,h, W_V,h" if matrix == "ov" else "W_Q, W_K"
    assert words in _caption(at)
    assert all(f"matrix={matrix}" in link for link in table["open"])  # a row opens its own matrix


def test_a_scaled_ov_statistic_uses_the_ov_init_scale(app_env):
    from headwatch.analysis.rmt.references import gaussian_references, init_sigma

    store = open_store(app_env)
    at = open_page(HEADS, {"stat": "std", "matrix": "ov"})
    table = _table(at)
    sigma0 = init_sigma(store.array("std", matrix="ov")[0].ravel(), store.d_head)
    ref = gaussian_references(store.d_model, store.d_head, sigma0)[0]["std"]
    np.testing.assert_allclose(table["over reference"], table["value"] / ref.mean)


def test_a_statistic_without_a_reference_does_not_blame_step_0(app_env):
    assert int(open_store(app_env).steps[0]) == 0
    at = open_page(HEADS, {"stat": "sym_frac"})
    assert "over reference" not in _table(at).columns
    text = _caption(at)
    assert "no step 0" not in text and "no random-head reference" in text, text


@pytest.fixture(scope="module")
def forward_store(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("forward-heads") / "tiny-run"
    shutil.copytree(store_path, path)
    return add_synthetic_forward(path)


def _uniform(stat: str, t: int, r: int) -> float:
    """Uniform causal attention over T positions, by loops over the 1-based positions."""
    if stat == "entropy":
        return sum(math.log2(i) for i in range(1, t + 1)) / t
    if stat == "span":
        return sum((i - 1) / 2 for i in range(1, t + 1)) / t
    if stat == "sink":
        return sum(1 / i for i in range(1, t + 1)) / t
    if stat == "prev_token":
        return sum(1 / i for i in range(2, t + 1)) / (t - 1)
    if stat == "induction":
        return sum(1 / (r + k) for k in range(1, r)) / (r - 1)
    raise KeyError(stat)


@pytest.mark.parametrize("stat", ["prev_token", "entropy", "induction"])
def test_a_forward_statistic_is_one_row_per_head_against_uniform_attention(forward_store, tmp_path, monkeypatch, stat):
    serve_only(forward_store, tmp_path, monkeypatch)
    store = open_store(forward_store)
    info = store.meta.forward
    at = open_page(HEADS, {"stat": stat})
    table = _table(at)
    assert len(table) == store.n_layers * store.n_heads
    assert not {"matrix", "approaches", "crossings", "repulsions", "in 5-95% band"} & set(table.columns), table.columns
    _ranks_over_all_heads(table)
    uniform = _uniform(stat, info.seq_len, info.induction_repeat)
    np.testing.assert_allclose(table["over reference"], table["value"] / uniform)
    text = _caption(at)
    assert "no step 0" not in text and "uniform" in text and f"{uniform:.4g}" in text, text
