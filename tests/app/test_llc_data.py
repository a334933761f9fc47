"""What the Refined LLC view computes before it draws (`views.llc.data`), against direct computations and known
values."""

from __future__ import annotations

import numpy as np

from headwatch.analysis.llc.diagnostics import FLAGS, NEGATIVE_NOTE
from headwatch.dashboard.views.llc.data import (
    Estimates,
    cluster_sizes,
    clusters_csv,
    flag_counts,
    negative_warnings,
    trace_target,
    trace_targets,
    traces_csv,
)


def _estimates(values: np.ndarray, model: np.ndarray, steps: np.ndarray) -> Estimates:
    return Estimates(
        idx=np.arange(len(steps)),
        steps=steps,
        values=values,
        stds=np.zeros_like(values),
        model=model,
        model_std=np.zeros(len(steps)),
        model_init_loss=np.zeros(len(steps)),
        flags=None,
        model_flags=None,
    )


def test_flag_counts_count_heads_and_the_whole_model_per_checkpoint() -> None:
    flags = np.array([["converged", "negative"], ["still rising", "still rising"]], dtype=object)[:, None, :]  # (E=2, 1, 2)
    values = np.array([[[0.5, -0.1]], [[0.2, 0.3]]])
    est = Estimates(
        idx=np.array([0, 3]),
        steps=np.array([0, 100]),
        values=values,
        stds=np.zeros_like(values),
        model=np.array([1.0, -1.0]),
        model_std=np.zeros(2),
        model_init_loss=np.zeros(2),
        flags=flags,
        model_flags=np.array(["converged", "negative"], dtype=object),
    )
    table = flag_counts(est)
    assert list(table.columns) == ["step", *FLAGS]  # one column per flag, "negative" among them once
    assert list(table["step"]) == [0, 100]
    assert list(table["converged"]) == [2, 0] and list(table["still rising"]) == [0, 2] and list(table["negative"]) == [1, 1]
    assert list(table["diverged"]) == [0, 0]


def test_the_flag_totals_count_every_estimate_and_explain_the_negative_ones() -> None:
    """Issue 62: the Refined LLC page and the report count the negative estimates apart from the converged ones."""
    from headwatch.analysis.findings.llc_flags import flag_totals, flag_totals_text

    heads = np.array([["converged", "negative"], ["still rising", ""]], dtype=object)[:, None, :]  # (E=2, 1, 2)
    model = np.array(["negative", "converged"], dtype=object)
    assert flag_totals(heads, model) == {f: {"converged": 2, "negative": 2, "still rising": 1}.get(f, 0) for f in FLAGS}
    text = flag_totals_text(heads, model)
    assert text.startswith("5 estimates (2 heads and the whole model at 2 checkpoints): 2 converged, 1 still rising, 2 negative.")
    assert "not a local minimum" in text and "--llc-localization" in text and "--llc-burnin" in text
    assert "never counted as converged" in flag_totals_text(heads, model, explain=False)
    calm = flag_totals_text(np.full((1, 1, 2), "converged", dtype=object), np.array(["converged"], dtype=object))
    assert calm == "3 estimates (2 heads and the whole model at 1 checkpoint): 3 converged."
    one = np.array([[["negative", "converged"]]], dtype=object)  # (E=1, 1, 2)
    assert flag_totals_text(one, np.array(["converged"], dtype=object), explain=False).endswith(
        "1 negative. The negative estimate is never counted as converged, however flat its traces."
    )
    assert " The negative estimate: " in flag_totals_text(one, np.array(["converged"], dtype=object))


def test_negative_estimates_are_named_where_they_are() -> None:
    values = np.array([[[0.5, -0.1]], [[-0.2, 0.3]]])  # (E=2, 1 layer, 2 heads)
    heads, model = negative_warnings(_estimates(values, np.array([1.0, -1.0]), np.array([0, 1500])))
    assert heads == f"2 head estimates are negative (L0 H1 at step 0, L0 H0 at step 1,500): {NEGATIVE_NOTE}."
    assert model == f"The whole-model estimate is negative at step(s) 1,500: {NEGATIVE_NOTE}."
    many = -np.ones((2, 2, 2))  # eight negative heads: six named, two more counted
    (said,) = negative_warnings(_estimates(many, np.ones(2), np.array([0, 10])))
    assert said.startswith("8 head estimates are negative (L0 H0 at step 0, ") and " and 2 more): " in said
    assert negative_warnings(_estimates(np.ones((2, 1, 2)), np.ones(2), np.array([0, 10]))) == []


def test_every_trace_target_reads_back_as_its_layer_and_head() -> None:
    targets = trace_targets(3, 12)
    assert targets[0] == "whole model" and len(targets) == 1 + 3 * 12
    assert trace_target("whole model") == (-1, -1)
    assert [trace_target(t) for t in targets[1:]] == [(layer, head) for layer in range(3) for head in range(12)]


def test_cluster_tables_count_and_list_every_head() -> None:
    labels = np.array([1, 0, 1, 1, 2, 0])  # 2 layers x 3 heads, layer-major
    assert cluster_sizes(labels, ["cluster 1", "cluster 2", "cluster 3"]) == (
        "cluster 1: 2 heads, cluster 2: 3 heads, cluster 3: 1 heads"
    )
    rows = clusters_csv("r", labels, n_layers=2, n_heads=3)
    assert list(zip(rows["layer"], rows["head"], rows["cluster"], strict=True)) == [
        (0, 0, 2),
        (0, 1, 1),
        (0, 2, 2),
        (1, 0, 2),
        (1, 1, 3),
        (1, 2, 1),
    ]


def test_traces_csv_has_one_row_per_chain_and_sgld_step() -> None:
    trace = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # (chains, draws)
    rows = traces_csv("r", trace, step=100, layer=-1, head=-1)
    assert len(rows) == 6 and set(rows["step"]) == {100} and set(rows["layer"]) == {-1}
    assert rows[(rows["chain"] == 1) & (rows["sgld_step"] == 2)]["loss"].item() == 6.0
