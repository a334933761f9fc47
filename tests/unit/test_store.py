"""The store format: reader checks, dense-array indexing, atomic commits, documented columns."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwatch.analysis.errors import SchemaVersionError, StoreError
from headwatch.analysis.store import CheckpointEntry, ModelInfo, open_store, read_meta
from headwatch.analysis.store import format as store_format
from headwatch.analysis.store.format import HEADS, HIST_Z_EDGES, LIST_COLUMNS, NULL_COLUMNS, SCALAR_COLUMNS
from headwatch.analysis.store.lenses import TABLES
from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS
from headwatch.analysis.store.meta import new_meta
from headwatch.precompute.store import writer as store_writer
from headwatch.precompute.store.tables import heads_rows
from headwatch.precompute.store.writer import commit_store, staging_dir

REPO = Path(__file__).resolve().parents[2]
L, H, D = 3, 4, 5


def coded_stats(step: int) -> dict[str, np.ndarray]:
    """Statistics whose values encode their own (step, layer, head), to check indexing."""
    code = step * 100 + np.arange(L)[:, None] * 10 + np.arange(H)[None, :]  # (L, H)
    stats = {name: code + i / 100 for i, name in enumerate(SCALAR_COLUMNS)}
    stats["sv"] = code[..., None] + np.arange(D)[::-1] / 10  # descending
    hist = np.zeros((L, H, len(HIST_Z_EDGES) + 1))
    hist[..., 100] = 1.0
    stats["hist_z"] = hist
    return stats


def write_store(
    path: Path, steps: list[int], *, duplicate: dict[int, int] | None = None, files: dict[int, dict[str, str]] | None = None
):
    model = ModelInfo(id="t", family="gpt_neox", n_layers=L, n_heads=H, d_model=16, d_head=D)
    meta = new_meta(model, settings={}, software={}, hist_edges=HIST_Z_EDGES.tolist())
    tables = []
    for step in steps:
        tables.append(heads_rows(step, coded_stats(step), d_model=16))
        meta.add_checkpoint(
            CheckpointEntry(step=step, revision=f"step{step}", tokens=None, sha256=str(step), files=(files or {}).get(step, {}))
        )
    for step, of in (duplicate or {}).items():
        meta.add_checkpoint(CheckpointEntry(step=step, revision=f"step{step}", tokens=None, sha256=str(of), duplicate_of=of))
    commit_store(path, meta, {"heads": HEADS.sorted(pa.concat_tables(tables[::-1]))})  # unsorted input, sorted here
    return meta


def test_dense_arrays_are_indexed_step_layer_head(tmp_path: Path) -> None:
    write_store(tmp_path / "s", [0, 2, 1], duplicate={3: 2})
    store = open_store(tmp_path / "s")
    assert store.steps.tolist() == [0, 1, 2]  # duplicate step 3 has no rows
    assert len(store.checkpoints) == 4
    for col_i, col in enumerate(SCALAR_COLUMNS):
        arr = store.array(col)
        assert arr.shape == (3, L, H) and arr.dtype == np.float64
        for si, step in enumerate((0, 1, 2)):
            for layer in range(L):
                for head in range(H):
                    assert arr[si, layer, head] == pytest.approx(step * 100 + layer * 10 + head + col_i / 100)
    sv = store.array("sv")
    assert sv.shape == (3, L, H, D) and sv[2, 1, 3, 0] == pytest.approx(213.4)
    assert store.array("hist_z").shape == (3, L, H, 202)
    assert not store.array("std").flags.writeable
    df = store.table
    assert list(df.columns) == list(HEADS.schema.names)
    assert df["head"].max() == H - 1  # column access by name, never df.head


def test_missing_or_foreign_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"no meta\.json"):
        open_store(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(StoreError, match="cannot read"):
        open_store(tmp_path)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    write_store(tmp_path / "s", [0])
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    meta["schema_version"] = 7
    (tmp_path / "s" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SchemaVersionError, match="schema_version 7"):
        open_store(tmp_path / "s")


def test_rows_and_meta_must_agree(tmp_path: Path) -> None:
    write_store(tmp_path / "s", [0, 1])
    meta_path = tmp_path / "s" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["checkpoints"] = meta["checkpoints"][:1]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="disagree"):
        open_store(tmp_path / "s")
    # a step with a missing head
    write_store(tmp_path / "t", [0])
    table = pq.read_table(tmp_path / "t" / "heads.parquet")
    pq.write_table(table.slice(0, table.num_rows - 1), tmp_path / "t" / "heads.parquet")
    with pytest.raises(StoreError, match="expected 12"):
        open_store(tmp_path / "t")
    # a column dropped
    write_store(tmp_path / "u", [0])
    table = pq.read_table(tmp_path / "u" / "heads.parquet")
    pq.write_table(table.drop_columns(["kl_gauss"]), tmp_path / "u" / "heads.parquet")
    with pytest.raises(StoreError, match="kl_gauss"):
        open_store(tmp_path / "u")


def test_commit_replaces_both_files_and_keeps_other_tables(tmp_path: Path) -> None:
    store = tmp_path / "s"
    write_store(store, [0])
    extra = EMBEDDINGS.empty()
    commit_store(store, read_meta(store), {"embeddings": extra})
    write_store(store, [0, 1])  # a later commit without the extra table carries it over
    assert pq.read_table(store / "embeddings.parquet").equals(extra)
    unregistered = pa.table({"x": [1, 2]})  # a file the registry does not know (a user's) is carried over too
    pq.write_table(unregistered, store / "notes.parquet")
    write_store(store, [0, 1, 2])
    assert pq.read_table(store / "notes.parquet").equals(unregistered)
    assert open_store(store).steps.tolist() == [0, 1, 2]
    assert not staging_dir(store).exists()


def test_float_columns_are_written_byte_stream_split_and_read_back_bit_for_bit(tmp_path: Path) -> None:
    """Float columns and lists of floats byte-stream-split (the others dictionary-encoded as before): the same bits
    read back, NaN included, and a third smaller than plain zstd on log-probabilities' random low bytes."""
    rng = np.random.default_rng(0)
    values = np.log(rng.dirichlet(np.ones(256), size=64)).astype(np.float32)
    values[3, 5] = np.nan
    table = pa.table(
        {
            "step": pa.array(np.arange(64), pa.int64()),
            "score": pa.array(values[:, 0].astype(np.float64)),
            "logprobs": pa.array(list(values), pa.list_(pa.float32())),
        }
    )
    path = tmp_path / "t.parquet"
    store_writer._write_parquet(path, table)
    back = pq.read_table(path)
    assert back.schema.equals(table.schema)
    np.testing.assert_array_equal(
        np.stack(back["logprobs"].to_numpy(zero_copy_only=False)).view(np.uint32), values.view(np.uint32)
    )
    np.testing.assert_array_equal(back["score"].to_numpy().view(np.uint64), values[:, 0].astype(np.float64).view(np.uint64))
    meta = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert "BYTE_STREAM_SPLIT" in encodings["score"] and "BYTE_STREAM_SPLIT" in encodings["logprobs.list.element"]
    assert "BYTE_STREAM_SPLIT" not in encodings["step"]
    plain = tmp_path / "plain.parquet"
    pq.write_table(table, plain, compression="zstd")
    assert path.stat().st_size < 0.8 * plain.stat().st_size


