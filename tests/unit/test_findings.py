"""analysis.findings, the layer below the pages and ``headwatch report``, on hand-worked cases and against plain
computations on the store's own tables (pandas on the files, not the layer's code): a statistic's values, the
comparison of runs, composition's paths and partners, and the links of events."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic_store import write_synthetic_store
from headwatch.analysis.findings import comparison as compare
from headwatch.analysis.findings.events import Event, head_link, url_value
from headwatch.analysis.findings.paths import induction_paths, partners, strongest
from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.types import HEAD_EMERGENCE, HEAD_TYPES, HEAD_TYPES_TABLE

L, H = 4, 4


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("findings") / "tiny-run"
    write_synthetic_store(path, n_layers=L, n_heads=H, d_head=16, d_model=64, n_checkpoints=12, model_id="synthetic/tiny")
    return path


# --- values ---------------------------------------------------------------------------------------------------------


def test_lambda_is_squared_singular_value(store_path):
    store = open_store(store_path)
    sv = store.array("sv")
    assert np.allclose(stat_values(store, "lambda", k=3), sv[..., 3].astype(np.float64) ** 2)
    assert stat_values(store, "std", k=3) is store.array("std")


def test_a_forward_statistic_without_the_forward_lens_says_which_lens_adds_it(store_path):
    with pytest.raises(KeyError, match="--lenses attention"):
        stat_values(open_store(store_path), "induction")


# --- runs -----------------------------------------------------------------------------------------------------------


def test_depth_bins_and_checkpoint_at_by_hand():
    assert compare.depth_bins(6, 4).tolist() == [0, 0, 1, 2, 2, 3]
    assert compare.depth_bins(24, 4).tolist() == [0] * 6 + [1] * 6 + [2] * 6 + [3] * 6
    assert compare.depth_bins(36, 8).tolist().count(0) == 5  # 0..4: 4/36 < 1/8 <= 5/36
    x = np.array([0.0, 0.25, 0.5, 1.0])
    assert compare.checkpoint_at(x, 0.5) == 2 and compare.checkpoint_at(x, 0.49) == 1 and compare.checkpoint_at(x, -1) is None
    assert compare.aligned_time(np.array([0, 100, 400]), align="fraction").tolist() == [0.0, 0.25, 1.0]


def test_the_bands_table_is_the_mean_and_sd_over_each_bins_heads():
    rng = np.random.default_rng(5)
    steps = np.array([0, 10, 40])
    values = rng.normal(size=(3, 6, 2))  # (S, layers, heads): layers 0-1, 2, 3-4, 5 fall in bins 0-3 of 4
    series = compare.run_series("r", steps, values, align="fraction")
    table = compare.bands_frame([series], 4, stat="std", matrix="qk")
    assert list(table.columns) == ["run", "matrix", "statistic", "bin", "depth", "step", "time", "mean", "sd", "heads"]
    for b, layers in enumerate([[0, 1], [2], [3, 4], [5]]):
        rows = table[table["bin"] == b]
        part = values[:, layers, :].reshape(3, -1)
        np.testing.assert_allclose(rows["mean"], part.mean(axis=1))
        np.testing.assert_allclose(rows["sd"], part.std(axis=1))
        assert rows["heads"].tolist() == [2 * len(layers)] * 3 and rows["time"].tolist() == [0.0, 0.25, 1.0]


def test_a_store_without_head_types_has_no_type_counts(store_path):
    assert compare.type_count_series("tiny-run", open_store(store_path), align="step") is None


def test_type_counts_and_induction_paths_follow_head_types_parquet(store_path, tmp_path):
    path = tmp_path / "typed"
    shutil.copytree(store_path, path)
    store = open_store(path)
    steps = [int(s) for s in store.steps]
    rng = np.random.default_rng(3)
    rows = [
        (step, layer, head, name, 0.0, 0.0, 0.0, held, held)
        for step in steps
        for layer in range(L)
        for head in range(H)
        for name in HEAD_TYPES
        for held in [bool(rng.random() < 0.3)]
    ]
    frame = pd.DataFrame(rows, columns=HEAD_TYPES_TABLE.schema.names)
    table = pa.Table.from_pandas(frame, schema=HEAD_TYPES_TABLE.schema, preserve_index=False)
    pq.write_table(HEAD_TYPES_TABLE.sorted(table), path / HEAD_TYPES_TABLE.file)
    emergence = pa.table(  # one head holding the first type from the first step: head_types reads both tables
        {
            "layer": pa.array([0], pa.int32()),
            "head": pa.array([0], pa.int32()),
            "type": [HEAD_TYPES[0]],
            "emergence_step": pa.array([steps[0]], pa.int64()),
            "first_step": pa.array([steps[0]], pa.int64()),
            "peak_score": [0.5],
            "peak_step": pa.array([steps[0]], pa.int64()),
            "final_score": [0.5],
        },
        schema=HEAD_EMERGENCE.schema,
    )
    pq.write_table(emergence, path / HEAD_EMERGENCE.file)
    series = compare.type_count_series("typed", open_store(path), align="fraction")
    assert series is not None and series.values.shape == (len(steps), 1, len(HEAD_TYPES))
    expect = frame.groupby(["step", "type"])["holds"].sum().unstack("type")[list(HEAD_TYPES)].to_numpy()
    np.testing.assert_array_equal(series.values[:, 0, :], expect)
    np.testing.assert_allclose(series.x, np.array(steps) / steps[-1])
    counts = compare.type_counts_frame([series])
    assert len(counts) == len(steps) * len(HEAD_TYPES)
    by_type = counts.pivot(index="step", columns="type", values="heads")[list(HEAD_TYPES)].to_numpy()
    np.testing.assert_array_equal(by_type, expect)

    paths = induction_paths(open_store(path), steps)
    assert paths is not None and len(paths) == len(steps)
    for step, got in zip(steps, paths, strict=True):
        now = frame[(frame["step"] == step) & frame["holds"]]
        prev = now[now["type"] == "previous_token"]
        ind = now[now["type"] == "induction"]
        want = {
            (a.layer * H + a.head, b.layer * H + b.head) for a in prev.itertuples() for b in ind.itertuples() if a.layer < b.layer
        }
        assert {tuple(p) for p in got.tolist()} == want


# --- held types -----------------------------------------------------------------------------------------------------


def test_the_earliest_emergence_is_over_the_types_asked_and_minus_one_where_none_is_held():
    from headwatch.analysis.findings.held_types import HeadTypes

    emergence = {  # (n_layers, n_heads) = (2, 2)
        "previous_token": np.array([[64, -1], [8, -1]]),
        "induction": np.array([[16, 32], [-1, -1]]),
        "sink": np.array([[-1, -1], [-1, 4]]),
    }
    held = {name: np.zeros((1, 2, 2), dtype=bool) for name in HEAD_TYPES}
    kinds = HeadTypes(np.array([0]), held, emergence, {})
    assert kinds.earliest(HEAD_TYPES).tolist() == [16, 32, 8, 4]
    assert kinds.earliest(["previous_token"]).tolist() == [64, -1, 8, -1]
    assert kinds.earliest(("induction", "sink")).tolist() == [16, 32, -1, 4]


# --- paths ----------------------------------------------------------------------------------------------------------


def test_strongest_partners_rank_by_peak_and_skip_those_without_a_score():
    series = np.array([[0.1, np.nan, 0.5, 0.2], [0.9, np.nan, 0.4, 0.2]])  # (S, N)
    assert strongest(series, 2) == [0, 2]
    assert strongest(series, 8) == [0, 2, 3]
    assert strongest(np.full((2, 3), np.nan), 3) == []
    matrix = np.full((2, 3, 3), np.nan)  # (S, targets, sources)
    matrix[:, 2, 0] = [0.2, 0.3]
    matrix[:, 2, 1] = [0.6, 0.1]
    matrix[:, 1, 0] = [0.5, 0.5]
    picked, values = partners(matrix, 2, role="source", top=5)
    assert picked == [1, 0] and values.tolist() == [[0.6, 0.2], [0.1, 0.3]]
    picked, values = partners(matrix, 0, role="target", top=5)
    assert picked == [1, 2] and values.tolist() == [[0.5, 0.2], [0.5, 0.3]]
    assert partners(matrix, 0, role="source", top=5)[0] == []


# --- events ---------------------------------------------------------------------------------------------------------


def test_links_write_values_as_the_views_read_them():
    from headwatch.dashboard.urlstate import encode

    for value in (True, False, 0, 3, "std", "L2H3", 0.25):
        assert url_value(value) == encode(value)
    event = Event(64, "MP departure", "", "", "weights", (("role", "attn out"), ("layer", 2), ("step", 64)))
    assert event.link("run a") == "weights?run=run%20a&role=attn%20out&layer=2&step=64"
    assert head_link("r", 2, 3, 64, stat="induction") == "head?run=r&layer=2&head=3&stat=induction&step=64"


def test_the_open_questions_paragraph_reads_as_sentences():
    """One statistic associated "is" associated, its AMI, p and Holm's adjusted p follow it, and the undecided ones
    are listed apart (issue 62: the paragraph counted p < 0.05 uncorrected while the tables beside it said Holm's
    decision)."""
    from headwatch.analysis.findings.association import Asked, JudgedAssociation, open_question_text
    from headwatch.analysis.trajectories.significance import Judged
    from headwatch.analysis.trajectories.type_association import Association

    def tested(p: float, adjusted: float, decision) -> JudgedAssociation:
        judged = Judged(p=p, se=0.001, adjusted=adjusted, low=adjusted - 0.01, high=adjusted + 0.01, family=3, decision=decision)
        a = Association(ami=0.2, p_value=p, p_within_layers=p, permutations=9999, clusters=3, silhouette=0.3, types=2, heads=48)
        return JudgedAssociation(a, judged, judged, np.zeros(48, dtype=int), np.full(48, "none"), 100)

    asked = [
        Asked("σ of W_QK", tested(0.002, 0.006, "associated")),
        Asked("S of W_QK", tested(0.4, 0.8, "not shown")),
        Asked("H of W_QK", tested(0.02, 0.045, "undecided")),
    ]
    text = open_question_text(asked, hint="HINT")
    assert text == (
        "Of 3 statistics whose trajectory clusters were compared with the heads' types at the last checkpoint, each p "
        "corrected by Holm over the 3 tested in this run, 1 is associated: σ of W_QK (AMI 0.200, p = 0.002, Holm "
        "0.006); 1 undecided (p within its Monte Carlo error of the threshold): H of W_QK (AMI 0.200, p = 0.02, Holm "
        "0.045); no association is shown for the others. Whether these associations replicate is not asked. HINT"
    )
    none = open_question_text([Asked("S of W_QK", tested(0.4, 0.4, "not shown"))])
    assert ", 0 are associated; no association is shown for the others." in none
