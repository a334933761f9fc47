"""``python -m headwatch.precompute --source ORG/NAME`` end to end, with no network.

A tiny GPT-NeoX suite (saved by transformers; step 2 carries step 0's weights byte
for byte, like Pythia's) is published two ways: as a local Hub cache
(``models--ORG--NAME/{blobs,refs,snapshots}``, read with ``HF_HUB_OFFLINE=1``) and
on a fake Hub on 127.0.0.1 (`benchmarks.fakehub`). Both must give the store
the local-folder path gives (itself checked against numpy in test_precompute.py),
with digests checked against hashlib and requests checked against the file header.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from huggingface_hub import constants

from benchmarks.fakehub import FakeHub, Repo, folder_files, write_hub_cache
from headwatch.analysis.store import open_store
from headwatch.analysis.store.format import CIRCUIT_COLUMNS, LIST_COLUMNS, SCALAR_COLUMNS
from headwatch.families.extract import extract_qk
from headwatch.families.registry import model_shape
from headwatch.precompute.__main__ import main
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import FetchSettings, RunOptions
from headwatch.precompute.sources.checkpoints import read_folder
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.hub import HubSource
from headwatch.precompute.sources.hubcache import HubCacheSource
from headwatch.precompute.sources.local import LocalSource
from headwatch.precompute.sources.resolve import open_source
from headwatch.precompute.sources.revisions import PYTHIA_TOKENS_PER_STEP, CheckpointRef
from tests.integration.conftest import REPO, make_suite, neox_model, perturb, save_bin

REPO_ID = "EleutherAI/pythia-tiny"  # a Pythia name: tokens per step and the schedule apply
STEPS = [0, 1, 2, 4, 8]
REVISIONS = ",".join(f"step{s}" for s in STEPS)


def run(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "headwatch.precompute", "--no-progress", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def base_env(home: Path, **extra: str) -> dict[str, str]:
    """No real token, no real cache, no embeddings (tested elsewhere), fast retries."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    env.update(
        PYTHONPATH=str(REPO),
        HF_HOME=str(home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HEADWATCH_EMBEDDINGS="0",
        HEADWATCH_HUB_RETRIES="3",
        HEADWATCH_HUB_BACKOFF="0.01",
    )
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The suite as folders, as a Hub repo, as a Hub cache, and its local-folder store."""
    root = tmp_path_factory.mktemp("hub")
    suite = make_suite(root / "suite", STEPS, duplicate={2: 0})
    repo = Repo()
    for step in STEPS:
        repo.add(f"step{step}", folder_files(suite / f"step{step}"))
    repo.add("main", folder_files(suite / "step8"))  # not a step: ignored
    write_hub_cache(root / "home" / "hub", REPO_ID, repo)
    reference = root / "reference"
    report = run_precompute(
        suite, reference, RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}})
    )
    assert not report.failed
    return {"root": root, "suite": suite, "repo": repo, "reference": reference}


class InProcess:
    """``python -m headwatch.precompute`` in this process (no interpreter start-up), isolated from the real
    Hub: huggingface_hub's endpoint, cache, offline flag and token paths point into tmp_path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, home: Path):
        self.monkeypatch, self.capsys, self.home = monkeypatch, capsys, home
        monkeypatch.delenv("HF_TOKEN", raising=False)
        for name in ("HF_TOKEN_PATH", "HF_STORED_TOKENS_PATH", "AGENT_HARNESSES_PATH"):
            monkeypatch.setattr(constants, name, str(home / name.lower()))
        monkeypatch.setenv("HEADWATCH_HUB_RETRIES", "3")
        monkeypatch.setenv("HEADWATCH_HUB_BACKOFF", "0.01")
        monkeypatch.setenv("HEADWATCH_RANGE_MERGE_GAP", "8192")

    def hub(self, *, endpoint: str = "http://127.0.0.1:9", cache: Path | None = None, offline: bool = False) -> None:
        self.monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        self.monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        self.monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache or self.home / "hub"))
        self.monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)

    def __call__(self, *args: str) -> tuple[int, str]:
        """Exit status and stderr of one command."""
        self.capsys.readouterr()
        status = main(["--no-progress", "--no-embeddings", *args])
        return status, self.capsys.readouterr().err


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path) -> InProcess:
    return InProcess(monkeypatch, capsys, tmp_path / "home")


