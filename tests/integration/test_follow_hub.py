"""Following a Hub repo that still receives checkpoints (`precompute.follow.follow_hub`), on the fake Hub
(`benchmarks.fakehub`, which speaks the Hub API to huggingface_hub on 127.0.0.1): a branch pushed while the
follower runs is added, a branch created but not yet uploaded to is not read, a stop and a restart with
``--follow-until`` end with the store a post-hoc ``precompute`` of the repo writes, byte for byte; a repo
that does not exist is a one-line error.

The follower runs in a thread of this process (no interpreter start-up); tests wait for the state they
assert, never for a moment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants

from benchmarks.fakehub import FakeHub, Repo, folder_files
from headwatch.analysis.store.following import read_status
from headwatch.precompute.__main__ import main
from headwatch.precompute.follow import follow_hub, hub_repo
from headwatch.precompute.job.run import run_precompute
from headwatch.precompute.settings import RunOptions
from headwatch.precompute.sources.hub import own_commit
from tests.integration.conftest import make_suite
from tests.integration.test_follow import assert_same_store, listed

REPO_ID = "lab/tiny-run"
WAIT = 120.0  # seconds a state may take on a loaded 2-core machine before the test fails


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    """The fake Hub as huggingface_hub's endpoint, with a cache and token paths of the test's own."""
    with FakeHub() as server:
        monkeypatch.delenv("HF_TOKEN", raising=False)
        for name in ("HF_TOKEN_PATH", "HF_STORED_TOKENS_PATH", "AGENT_HARNESSES_PATH"):
            monkeypatch.setattr(constants, name, str(tmp_path / "home" / name.lower()))
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "home" / "hub"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HEADWATCH_HUB_RETRIES", "2")
        monkeypatch.setenv("HEADWATCH_HUB_BACKOFF", "0.01")
        yield server


def options() -> RunOptions:
    return RunOptions(device="cpu", progress=False, lens_options={"embeddings": {"on": False}})


def wait_for(condition: Callable[[], bool], what: str, thread: threading.Thread) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert thread.is_alive(), f"the follower ended before {what}"
        assert time.monotonic() < deadline, f"{what} did not happen within {WAIT:.0f} s"
        time.sleep(0.05)


class Following:
    """`follow_hub` in a thread; ``error`` holds what it raised."""

    def __init__(self, store: Path, *, until: int | None = None):
        self.stop = threading.Event()
        self.error: BaseException | None = None

        def target() -> None:
            try:
                follow_hub(REPO_ID, store, options(), poll=0.1, stop=self.stop, until=until)
            except BaseException as exc:  # reported by join()
                self.error = exc

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the follower did not stop"
        assert self.error is None, repr(self.error)


def test_a_pushed_branch_is_added_and_the_store_ends_as_a_posthoc_run(hub: FakeHub, tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", [0, 1, 2])
    repo = Repo()
    repo.add("step0", folder_files(suite / "step0"))
    repo.add("main", folder_files(suite / "step0"))
    hub.repos[REPO_ID] = repo
    store = tmp_path / "followed"

    first = Following(store)
    wait_for(lambda: listed(store) == {0}, "step 0 in the store", first.thread)
    # create_branch before the upload: step1 points at main's commit, which holds step 0's files
    repo.branches["step1"] = repo.branches["main"]
    looks = sum(e.path.endswith("/refs") for e in hub.log)
    wait_for(lambda: sum(e.path.endswith("/refs") for e in hub.log) >= looks + 3, "three more looks", first.thread)
    assert listed(store) == {0}, "a branch still at another branch's commit was read"
    repo.add("step1", folder_files(suite / "step1"))  # the upload lands: a commit of its own
    wait_for(lambda: listed(store) == {0, 1}, "step 1 in the store once uploaded", first.thread)
    first.stop.set()  # SIGTERM's path: the round in flight ends, then the follower stops
    first.join()
    assert (status := read_status(store)) is not None and status.state == "stopped"

    repo.add("step2", folder_files(suite / "step2"))
    second = Following(store, until=2)  # the same command resumes; step 2 is the run's last
    second.join()  # step 2 has landed: one last round, then it stops by itself
    assert (status := read_status(store)) is not None and status.state == "finished"
    assert listed(store) == {0, 1, 2}

    posthoc = tmp_path / "posthoc"
    assert not run_precompute(REPO_ID, posthoc, options()).failed
    assert_same_store(store, posthoc)


def test_a_repo_that_does_not_exist_is_a_one_line_error(hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    store = tmp_path / "store"
    status = main(["--no-progress", "--follow", "--source", "nobody/no-such-model", "--out", str(store), "--poll", "0.1"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert err.splitlines() == [f"error: no model repo 'nobody/no-such-model' on {hub.url} (nor a local directory of that name); "
                                "check the id, or log in (`hf auth login`) if it is private"]  # fmt: skip
    assert not store.exists() and read_status(store) is None


def test_follow_until_is_for_a_hub_repo(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    status = main(["--follow", "--source", str(tmp_path), "--out", str(tmp_path / "store"), "--follow-until", "10"])
    assert status == 2
    assert "--follow-until is for a Hub repo" in capsys.readouterr().err


def test_which_sources_are_hub_repos_and_which_branches_have_landed(tmp_path: Path) -> None:
    assert hub_repo(tmp_path) is None  # an existing folder is a run folder
    assert hub_repo(tmp_path / "not" / "yet") is None  # an absolute path is never a repo id
    assert hub_repo("EleutherAI/pythia-70m") == "EleutherAI/pythia-70m"
    branches = {"main": "c1", "step0": "c0", "step1": "c1", "step2": "c2"}
    assert [b for b in branches if own_commit(b, branches)] == ["step0", "step2"]
