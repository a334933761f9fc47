"""A run still training, as the sidebar says it (`dashboard.live.live_notice`) from the status a follower writes
(`analysis.store.following`, written by `precompute.follow.write_status`)."""

from __future__ import annotations

import time
from pathlib import Path

from headwatch.analysis.store.following import FollowStatus, read_status, status_path
from headwatch.dashboard.live import live_notice
from headwatch.precompute.follow import write_status


def test_the_follower_status_round_trips_and_goes_stale(tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert read_status(store) is None
    write_status(store, "following", source="runs/x", poll=2.0)
    assert status_path(store).parent == tmp_path and status_path(store).name == ".store.follow.json"
    status = read_status(store)
    assert status is not None and status.state == "following" and status.source == "runs/x" and status.poll == 2.0
    now = time.time()
    assert status.live(now) and status.live(status.updated + 30.0)
    assert not status.live(status.updated + 31.0)  # ten polls of 2 s, at least 30 s
    slow = FollowStatus(state="following", source="x", updated=0.0, poll=10.0, pid=1)
    assert slow.live(100.0) and not slow.live(101.0)
    status_path(store).write_text("{ half written")
    assert read_status(store) is None


def test_the_sidebar_notice() -> None:
    live = FollowStatus(state="following", source="runs/x", updated=1000.0, poll=2.0, pid=1)
    assert "Live" in (live_notice(live, 1536, now=1001.0) or "") and "step 1,536" in (live_notice(live, 1536, now=1001.0) or "")
    assert "no checkpoint yet" in (live_notice(live, None, now=1001.0) or "")
    stale = live_notice(live, 8, now=1100.0) or ""
    assert "Live" not in stale and "100 s ago" in stale
    assert "Stopped" in (live_notice(FollowStatus("stopped", "x", 1000.0, 2.0, 1), 8, now=1001.0) or "")
    finished = FollowStatus("finished", "x", 1000.0, 2.0, 1)
    for now in (1001.0, 1e9):  # said as long as the status stays: a finished run never goes stale
        done = live_notice(finished, 4000, now=now) or ""
        assert "Finished" in done and "training finished at step 4,000" in done and "Live" not in done, done
    assert "finished before its first checkpoint" in (live_notice(finished, None, now=1001.0) or "")
