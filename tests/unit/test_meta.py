"""Typed meta.json records: partial duplicates from file digests, round trips, the version-1 upgrade, views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import CheckpointEntry, ModelInfo, SharedFile, open_store, read_meta
from headwatch.analysis.store.format import SCHEMA_VERSION
from headwatch.analysis.store.meta import Meta, new_meta
from tests.unit.test_store import write_store

MODEL = ModelInfo(id="t", family="gpt_neox", n_layers=1, n_heads=1, d_model=4, d_head=2)


def entry(step: int, files: dict[str, str], **kw) -> CheckpointEntry:
    return CheckpointEntry(step=step, revision=f"step{step}", tokens=None, sha256=f"whole{step}", files=files, **kw)


def test_a_file_shared_with_a_later_checkpoint_marks_the_earlier_one_mixed() -> None:
    meta = new_meta(MODEL, settings={}, software={}, hist_edges=[])
    # Pythia-12B's pattern (EleutherAI/pythia issue 206): steps 50 and 58 carry the final model's first shard
    meta.add_checkpoint(entry(0, {"a": "a0", "b": "b0"}))
    meta.add_checkpoint(entry(50, {"a": "FINAL", "b": "b50"}))
    meta.add_checkpoint(entry(58, {"a": "FINAL", "b": "b58"}))
    assert meta.mixed == [meta.entry(50)]  # until the owner arrives, 58 is the latest holder of the file
    meta.add_checkpoint(entry(143, {"a": "FINAL", "b": "b143"}))
    assert [c.step for c in meta.mixed] == [50, 58]
    assert meta.entry(50).shared_files == (SharedFile(file="a", step=143, other_file="a", sha256="FINAL"),)
    assert meta.state_steps == [0, 143] and meta.done_steps == [0, 50, 58, 143]
    # a whole duplicate shares every file but is not "mixed": it has no rows at all
    meta.add_checkpoint(entry(144, {"a": "FINAL", "b": "b143"}, duplicate_of=143))
    assert not meta.entry(144).shared_files and meta.entry(143).shared_files == ()
    assert meta.duplicates == [(144, 143)]
    # checkpoints without per-file digests (sha256_source "read") never match anything
    meta.add_checkpoint(entry(200, {}))
    assert not meta.entry(200).shared_files


def test_meta_round_trips_and_keeps_keys_it_does_not_know(tmp_path: Path) -> None:
    meta = new_meta(MODEL, settings={"device": "cpu"}, software={"numpy": "2"}, hist_edges=[0.0, 1.0])
    meta.add_checkpoint(entry(0, {"a": "x"}))
    meta.add_checkpoint(entry(5, {"a": "x"}))
    raw = meta.to_dict() | {"from_a_newer_tool": {"kept": True}}
    again = Meta.from_dict(json.loads(json.dumps(raw)))
    assert again.to_dict() == raw
    assert raw["checkpoints"][0]["shared_files"] == [{"file": "a", "step": 5, "other_file": "a", "sha256": "x"}]


def test_a_version_1_store_opens_upgraded(tmp_path: Path) -> None:
    files = {
        0: {"model-1.safetensors": "s0", "model-2.safetensors": "t0"},
        1: {"model-1.safetensors": "S", "model-2.safetensors": "t1"},
        2: {"model-1.safetensors": "S", "model-2.safetensors": "t2"},
    }
    write_store(tmp_path / "s", [0, 1, 2], files=files)
    path = tmp_path / "s" / "meta.json"
    raw = json.loads(path.read_text())
    raw["schema_version"] = 1
    for c in raw["checkpoints"]:
        del c["shared_files"]
    del raw["failed"], raw["matrices"]
    path.write_text(json.dumps(raw))
    meta = read_meta(tmp_path / "s")
    assert meta.schema_version == 1 and meta.upgraded and meta.to_dict()["schema_version"] == SCHEMA_VERSION
    assert [c.step for c in meta.mixed] == [1] and meta.failed == [] and meta.matrices == ["qk"]
    store = open_store(tmp_path / "s")
    assert store.steps.tolist() == [0, 2]
    assert store.hidden_steps == [(1, "step 1 carries step 2's model-1.safetensors")]


def test_views_with_and_without_mixed_checkpoints_slice_the_same_rows(tmp_path: Path) -> None:
    files = {0: {"f": "a"}, 1: {"f": "z"}, 2: {"f": "b"}, 3: {"f": "z"}}
    write_store(tmp_path / "s", [0, 1, 2, 3], files=files)
    store = open_store(tmp_path / "s")
    everything = store.view(include_mixed=True)
    assert store.steps.tolist() == [0, 2, 3] and everything.steps.tolist() == [0, 1, 2, 3]
    std_all, std = everything.array("std"), store.array("std")
    assert std_all.shape[0] == 4 and std.shape[0] == 3
    assert (std == std_all[[0, 2, 3]]).all()
    # values encode their own step (test_store.coded_stats): the hidden step's row is 1xx
    assert int(std_all[1, 0, 0]) // 100 == 1 and int(std[1, 0, 0]) // 100 == 2
    assert everything.hidden_steps == [] and store.view(include_mixed=False) is store


def test_malformed_checkpoint_records_are_refused(tmp_path: Path) -> None:
    write_store(tmp_path / "s", [0])
    path = tmp_path / "s" / "meta.json"
    raw = json.loads(path.read_text())
    raw["checkpoints"] = [{"revision": "step0"}]  # no step
    path.write_text(json.dumps(raw))
    with pytest.raises(StoreError, match="malformed"):
        read_meta(tmp_path / "s")


def test_upgrade_command_rewrites_a_version_1_store_and_keeps_its_values(tmp_path: Path) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    from headwatch.analysis.store.format import HEADS, NULL_COLUMNS
    from headwatch.precompute.store.upgrade import main, upgrade_store

    write_store(tmp_path / "s", [0, 1], files={0: {"f": "a"}, 1: {"f": "b"}})
    heads = pq.read_table(tmp_path / "s" / "heads.parquet")
    expected_std = open_store(tmp_path / "s").array("std").copy()
    pq.write_table(heads.drop_columns(list(NULL_COLUMNS)), tmp_path / "s" / "heads.parquet")
    raw = json.loads((tmp_path / "s" / "meta.json").read_text())
    raw["schema_version"] = 1
    (tmp_path / "s" / "meta.json").write_text(json.dumps(raw))
    assert main([str(tmp_path / "s")]) == 0
    assert json.loads((tmp_path / "s" / "meta.json").read_text())["schema_version"] == SCHEMA_VERSION
    assert pq.read_schema(tmp_path / "s" / "heads.parquet").equals(HEADS.schema)
    np.testing.assert_array_equal(open_store(tmp_path / "s").array("std"), expected_std)
    assert upgrade_store(tmp_path / "s") is False  # nothing left to do
    newer = json.loads((tmp_path / "s" / "meta.json").read_text()) | {"schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "s" / "meta.json").write_text(json.dumps(newer))
    assert main([str(tmp_path / "s")]) == 2  # refused in one line (bad input), untouched
    assert json.loads((tmp_path / "s" / "meta.json").read_text())["schema_version"] == SCHEMA_VERSION + 1


def _version_1_store(path: Path) -> None:
    """A store as version 1 wrote it: no null-model columns, schema_version 1."""
    import pyarrow.parquet as pq

    from headwatch.analysis.store.format import NULL_COLUMNS

    write_store(path, [0, 1], files={0: {"f": "a"}, 1: {"f": "b"}})
    heads = pq.read_table(path / "heads.parquet")
    pq.write_table(heads.drop_columns(list(NULL_COLUMNS)), path / "heads.parquet")
    raw = json.loads((path / "meta.json").read_text())
    raw["schema_version"] = 1
    (path / "meta.json").write_text(json.dumps(raw))


def test_a_commit_that_would_carry_an_old_table_over_is_refused(tmp_path: Path) -> None:
    """A commit of other tables (the embeddings command's) must not label a version-1 heads table as
    the current version: it is refused, naming the upgrade command, and the store is untouched."""
    from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS
    from headwatch.precompute.store.writer import commit_store

    _version_1_store(tmp_path / "s")
    before = {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()}
    with pytest.raises(StoreError, match=r"python -m headwatch.precompute\.store\.upgrade"):
        commit_store(tmp_path / "s", read_meta(tmp_path / "s"), {EMBEDDINGS.name: EMBEDDINGS.empty()})
    assert {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()} == before


def test_publishing_a_version_1_store_is_refused(tmp_path: Path) -> None:
    from headwatch.precompute.store.publish import push_store

    class NoHub:  # nothing may be uploaded
        def __getattr__(self, name):
            raise AssertionError(f"the Hub was called ({name})")

    _version_1_store(tmp_path / "s")
    with pytest.raises(StoreError, match="upgrade it before publishing"):
        push_store(tmp_path / "s", "me/store", api=NoHub())


@pytest.mark.parametrize(
    "store", sorted(p.parent.name for p in (Path(__file__).resolve().parents[2] / "data").glob("*/meta.json"))
)
def test_a_shipped_stores_meta_json_reads_and_writes_back_byte_for_byte(store: str, tmp_path: Path) -> None:
    """The lenses' sections are generic records now (`analysis.store.records`): every shipped store's meta.json,
    read and written again as a commit writes it, is the same bytes (keys, order and values), and each of its
    lens sections is a record the registry of record types knows."""
    from headwatch.analysis.store.lenses import RECORDS
    from headwatch.precompute.store.writer import _write_json

    path = Path(__file__).resolve().parents[2] / "data" / store
    meta = read_meta(path)
    _write_json(tmp_path / "meta.json", meta.to_dict())
    assert (tmp_path / "meta.json").read_bytes() == (path / "meta.json").read_bytes()
    assert set(meta.records) <= set(RECORDS) and not set(meta.extra) & set(RECORDS)
    assert meta.records.get("forward") is meta.forward
