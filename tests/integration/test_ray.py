"""``--executor ray``: the store a Ray cluster computes is the local executor's, bit for bit.

One local Ray cluster (2 CPUs, 127.0.0.1, no dashboard) serves the whole module; it is
started by the first test that needs it and shut down at the module's end. The local
executor's stores, which the tests compare against, are themselves checked against
numpy in test_precompute.py. The refined LLC's checkpoints run as tasks too (the driver computes
none of them) to the local store's estimates, and a job's arrays, read-only out of Ray's object
store, become tensors without torch's warning. Faults: a worker process killed mid-task (Ray retries the
task), a driver killed mid-run (the same command resumes), and a Hub source on the
fake Hub, whose address reaches the tasks through the forwarded environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.errors import ClusterError
from headwatch.precompute.__main__ import main
from headwatch.precompute.job.context import tensor_of
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RayOptions, RunOptions
from tests.integration.conftest import REPO, make_suite, neox_model, perturb

pytestmark = pytest.mark.slow

REPO_ID = "EleutherAI/pythia-tiny"


def _require_ray():
    try:
        import ray
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("ray is missing in CI: requirements-precompute.txt pins it (pip install -r requirements-dev.txt)")
        pytest.skip("ray is not installed (pip install -r requirements-precompute.txt); CI fails instead of skipping")
    return ray


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A 2-CPU Ray cluster on 127.0.0.1 that this process is connected to; its GCS address, for
    drivers in other processes."""
    ray = _require_ray()
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=200 << 20,
        logging_level="WARNING",
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def options(executor: Literal["local", "ray"], **ray: Any) -> RunOptions:
    return RunOptions(
        device="cpu", progress=False, lens_options={"embeddings": {"on": False}}, executor=executor, ray=RayOptions(**ray)
    )


def assert_identical(a: Path, b: Path) -> None:
    """The two stores' tables are equal value for value (types and row groups included) and their
    meta.json agree (the executor is not recorded)."""
    for name in ("heads.parquet", "overlaps.parquet", "layers.parquet"):
        ta, tb = pq.read_table(a / name), pq.read_table(b / name)
        assert ta.num_rows > 0
        assert ta.equals(tb), name
    assert json.loads((a / "meta.json").read_text()) == json.loads((b / "meta.json").read_text())


def bits(table: pa.Table) -> bytes:
    """The table as Arrow IPC bytes: equal for equal schemas and values bit for bit, NaN included (which
    ``Table.equals`` counts unequal to itself: the chains' diagnostics of a short chain are NaN)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return sink.getvalue().to_pybytes()


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> Path:
    """Seven checkpoints: step 8 carries step 4's weights byte for byte, step 32 has no weights."""
    root = make_suite(tmp_path_factory.mktemp("ray") / "suite", [0, 1, 2, 4, 8, 16], duplicate={8: 4})
    (root / "step32").mkdir()
    return root