@pytest.fixture
def hub(world):
    with FakeHub() as server:
        server.repos[REPO_ID] = world["repo"]
        yield server


def online_env(hub: FakeHub, tmp_path: Path, **extra: str) -> dict[str, str]:
    # an 8 kB merge gap: wider than one head's V rows (4 kB), narrower than the MLP between layers
    return base_env(tmp_path / "empty-home", **{"HF_ENDPOINT": hub.url, "HEADWATCH_RANGE_MERGE_GAP": "8192", **extra})


def assert_same_statistics(a: Path, b: Path) -> None:
    """Equal statistics of every per-head matrix the two stores share."""
    sa, sb = open_store(a), open_store(b)
    assert sa.steps.tolist() == sb.steps.tolist()
    shared = [m for m in sa.meta.matrices if m in sb.meta.matrices]
    assert shared
    for matrix in shared:
        for col in SCALAR_COLUMNS + LIST_COLUMNS + CIRCUIT_COLUMNS:
            np.testing.assert_array_equal(sa.array(col, matrix=matrix), sb.array(col, matrix=matrix), err_msg=f"{matrix} {col}")


def test_online_ov_gives_the_local_store_without_whole_files(world, hub: FakeHub, tmp_path: Path) -> None:
    out = tmp_path / "store"
    res = run("--source", REPO_ID, "--out", str(out), env=online_env(hub, tmp_path))  # default: qk and ov
    assert res.returncode == 0, res.stderr
    assert open_store(out).meta.matrices == ["qk", "ov"]
    assert_same_statistics(world["reference"], out)  # the local run's qk and ov, bit for bit
    for step in STEPS:
        commit = world["repo"].branches[f"step{step}"]
        requests = [e for e in hub.resolves("model.safetensors") if f"/{commit}/" in e.path]
        assert all(e.range for e in requests), "a weight file was downloaded whole"


def check_checkpoints(meta: dict, world, *, source: str) -> None:
    by_step = {c["step"]: c for c in meta["checkpoints"]}
    assert sorted(by_step) == STEPS
    for step, entry in by_step.items():
        data = (world["suite"] / f"step{step}" / "model.safetensors").read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["sha256_source"] == source
        assert entry["revision"] == f"step{step}"
        assert entry["commit"] == world["repo"].branches[f"step{step}"]
        assert entry["tokens"] == step * PYTHIA_TOKENS_PER_STEP
        assert entry["duplicate_of"] == (0 if step == 2 else None)


