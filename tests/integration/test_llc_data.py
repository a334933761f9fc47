"""The refined LLC under named distributions (``--llc-data``, `precompute.llc_data`), and the store keyed by them.

- ``train`` rebuilt from a run's run.json is what the training loop fed the model: the windows its first updates
  took (recorded by a spy on the loop's loss while a tiny run trains), each cut to the model's input length.
- ``code`` is the interpreter's standard-library sources read here independently (sorted top-level ``*.py`` files),
  cut into windows drawn as the evaluation text's are; ``tokens_sha256`` is sha256 of the int64 little-endian ids.
- One store holds estimates under several distributions: a rerun under another adds rows and leaves the others
  as they were; the same name with other sequences is refused (exit 2, nothing written); a store written before
  the ``data`` column (a shipped store) reads as ``text`` without being rewritten.
- The lens under a distribution gives what the batched sampler gives on those sequences called directly, and the
  batched sampler driven by devinterp's noise equals devinterp on them step for step.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

from benchmarks.llc_noise import DevinterpNoise
from headwatch.analysis.store import open_store, read_meta
from headwatch.analysis.store.lenses.llc import (
    LLC,
    LLC_CHAINS,
    LLC_WHOLE_MODEL,
    LlcOptions,
    SamplerSettings,
    data_records,
    default_llc_data,
    parse_llc_data,
)
from headwatch.precompute.evalset import WINDOW_SEED
from headwatch.precompute.lenses.llc import LlcJob, checkpoint_llc, estimate_llc, estimates_from_traces, head_masks
from headwatch.precompute.lenses.llc_sampler import checkpoint_traces
from headwatch.precompute.llc_data import CODE_BYTES, LlcData, code_bytes, draw_windows, tokens_sha256, training_sequences
from headwatch.training.corpus import SDIST_FILENAME
from tests.integration.conftest import REPO, run_cli
from tests.integration.test_llc import HEADS, LAYERS, trained  # noqa: F401  # fixture
from tests.integration.test_training import TINY, sdist  # noqa: F401  # fixture

LLC_CLI = (
    "--lenses",
    "llc",
    "--llc-chains",
    "2",
    "--llc-burnin",
    "0",
    "--llc-draws",
    "3",
    "--llc-batch-size",
    "2",
    "--llc-sequences",
    "6",
    "--eval-sequences",
    "8",
    "--eval-length",
    "32",
    "--llc-steps",
    "0,8",
)


@pytest.fixture(scope="module")
def trained_run(sdist, tmp_path_factory):  # noqa: F811
    """A tiny run trained with repeated spans, and the windows the loop fed the model, update by update."""
    import headwatch.training.train as loop
    from headwatch.training.__main__ import main as training_main

    root = tmp_path_factory.mktemp("runs")
    (root / ".cache").mkdir()
    (root / ".cache" / SDIST_FILENAME).write_bytes(sdist.read_bytes())
    fed: list[torch.Tensor] = []
    original = loop.next_token_loss

    def spy(model, windows):
        if model.training:  # the updates' batches (the evaluation batches are measured in eval mode)
            fed.append(windows.clone())
        return original(model, windows)

    loop.next_token_loss = spy
    try:
        args = ["--out", str(root / "run"), "--device", "cpu", "--corpus-archive", str(sdist), *TINY]
        assert training_main([*args, "--repeat-share", "1.0", "--repeat-min", "4", "--repeat-max", "8"]) == 0
    finally:
        loop.next_token_loss = original
    return root / "run", fed


def test_train_is_the_windows_the_training_loop_fed_the_model(trained_run) -> None:
    run, fed = trained_run
    info = json.loads((run / "run.json").read_text())
    batch = info["config"]["optim"]["batch_size"]
    for count, t in [(6, 32), (3, 16), (batch, 32)]:
        tokens, record = training_sequences(info, run, count, t)
        want = torch.cat(fed)[:count, :t].numpy()
        np.testing.assert_array_equal(tokens, want)
        assert record["updates"] == -(-count // batch)
    with pytest.raises(ValueError, match="exceeds the run's context 32"):
        training_sequences(info, run, 2, 33)


def test_code_is_the_standard_librarys_sources_and_the_hash_is_of_the_ids() -> None:
    data, files, folder = code_bytes()
    paths = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    want, size, names = b"", 0, []
    for p in paths:  # the files in name order until CODE_BYTES
        if size >= CODE_BYTES:
            break
        want += p.read_bytes()
        size = len(want)
        names.append(p.name)
    assert data == want and files == names and folder == str(paths[0].parent)
    ids = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    windows = draw_windows(ids, 5, 40, what="code")
    starts = np.sort(np.random.default_rng(WINDOW_SEED).choice(len(ids) // 40, size=5, replace=False)) * 40
    for row, start in zip(windows, starts, strict=True):
        assert bytes(row.astype(np.uint8)) == data[start : start + 40]
    assert tokens_sha256(windows) == hashlib.sha256(windows.astype("<i8").tobytes()).hexdigest()


def test_the_option_parses_names_and_files() -> None:
    assert [s.name for s in parse_llc_data(None)] == ["train"]
    specs = parse_llc_data("train,text,repeats,code,dir/mine.txt,pile=sample.npy")
    assert [(s.name, s.file) for s in specs] == [
        ("train", None),
        ("text", None),
        ("repeats", None),
        ("code", None),
        ("mine.txt", "dir/mine.txt"),
        ("pile", "sample.npy"),
    ]
    assert parse_llc_data("train=sample.txt")[0].file == "sample.txt"  # a Hub suite's sample of its corpus
    for bad, message in [("text,text", "given twice"), ("repeats=x.txt", "only train"), ("text,", "empty entry")]:
        with pytest.raises(ValueError, match=message):
            LlcOptions(data=bad)
    assert default_llc_data(["code", "text"]) == "text" and default_llc_data(["text", "train"]) == "train"
    assert default_llc_data(["mine"]) == "mine"


def test_a_store_adds_distributions_and_refuses_a_name_with_other_sequences(trained_run, tmp_path: Path) -> None:
    run, fed = trained_run
    out = tmp_path / "store"
    first = run_cli("--source", str(run), "--out", str(out), *LLC_CLI)  # the default: the run's training distribution
    assert first.returncode == 0, first.stderr
    table = pq.read_table(out / LLC.file)
    assert set(table["data"].to_pylist()) == {"train"} and table.num_rows == 2 * (LAYERS * HEADS + 1)
    meta = read_meta(out)
    assert meta.llc is not None
    records = data_records(meta.llc)
    assert list(records) == ["train"]  # no text: none was estimated
    assert records["train"]["tokens_sha256"] == tokens_sha256(torch.cat(fed)[:6, :32].numpy())
    assert set(records["train"]["seconds"]) == {"0", "8"}

    more = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-data", "text,repeats")
    assert more.returncode == 0, more.stderr
    after = pq.read_table(out / LLC.file)
    assert sorted(set(after["data"].to_pylist())) == ["repeats", "text", "train"] and after.num_rows == 3 * table.num_rows
    kept = after.filter(pc.equal(after["data"], "train"))
    assert kept.equals(table)  # the training distribution's rows as they were
    chains = pq.read_table(out / LLC_CHAINS.file)
    assert sorted(set(chains["data"].to_pylist())) == ["repeats", "text", "train"]
    store = open_store(out)
    assert sorted(data_records(store.meta.llc)) == ["repeats", "text", "train"]
    from headwatch.info import describe

    said = "\n".join(describe(out))
    assert (
        "train     2 checkpoints" in said
        and "repeats   2 checkpoints" in said
        and "add others: --lenses llc --llc-data code" in said
    )
    # a reader picks the training distribution unless told; the others by name
    for name in ("train", "text", "repeats"):
        rows = after.filter(after["data"].to_numpy(zero_copy_only=False) == name).to_pandas()
        whole = rows[rows["layer"] == -1].set_index("step")["llc"]
        got = store.dense(LLC, "llc", at={**LLC_WHOLE_MODEL, "data": name})
        assert got is not None
        steps = store.steps.tolist()
        assert got[steps.index(8)] == whole[8]
    assert np.array_equal(store.require(LLC, "llc"), store.require(LLC, "llc", at={"data": "train"}), equal_nan=True)
    assert "refined LLC: computed" not in run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-data", "text").stderr

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("def f(x):\n    return x + 1\n" * 40)
    b.write_text("class A:\n    pass\n" * 60)
    assert run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-data", f"mine={a}").returncode == 0
    before = (out / LLC.file).read_bytes()
    refused = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-data", f"mine={b}")
    assert refused.returncode == 2
    assert "the sequences of --llc-data mine" in refused.stderr and "the same name for other data" in refused.stderr
    assert (out / LLC.file).read_bytes() == before


def test_a_model_not_trained_here_needs_a_sample_for_train(tmp_path: Path) -> None:
    from tests.integration.test_forward_lens import byte_run

    run = byte_run(tmp_path, [0, 1], hidden=16, layers=1, heads=2)  # its run.json records no training settings
    refused = run_cli("--source", str(run), "--out", str(tmp_path / "s"), *LLC_CLI[:-2], "--llc-data", "train")
    assert refused.returncode == 2 and "train=FILE" in refused.stderr and "not reachable offline" in refused.stderr
    default = run_cli("--source", str(run), "--out", str(tmp_path / "t"), *LLC_CLI[:-2], "--llc-sequences", "4")
    assert default.returncode == 0, default.stderr
    assert set(pq.read_table(tmp_path / "t" / LLC.file)["data"].to_pylist()) == {"text"}


def test_under_a_distribution_the_lens_is_the_sampler_on_its_sequences(trained, tmp_path: Path) -> None:  # noqa: F811
    sampler = SamplerSettings(chains=2, draws=4, burnin=2, batch_size=2, sequences=4)
    rng = np.random.default_rng(5)
    half = rng.integers(0, 48, size=(4, 8))
    repeats = np.concatenate([half, half], axis=1)  # (4, 16): a span, then the same span
    text = rng.integers(0, 48, size=(4, 16))
    folder = tmp_path / "ckpt"
    trained.save_pretrained(folder)
    job = LlcJob((LlcData("text", text, {}), LlcData("repeats", repeats, {})), sampler, tmp_path / "scratch")
    rows, seconds = checkpoint_llc(folder, 7, job, n_layers=LAYERS, n_heads=HEADS)
    assert set(seconds) == {"text", "repeats"}
    table = rows[LLC.name].to_pandas()
    for name, tokens in (("text", text), ("repeats", repeats)):
        direct = {
            (layer, head): est for layer, head, est in estimates_from_traces(checkpoint_traces(trained, tokens, sampler), sampler)
        }
        got = table[table["data"] == name]
        assert len(got) == len(direct)
        for r in got.itertuples():
            assert r.llc == direct[(r.layer, r.head)].llc and r.init_loss == direct[(r.layer, r.head)].init_loss
    assert not np.allclose(table[table["data"] == "text"]["llc"], table[table["data"] == "repeats"]["llc"])


def test_under_a_distribution_the_batched_sampler_is_devinterp_step_for_step(trained, tmp_path: Path) -> None:  # noqa: F811
    sampler = SamplerSettings(chains=2, draws=6, burnin=2, batch_size=2, sequences=8)
    half = np.random.default_rng(9).integers(0, 48, size=(8, 8))
    repeats = np.concatenate([half, half], axis=1)  # (8, 16)
    got = checkpoint_traces(trained, repeats, sampler, noise=DevinterpNoise(trained, sampler.seed))
    for layer, head in [(0, 1), (1, 3), (-1, -1)]:
        masks = None if layer == -1 else head_masks(trained, layer, head)
        ref = estimate_llc(trained, repeats, masks, sampler, scratch=tmp_path)
        rows = [i for i, lane in enumerate(got.lanes) if (lane.layer, lane.head) == (layer, head)]
        assert got.init_loss == pytest.approx(ref.init_loss, abs=1e-5)
        np.testing.assert_allclose(got.trace[rows], ref.trace, rtol=0, atol=2e-4)


def test_a_shipped_store_reads_as_text_without_being_rewritten() -> None:
    """A store written before the distributions were named (the GPU-built induction-d512) reads as text, unchanged."""
    store_dir = REPO / "data" / "induction-d512"
    before = {f: (store_dir / f).read_bytes() for f in (LLC.file, LLC_CHAINS.file, "meta.json")}
    assert "data" not in pq.read_schema(store_dir / LLC.file).names  # written before the column
    store = open_store(store_dir)
    frame = store.frame(LLC)
    assert frame is not None and set(frame["data"]) == {"text"}
    records = data_records(store.meta.llc)
    assert list(records) == ["text"]
    assert records["text"]["tokens_sha256"] == store.meta.llc["evaluation"]["tokens_sha256"]
    assert records["text"]["seconds"] == store.meta.llc["seconds"]
    raw = pq.read_table(store_dir / LLC.file).to_pandas()
    whole = raw[raw["layer"] == -1].set_index("step")["llc"]
    got = store.require(LLC, "llc", at=LLC_WHOLE_MODEL)
    for i, step in enumerate(store.steps.tolist()):
        assert got[i] == whole[step]
    assert np.array_equal(got, store.require(LLC, "llc", at={**LLC_WHOLE_MODEL, "data": "text"}), equal_nan=True)
    assert store.steps_with(LLC, at={"data": "train"}).size == 0
    from headwatch.info import describe

    said = "\n".join(describe(store_dir))
    assert f"text      {len(store.steps)} checkpoints; 8 x 64 tokens (sha256 {records['text']['tokens_sha256'][:12]})" in said
    assert "every estimate is on held-out text" in said and "--llc-data train,repeats,code" in said
    assert {f: (store_dir / f).read_bytes() for f in before} == before


@pytest.mark.parametrize("run", ["induction-d128", "induction-d128-seed2", "induction-d64", "induction-d256"])
def test_the_rebuilt_induction_stores_hold_four_distributions_at_every_checkpoint(run: str) -> None:
    """Issue 60's acceptance on the stores rebuilt with every lens: llc.parquet (read with pyarrow) holds an estimate
    of every head and of the whole model at every checkpoint of the store under the training distribution, text,
    repeats and code, and meta.json records each distribution's sequences by a hash of their own."""
    store_dir = REPO / "data" / run
    store = open_store(store_dir)
    table = pq.read_table(store_dir / LLC.file, columns=["step", "data", "layer", "head", "llc"]).to_pandas()
    steps = {int(s) for s in store.steps}
    per_step = store.n_layers * store.n_heads + 1  # every head and the whole model
    for name in ("train", "text", "repeats", "code"):
        rows = table[table["data"] == name]
        assert set(rows["step"]) == steps, (name, sorted(steps - set(rows["step"])))
        assert (rows.groupby("step").size() == per_step).all() and rows["llc"].notna().all(), name
    records = data_records(store.meta.llc)
    assert sorted(records) == ["code", "repeats", "text", "train"]
    assert len({r["tokens_sha256"] for r in records.values()}) == 4