@pytest.fixture(scope="module")
def local_store(series: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "store"
    report = run_precompute(series, out, options("local"))
    assert report.duplicates == {8: 4} and [f.step for f in report.failed] == [32]
    return out


def test_ray_store_is_the_local_store(cluster: str, series: Path, local_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "store"
    report = run_precompute(series, out, options("ray"))
    # step 8 was submitted before step 4 was committed, so its task computed rows the driver dropped
    assert report.computed == [0, 1, 2, 4, 16] and report.duplicates == {8: 4}
    assert [(f.step, f.reason) for f in report.failed] == [(32, "missing")]
    assert_identical(local_store, out)


def test_ray_store_with_the_forward_lens_is_the_local_store(cluster: str, tmp_path: Path) -> None:
    from headwatch.analysis.store.lenses.attention import ATTENTION_TABLES
    from tests.integration.test_forward_lens import byte_run

    run = byte_run(tmp_path, [0, 1, 2, 4])
    lens: dict[str, Any] = dict(lenses=("attention",), eval_sequences=4, eval_length=32)
    stores = {}
    for executor in ("local", "ray"):
        stores[executor] = tmp_path / executor
        report = run_precompute(run, stores[executor], replace(options(executor), **lens))
        assert report.computed == [0, 1, 2, 4] and not report.failed
    for name in ("heads.parquet", *(spec.file for spec in ATTENTION_TABLES)):
        ta, tb = pq.read_table(stores["local"] / name), pq.read_table(stores["ray"] / name)
        assert ta.num_rows > 0 and ta.equals(tb), name
    assert json.loads((stores["local"] / "meta.json").read_text()) == json.loads((stores["ray"] / "meta.json").read_text())


def test_ray_refined_llc_runs_as_tasks_and_is_the_local_store(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refined LLC at three checkpoints under two distributions: the Ray store's estimates equal the local
    store's value for value, and the driver computed none of them (the local run's driver computed every one)."""
    from headwatch.analysis.store.lenses.llc import LLC, LLC_CHAINS, LlcOptions, SamplerSettings
    from headwatch.precompute.lenses import llc
    from tests.integration.test_forward_lens import byte_run

    run = byte_run(tmp_path, [0, 1, 2, 4], hidden=32, layers=2, heads=2)
    sampler = SamplerSettings(chains=2, burnin=0, draws=2, sequences=4, batch_size=2)
    asked = LlcOptions(steps="0,2,4", sampler=sampler, data="text,repeats")
    # a Ray worker imports the lens module afresh: only a call in this process, the driver, is counted
    in_driver: list[tuple[int, tuple[str, ...]]] = []
    original = llc.checkpoint_llc

    def counted(folder: Path, step: int, *args: Any, **kwargs: Any) -> Any:
        in_driver.append((step, tuple(d.name for d in kwargs["data"])))
        return original(folder, step, *args, **kwargs)

    monkeypatch.setattr(llc, "checkpoint_llc", counted)
    stores, computed_here = {}, {}
    for executor in ("local", "ray"):
        base = options(executor)
        stores[executor] = tmp_path / executor
        in_driver.clear()
        report = run_precompute(
            run,
            stores[executor],
            replace(base, lenses=("llc",), eval_sequences=4, eval_length=32, lens_options={**base.lens_options, "llc": asked}),
        )
        assert report.computed == [0, 1, 2, 4] and not report.failed
        assert report.lenses["llc"] == [0, 2, 4]
        computed_here[executor] = list(in_driver)
    every = [(step, ("text", "repeats")) for step in (0, 2, 4)]
    assert computed_here == {"local": every, "ray": []}
    for name in ("heads.parquet", LLC.file, LLC_CHAINS.file):
        ta, tb = pq.read_table(stores["local"] / name), pq.read_table(stores["ray"] / name)
        assert ta.num_rows > 0 and bits(ta) == bits(tb), name
    llc_rows = pq.read_table(stores["ray"] / LLC.file)
    assert sorted(set(zip(llc_rows["step"].to_pylist(), llc_rows["data"].to_pylist(), strict=True))) == sorted(
        (step, data) for step, names in every for data in names
    )

    def without_seconds(store: Path) -> dict[str, Any]:
        """meta.json with the refined LLC's seconds taken out (each run measures its own), which must cover the steps."""
        meta = json.loads((store / "meta.json").read_text())
        assert set(meta["llc"].pop("seconds")) == {"0", "2", "4"}
        for record in meta["llc"]["data"].values():
            assert set(record.pop("seconds")) == {"0", "2", "4"}
        return meta

    assert without_seconds(stores["local"]) == without_seconds(stores["ray"])


def test_a_read_only_array_from_the_object_store_becomes_a_tensor_without_a_warning(cluster: str) -> None:
    """A task's job arrays come out of Ray's object store read-only; `tensor_of` copies those, and only those."""
    ray = _require_ray()
    tokens = np.arange(12, dtype=np.int64).reshape(3, 4)
    got = ray.get(ray.put(tokens))
    assert not got.flags.writeable  # as a task receives its job's arrays
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "The given NumPy array is not writable"
        tensor = tensor_of(got)
    assert torch.equal(tensor, torch.from_numpy(tokens)) and not np.shares_memory(tensor.numpy(), got)
    assert np.shares_memory(tensor_of(tokens).numpy(), tokens)  # a writable array is not copied


def test_worker_killed_mid_task_is_retried(
    cluster: str,
    series: Path,
    local_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "died"
    monkeypatch.setenv("HEADWATCH_RAY_DIE_ONCE", str(marker))  # forwarded to the tasks
    out = tmp_path / "store"
    report = run_precompute(series, out, options("ray", max_retries=2))
    assert marker.exists(), "no worker died: the hook did not run"
    assert report.computed == [0, 1, 2, 4, 16]
    assert_identical(local_store, out)


def test_worker_dying_past_its_retries_stops_the_run_and_keeps_the_store(
    cluster: str,
    series: Path,
    local_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HEADWATCH_RAY_DIE_ONCE", str(tmp_path / "died"))
    out = tmp_path / "store"
    with pytest.raises(ClusterError, match="after 0 retries"):
        run_precompute(series, out, options("ray", max_retries=0))
    assert n_listed(out) < 7  # stopped at the dead task; what was committed before it is a store
    monkeypatch.delenv("HEADWATCH_RAY_DIE_ONCE")
    run_precompute(series, out, options("ray"))
    assert_identical(local_store, out)


def test_several_sources_in_one_command(cluster: str, series: Path, local_store: Path, tmp_path: Path) -> None:
    other = make_suite(tmp_path / "other", [0, 3])
    status = main(
        [
            "--no-progress",
            "--no-embeddings",
            "--device",
            "cpu",
            "--executor",
            "ray",
            "--source",
            str(series),
            "--source",
            str(other),
            "--out",
            str(tmp_path / "stores"),
        ]
    )
    assert status == 1  # step 32 of the first suite has no weights
    assert_identical(local_store, tmp_path / "stores" / "suite")
    assert [c["step"] for c in json.loads((tmp_path / "stores" / "other" / "meta.json").read_text())["checkpoints"]] == [0, 3]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0"}
    return subprocess.run(
        [sys.executable, "-m", "headwatch.precompute", "--no-progress", "--device", "cpu", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def n_listed(store: Path) -> int:
    try:
        return len(json.loads((store / "meta.json").read_text())["checkpoints"])
    except (OSError, ValueError):
        return 0


def slow_series(tmp_path: Path) -> tuple[Path, list[int], Path]:
    """Eight checkpoints large enough that a run can be stopped between commits, and the local store
    of them (what an interrupted Ray run must end as)."""
    src = tmp_path / "src"
    model = neox_model(hidden=256, layers=4, heads=8)
    steps = [0, 1, 2, 4, 8, 16, 32, 64]
    for step in steps:
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")
    reference = tmp_path / "local"
    run_precompute(src, reference, options("local"))
    return src, steps, reference


def test_driver_killed_resumes(cluster: str, tmp_path: Path) -> None:
    src, steps, reference = slow_series(tmp_path)

    out = tmp_path / "ray"
    args = ["--source", str(src), "--out", str(out), "--executor", "ray", "--ray-address", cluster]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwatch.precompute", "--no-progress", "--device", "cpu", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while n_listed(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed; make checkpoints larger"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = n_listed(out)
    assert 2 <= done < len(steps)

    res = cli(*args)
    assert res.returncode == 0, res.stderr
    assert f"{done} already done" in res.stderr
    assert_identical(reference, out)


def test_hub_source_through_the_fake_hub(cluster: str, tmp_path: Path) -> None:
    steps = [0, 1, 2, 4]
    suite = make_suite(tmp_path / "suite", steps, duplicate={2: 0})
    repo = Repo()
    for step in steps:
        repo.add(f"step{step}", folder_files(suite / f"step{step}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
    with FakeHub() as hub:
        hub.repos[REPO_ID] = repo
        env.update(
            HF_HOME=str(tmp_path / "home"),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_ENDPOINT=hub.url,
            HEADWATCH_HUB_RETRIES="3",
            HEADWATCH_HUB_BACKOFF="0.01",
        )
        local = cli("--source", REPO_ID, "--out", str(tmp_path / "local"), env=env)
        assert local.returncode == 0, local.stderr
        served = len(hub.log)
        ray = cli("--source", REPO_ID, "--out", str(tmp_path / "ray"), "--executor", "ray", "--ray-address", cluster, env=env)
        assert ray.returncode == 0, ray.stderr
        assert len(hub.log) > served  # the tasks fetched from this Hub (HF_ENDPOINT was forwarded to them)
    assert_identical(tmp_path / "local", tmp_path / "ray")
    meta = json.loads((tmp_path / "ray" / "meta.json").read_text())
    assert [c["duplicate_of"] for c in meta["checkpoints"]] == [None, None, 0, None]
    assert "bytes" in ray.stderr or "fetched" in ray.stderr  # the tasks' transfers reach the driver's report


def test_unreachable_cluster_is_one_line_and_writes_nothing(series: Path, tmp_path: Path) -> None:
    _require_ray()
    out = tmp_path / "store"
    res = cli("--source", str(series), "--out", str(out), "--executor", "ray", "--ray-address", "127.0.0.1:1", timeout=120)
    assert res.returncode == 3, res.stderr
    assert "nothing answers at --ray-address '127.0.0.1:1'" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


def gcs_server_pid(root: int) -> int:
    """The pid of the `gcs_server` process among `root`'s descendants (read from /proc)."""
    parent: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            parent[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            names[int(entry.name)] = name

    def descends(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parent.get(pid, 0)
        return False

    found = [pid for pid, name in names.items() if name.startswith("gcs_server") and descends(pid)]
    assert len(found) == 1, f"expected one gcs_server under {root}, found {found}"
    return found[0]


def test_lost_cluster_stops_the_run_and_keeps_every_committed_checkpoint(tmp_path: Path) -> None:
    """A cluster of its own (`ray.init` in a subprocess), whose head process is killed once the
    driver has committed two checkpoints: the driver ends with exit status 3 and one clear line, the
    store holds what was committed, and the same command with the local executor completes it."""
    _require_ray()
    src, steps, reference = slow_series(tmp_path)

    # The cluster's head runs in a process group of its own (killed whole at the end). The driver runs
    # beside it as on a node of its own: its raylet outlives the head's GCS server, which is killed.
    head = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ray, sys, time; ray.init(address='local', num_cpus=2, include_dashboard=False, "
            "_node_ip_address='127.0.0.1', object_store_memory=100 << 20, logging_level='ERROR'); "
            "print(ray.get_runtime_context().gcs_address, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, "RAY_AUTH_MODE": "token"},
    )  # Ray's default for a new local cluster, said aloud
    out = tmp_path / "store"
    assert head.stdout is not None  # stdout=PIPE
    try:
        address = head.stdout.readline().strip()
        assert address, "the cluster's head did not start"
        args = ["--source", str(src), "--out", str(out), "--executor", "ray", "--ray-address", address]
        env = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0", "RAY_AUTH_MODE": "token"}
        driver = subprocess.Popen(
            [sys.executable, "-m", "headwatch.precompute", "--no-progress", "--device", "cpu", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 180
        while n_listed(out) < 2 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert driver.poll() is None, f"the run ended before the cluster could be lost: {driver.communicate()[1]}"
        os.kill(gcs_server_pid(head.pid), signal.SIGKILL)  # the head's control store: the cluster is gone
        _, stderr = driver.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
    assert driver.returncode == 3, stderr
    assert "lost the Ray cluster" in stderr and "Traceback" not in stderr
    done = n_listed(out)
    assert 2 <= done < len(steps)
    run_precompute(src, out, options("local"))  # resumes from the committed checkpoints
    assert_identical(reference, out)