def qkv_ranges(path: Path, n_layers: int = 2, n_heads: int = 4, d_head: int = 16) -> list[tuple[int, int]]:
    """Per layer, the fused weight's bytes from the first Q row to the last K row (from the header)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    doc = json.loads(raw[8 : 8 + n])
    out = []
    for layer in range(n_layers):
        a, b = doc[f"gpt_neox.layers.{layer}.attention.query_key_value.weight"]["data_offsets"]
        v_rows = (b - a) // (3 * n_heads)  # one head's V rows, last in the tensor
        out.append((8 + n + a, 8 + n + b - v_rows))
    return out


# -- offline: the local Hub cache -------------------------------------------------------


def test_offline_cache_gives_the_local_store(world, tmp_path: Path) -> None:
    out = tmp_path / "store"
    env = base_env(world["root"] / "home", HF_HUB_OFFLINE="1")
    res = run("--source", REPO_ID, "--out", str(out), "--revisions", REVISIONS, env=env)
    assert res.returncode == 0, res.stderr
    assert_same_statistics(world["reference"], out)
    meta = json.loads((out / "meta.json").read_text())
    check_checkpoints(meta, world, source="file")
    assert meta["settings"]["source"] == REPO_ID and meta["settings"]["source_kind"] == "hub"
    assert meta["settings"]["fetch"] is None  # nothing fetched: the cache is read like a folder
    assert meta["model"]["id"] == REPO_ID


def test_offline_errors_are_one_line_and_lose_nothing(world, cli: InProcess, tmp_path: Path) -> None:
    cli.hub(cache=world["root"] / "home" / "hub", offline=True)
    out = tmp_path / "store"
    status, err = cli("--source", REPO_ID, "--out", str(out))
    assert status == 2 and "--revisions" in err and "HF_HUB_OFFLINE" in err
    status, err = cli("--source", "EleutherAI/pythia-none", "--out", str(out), "--revisions", "step0")
    assert status == 2 and "not in the local Hub cache" in err
    assert not out.exists()
    # a revision that is not cached is reported and skipped; the rest are computed
    status, err = cli("--source", REPO_ID, "--out", str(out), "--revisions", "step0,step3,step4")
    assert status == 1
    assert "step3" in err and "not in the local Hub cache" in err
    store = open_store(out)
    assert store.steps.tolist() == [0, 4]
    assert [(f.revision, f.reason) for f in store.meta.failed] == [("step3", "missing")]


# -- online: the fake Hub ---------------------------------------------------------------


def test_online_fetches_only_header_and_qk_ranges(world, hub: FakeHub, tmp_path: Path) -> None:
    out = tmp_path / "store"
    hub.fail_next = 2  # the first two requests get 503: retried
    # the per-head W_QK only (test_online_ov_... reads ov; tests/integration/test_layer_fetch.py the layer matrices)
    res = run("--source", REPO_ID, "--out", str(out), "--matrices", "qk", env=online_env(hub, tmp_path))
    assert res.returncode == 0, res.stderr
    assert "fetched" in res.stderr and "peak scratch disk 0 B" in res.stderr
    assert_same_statistics(world["reference"], out)
    meta = json.loads((out / "meta.json").read_text())
    check_checkpoints(meta, world, source="hub")
    assert meta["settings"]["fetch"]["range_merge_gap"] == 8192
    for step in STEPS:
        commit = world["repo"].branches[f"step{step}"]
        requests = [e for e in hub.resolves("model.safetensors") if f"/{commit}/" in e.path]
        assert all(e.range for e in requests), "a weight file was downloaded whole"
        ranges = [(int(a), int(b) + 1) for a, b in ((e.range or "").removeprefix("bytes=").split("-") for e in requests)]
        if step == 2:  # known from its LFS sha256 as a copy of step 0: nothing fetched
            assert ranges == []
            assert not [e for e in hub.log if f"/{commit}/" in e.path]
        else:
            expected = qkv_ranges(world["suite"] / f"step{step}" / "model.safetensors")
            assert ranges[0][0] == 0 and sorted(ranges[1:]) == expected  # the header, then one range per layer


def test_online_missing_revision_bad_repo_and_dead_network(world, hub: FakeHub, cli: InProcess, tmp_path: Path) -> None:
    cli.hub(endpoint=hub.url)
    out = tmp_path / "store"
    status, err = cli("--source", REPO_ID, "--out", str(out), "--revisions", "step0,step3")
    assert status == 1, err
    assert "step3" in err and "not found" in err
    store = open_store(out)
    assert store.steps.tolist() == [0]
    assert [(f.revision, f.reason) for f in store.meta.failed] == [("step3", "missing")]

    status, err = cli("--source", "EleutherAI/no-such-model", "--out", str(tmp_path / "other"))
    assert status == 2 and "no model repo 'EleutherAI/no-such-model'" in err
    status, err = cli("--source", "not//a-repo", "--out", str(tmp_path / "other"))
    assert status == 2 and "is not a directory, nor a Hub model id" in err

    cli.hub(endpoint="http://127.0.0.1:9")  # nothing listens on port 9
    status, err = cli("--source", REPO_ID, "--out", str(out))
    assert status == 3 and "network failure" in err and "gave up after 3 attempts" in err
    assert open_store(out).steps.tolist() == [0]  # untouched


def test_a_dead_network_before_the_first_checkpoint_says_that_nothing_was_written(cli: InProcess, tmp_path: Path) -> None:
    """No network, no store yet: the error says what failed and that nothing was written (not that the store
    keeps its checkpoints: there is none), and nothing is (no store, no lock or scratch folder beside it)."""
    cli.hub(endpoint="http://127.0.0.1:9")  # nothing listens on port 9
    runs = tmp_path / "runs"
    runs.mkdir()
    status, err = cli("--source", "EleutherAI/pythia-70m", "--out", str(runs / "p70"))
    lines = err.strip().splitlines()
    assert status == 3 and "network failure" in lines[0] and "gave up after 3 attempts" in lines[0], err
    assert lines[1:] == [f"nothing was written to {runs / 'p70'}; run the same command once the Hub can be reached"], err
    assert list(runs.iterdir()) == []


def test_network_failure_mid_run_stops_and_resumes(world, hub: FakeHub, cli: InProcess, tmp_path: Path) -> None:
    cli.hub(endpoint=hub.url)
    reference = tmp_path / "uninterrupted"
    assert cli("--source", REPO_ID, "--out", str(reference))[0] == 0

    out = tmp_path / "store"
    hub.fail_matching = world["repo"].branches["step4"]  # the link dies when step 4 is read
    status, err = cli("--source", REPO_ID, "--out", str(out))
    assert status == 3, err
    assert "network failure" in err and "run the same command to resume" in err
    kept = open_store(out)
    assert [c.step for c in kept.meta.checkpoints] == [0, 1, 2]
    assert kept.meta.failed == []  # not the checkpoint's fault: not listed as failed

    hub.fail_matching = None
    status, err = cli("--source", REPO_ID, "--out", str(out))
    assert status == 0, err
    assert "3 already done" in err
    a, b = open_store(reference), open_store(out)
    assert a.meta.checkpoints == b.meta.checkpoints
    assert a.arrow.equals(b.arrow)
    # the pair (2, 4) that the failure split: step 2 re-read from the Hub, step 4's vectors still held
    assert pq.read_table(reference / "overlaps.parquet").equals(pq.read_table(out / "overlaps.parquet"))


def test_ctrl_c_leaves_a_store_that_resumes(world, hub: FakeHub, cli: InProcess, tmp_path: Path) -> None:
    out = tmp_path / "store"
    hub.delay_s = 1.0  # a slow link, so the run is mid-fetch when interrupted (4 s and more to go, even under load)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwatch.precompute", "--no-progress", "--source", REPO_ID, "--out", str(out)],
        cwd=REPO,
        env=online_env(hub, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test suite started in the background (`cmd &` in a script) ignores SIGINT, and the child would
        # inherit that; Ctrl-C at a terminal is what is simulated here
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        meta = out / "meta.json"
        if meta.is_file() and json.loads(meta.read_text())["checkpoints"]:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "resume" in stderr
    done = len(open_store(out).meta.checkpoints)
    assert 1 <= done < len(STEPS)
    assert not (out.parent / f".{out.name}.fetch").exists()

    hub.delay_s = 0
    cli.hub(endpoint=hub.url)
    status, err = cli("--source", REPO_ID, "--out", str(out))
    assert status == 0, err
    assert_same_statistics(world["reference"], out)
    check_checkpoints(json.loads((out / "meta.json").read_text()), world, source="hub")


# -- the sources themselves --------------------------------------------------------------


def test_open_source_reads_folders_the_hub_cache_offline_and_the_hub_online(world, cli: InProcess, tmp_path: Path) -> None:
    def opened(spec):
        return open_source(spec, scratch=tmp_path / "scratch", fetch=FetchSettings(), meter=Meter())

    assert type(opened(world["suite"])) is LocalSource
    cli.hub(cache=world["root"] / "home" / "hub", offline=True)
    cached = opened(REPO_ID)
    assert cached.list() is None  # a cache cannot list revisions
    assert type(cached) is HubCacheSource and cached.kind == "hub"
    assert cached.fetch_settings is None and cached.default_tokens_per_step() == PYTHIA_TOKENS_PER_STEP
    cli.hub(endpoint="http://127.0.0.1:9")
    online = opened(REPO_ID)
    assert type(online) is HubSource and online.kind == "hub" and online.fetch_settings is not None


def test_hub_source_asks_model_info_once_per_revision_in_any_call_order(
    world, hub: FakeHub, cli: InProcess, tmp_path: Path, caplog
) -> None:
    cli.hub(endpoint=hub.url)
    src = HubSource(REPO_ID, scratch=tmp_path / "scratch", fetch=FetchSettings(range_merge_gap=8192), meter=Meter())
    folder = {s: world["suite"] / f"step{s}" for s in STEPS}
    config = {s: json.loads((folder[s] / "config.json").read_text()) for s in STEPS}
    shape = model_shape(config[0])
    ref = {s: CheckpointRef(s, f"step{s}") for s in STEPS}

    def check(step: int, fetched) -> None:  # the same digest, W_Q and W_K as the folder read from disk
        local = read_folder(folder[step], ref[step], shape, skip=lambda sha: False)
        assert fetched.tensors is not None and local.tensors is not None
        assert fetched.sha256 == local.sha256 and fetched.commit == world["repo"].branches[f"step{step}"]
        for ours, theirs in zip(extract_qk(shape, fetched.tensors), extract_qk(shape, local.tensors), strict=True):
            assert ours.equal(theirs)

    assert src.config(ref[1]) == config[1]  # config, then fetch (the run's first checkpoint)
    check(1, src.fetch(ref[1], shape, skip=lambda sha: False))
    check(4, src.fetch(ref[4], shape, skip=lambda sha: False))  # fetch, then config
    assert src.config(ref[4]) == config[4]
    check(8, src.fetch(ref[8], shape, skip=lambda sha: False))  # fetch alone
    skipped = src.fetch(ref[2], shape, skip=lambda sha: True)  # a known fingerprint: nothing read
    assert skipped.tensors is None and skipped.sha256 == read_folder(folder[2], ref[2], shape, skip=lambda sha: True).sha256
    for step in (1, 4, 8, 2):
        asked = [e for e in hub.log if e.path == f"/api/models/{REPO_ID}/revision/step{step}"]
        assert len(asked) == 1, f"step{step}: model_info asked {len(asked)} times"

    assert "step8" in src.progress_note(ref[8]) and "fetched" in src.progress_note(ref[8])
    caplog.set_level("INFO", logger="precompute")
    src.check_schedule([ref[s] for s in STEPS] + [CheckpointRef(3, "step3")])
    assert "lacks 149 branches of the Pythia schedule" in caplog.text and "outside the Pythia schedule: step3" in caplog.text


# -- other weight formats ---------------------------------------------------------------


def attention_files(folder: Path) -> dict[str, int]:
    """Weight files holding a query_key_value or attention.dense weight (what qk and ov, the default
    matrices, need), and their sizes (from the index, or the single file)."""
    index = next(folder.glob("*.index.json"), None)
    if index is None:
        single = next(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
        return {single.name: single.stat().st_size}
    weight_map = json.loads(index.read_text())["weight_map"]
    names = {f for t, f in weight_map.items() if "query_key_value.weight" in t or "attention.dense.weight" in t}
    return {n: (folder / n).stat().st_size for n in names}


@pytest.mark.parametrize("fmt", ["safetensors-sharded", "bin", "bin-sharded"])
def test_other_formats_read_only_attention_files_with_bounded_disk(fmt: str, cli: InProcess, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    model = neox_model()
    for step in (1, 2, 3):
        perturb(model, step)
        if fmt == "safetensors-sharded":
            model.save_pretrained(suite / f"step{step}", max_shard_size="20KB")
        else:
            save_bin(model, suite / f"step{step}", shards=3 if fmt == "bin-sharded" else 1)
    repo = Repo()
    for step in (1, 2, 3):
        repo.add(f"step{step}", folder_files(suite / f"step{step}"))
    local = tmp_path / "local"
    assert not run_precompute(
        suite, local, RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}})
    ).failed

    with FakeHub() as hub:
        hub.repos["org/formats"] = repo
        cli.hub(endpoint=hub.url)
        out = tmp_path / "hub"
        report = run_precompute(
            "org/formats",
            out,
            RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, matrices=("qk", "ov")),
        )  # no layer matrices
    assert not report.failed and report.computed == [1, 2, 3]
    assert_same_statistics(local, out)
    needed = {s: attention_files(suite / f"step{s}") for s in (1, 2, 3)}
    weight_suffix = ".safetensors" if fmt.startswith("safetensors") else ".bin"
    for step in (1, 2, 3):
        commit = repo.branches[f"step{step}"]
        fetched = {e.path.rsplit("/", 1)[1] for e in hub.log if f"/{commit}/" in e.path and e.path.endswith(weight_suffix)}
        assert fetched == set(needed[step]), "only the files holding attention tensors are read"
    bin_requests = [e for e in hub.log if e.path.endswith(".bin")]
    if fmt.startswith("bin"):
        assert bin_requests and all(e.range is None for e in bin_requests)  # downloaded whole...
        # ...one checkpoint at a time and deleted after reading: the disk peak is the largest
        # checkpoint's attention files, not the suite's
        assert report.peak_disk == max(sum(n.values()) for n in needed.values())
        assert report.peak_disk < sum(sum(n.values()) for n in needed.values())
    else:
        assert report.peak_disk == 0
    assert not (tmp_path / ".hub.fetch").exists()