def test_a_store_written_before_the_column_gains_a_distribution_and_keeps_its_text_estimates(trained_run, tmp_path: Path) -> None:
    run, _ = trained_run
    out = tmp_path / "old"
    assert run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-data", "text").returncode == 0
    # as a store written before distributions were named: no data column, meta.json llc without "data"
    for spec in (LLC, LLC_CHAINS):
        table = pq.read_table(out / spec.file)
        pq.write_table(table.drop(["data"]), out / spec.file)
    meta = json.loads((out / "meta.json").read_text())
    meta["llc"].pop("data")
    (out / "meta.json").write_text(json.dumps(meta))
    old = pq.read_table(out / LLC.file)
    assert list(data_records(read_meta(out).llc)) == ["text"]
    again = run_cli("--source", str(run), "--out", str(out), *LLC_CLI, "--llc-data", "text,repeats")
    assert again.returncode == 0, again.stderr
    assert "refined LLC: computed at steps 0, 8" in again.stderr  # the repeats only: text is there
    after = pq.read_table(out / LLC.file)
    text = after.filter(pc.equal(after["data"], "text")).drop(["data"])
    assert text.equals(old)
    assert sorted(set(after["data"].to_pylist())) == ["repeats", "text"]
    records = data_records(read_meta(out).llc)
    assert sorted(records) == ["repeats", "text"] and set(records["text"]["seconds"]) == {"0", "8"}