def test_leftover_staging_from_a_killed_commit_is_cleared(tmp_path: Path) -> None:
    store = tmp_path / "s"
    write_store(store, [0])
    stage = staging_dir(store)
    stage.mkdir()
    (stage / "heads.parquet").write_bytes(b"half-written")
    assert open_store(store).steps.tolist() == [0]  # the store itself is untouched
    write_store(store, [0, 1])
    assert open_store(store).steps.tolist() == [0, 1]
    assert not stage.exists()


def test_commit_without_atomic_exchange_falls_back_to_ordered_renames(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(store_writer, "_exchange", lambda a, b: False)
    store = tmp_path / "s"
    write_store(store, [0])
    write_store(store, [0, 1])
    assert open_store(store).steps.tolist() == [0, 1]
    assert not staging_dir(store).exists()


def test_the_store_reference_documents_every_registered_table_and_column() -> None:
    """docs/store.md and the tables declared in analysis/store/ cannot drift: every table and column
    of the registry has its section and row, and every table section of the page is a registered table."""
    doc = (REPO / "docs" / "store.md").read_text()
    for spec in TABLES.values():  # one section per table of the registry, listing each of its columns
        assert f"## `{spec.file}`" in doc, f"docs/store.md lacks a section for {spec.file}"
        section = doc.split(f"## `{spec.file}`", 1)[1].split("\n## ", 1)[0]
        for column in spec.schema.names:
            assert re.search(rf"^\| `{column}` \|", section, re.M), f"docs/store.md's {spec.file} section lacks column {column!r}"
    documented = set(re.findall(r"^## `([a-z_]+\.parquet)`", doc, re.M))
    assert documented == {spec.file for spec in TABLES.values()}, "docs/store.md documents a table the registry lacks"
    for key in (
        "schema_version",
        "model",
        "checkpoints",
        "hist_edges",
        "duplicate_of",
        "sha256",
        "tokens",
        "overlaps",
        "shared_files",
        "embeddings",
        "failed",
    ):
        assert f"`{key}`" in doc, f"docs/store.md does not document meta.json key {key!r}"


def test_list_columns_are_float32_lists() -> None:
    schema = HEADS.schema
    for col in LIST_COLUMNS:
        assert schema.field(col).type == pa.list_(pa.float32())


def test_null_columns_are_derived_for_stores_without_them(tmp_path: Path) -> None:
    from headwatch.analysis.rmt.nullmodel import kl_null, null_expectations

    write_store(tmp_path / "s", [0, 1])  # then as a version-1 store without the null-model columns
    heads = pq.read_table(tmp_path / "s" / "heads.parquet")
    pq.write_table(heads.drop_columns(list(NULL_COLUMNS)), tmp_path / "s" / "heads.parquet")
    store = open_store(tmp_path / "s")
    assert not set(NULL_COLUMNS) & set(store.arrow.column_names)
    sv = store.array("sv").astype(np.float64)
    np.testing.assert_allclose(store.array("kl_null"), kl_null(sv**2, D / 16))
    expected = null_expectations(16, D)
    np.testing.assert_allclose(store.array("stable_rank_over_null"), store.array("stable_rank") / expected["stable_rank"])
    assert store.array("participation_ratio_over_null").shape == (2, L, H)


def test_eval_loss_without_the_probe_copy_loss_reads_it_as_nan(tmp_path: Path) -> None:
    from headwatch.analysis.store.lenses.attention import EVAL_LOSS

    write_store(tmp_path / "s", [0, 1])
    old = pa.table({"step": pa.array([0, 1], pa.int64()), "loss": [5.5, 4.0], "tokens": pa.array([10, 10], pa.int64())})
    pq.write_table(old, tmp_path / "s" / EVAL_LOSS.file)  # as written before the column existed
    store = open_store(tmp_path / "s")
    table = store.read(EVAL_LOSS)
    assert table is not None and table.schema.equals(EVAL_LOSS.schema)
    np.testing.assert_array_equal(store.dense(EVAL_LOSS, "loss"), [5.5, 4.0])
    probe = store.dense(EVAL_LOSS, "probe_copy_loss")
    assert probe is not None and np.isnan(probe).all()


def test_an_opened_store_keeps_reading_its_own_version_across_a_commit(tmp_path: Path) -> None:
    write_store(tmp_path / "s", [0])
    store = open_store(tmp_path / "s")  # columns are read lazily, after this point
    write_store(tmp_path / "s", [0, 1])  # a precompute commit swaps the directory meanwhile
    std = store.array("std")
    assert std.shape == (1, L, H)
    assert std[0, 2, 3] == pytest.approx(23 + SCALAR_COLUMNS.index("std") / 100)
    assert store.array("sv").shape == (1, L, H, D)
    assert open_store(tmp_path / "s").array("std").shape == (2, L, H)


def test_list_columns_read_across_many_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # row groups of 5 rows (12 rows per step): list columns are decoded row group by row group
    # into one array; every row must land where its (step, layer, head) says
    monkeypatch.setattr(store_format, "HEADS_ROW_GROUP_ROWS", 5)
    write_store(tmp_path / "s", [0, 1, 2, 3])
    assert pq.ParquetFile(tmp_path / "s" / "heads.parquet").num_row_groups == 10
    store = open_store(tmp_path / "s")
    sv = store.array("sv")
    code = np.arange(4)[:, None, None] * 100 + np.arange(L)[None, :, None] * 10 + np.arange(H)[None, None, :]
    np.testing.assert_allclose(sv, code[..., None] + np.arange(D)[::-1] / 10, rtol=1e-6)
    np.testing.assert_array_equal(store.array("hist_z").argmax(axis=-1), 100)
    np.testing.assert_array_equal(store.array("std"), code + SCALAR_COLUMNS.index("std") / 100)


def test_the_statistics_and_the_random_matrix_references_stand_below_the_store() -> None:
    """analysis/rmt/ and analysis/stats/ import nothing of analysis/store/, directly or through another module (the
    store's reader derives older stores' null-model columns with the null model, and its format names the columns
    after the statistics' own names: the store stands above both, never beside them)."""
    from tests.unit.test_imports import import_graph

    graph = import_graph()
    reached: set[str] = set()
    todo = [name for name in graph if name.startswith(("headwatch.analysis.rmt.", "headwatch.analysis.stats."))]
    while todo:
        name = todo.pop()
        for target in graph[name] - reached:
            reached.add(target)
            todo.append(target)
    assert not {name for name in reached if name.startswith("headwatch.analysis.store")}, sorted(reached)
    for below in ("headwatch.analysis.rmt", "headwatch.analysis.stats"):
        store_imports = (target for name in graph if name.startswith("headwatch.analysis.store.") for target in graph[name])
        assert any(target.startswith(below) for target in store_imports), below
