"""A run that is still training: the sidebar says so, and open pages show each new checkpoint without a reload.

`watch` draws a fragment (``st.fragment(run_every=...)``) that reruns alone every few seconds: it reads the
store's version (`analysis.store.store_version`, one ``stat`` of ``meta.json``) and its follower's status
(`analysis.store.following`), and says in the sidebar whether the run is live and at which step. Only when
the version differs from the one the page was drawn from does it rerun the whole app, which opens the new
version (the loader caches stores by version) and redraws the page with the new checkpoints. A store that no
follower writes is polled too, less often, so a page opened before training started notices its follower.
"""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

from headwatch.analysis.store import Store, store_version
from headwatch.analysis.store.following import FollowStatus, read_status

LIVE_POLL_SECONDS = 2.0  # while a follower writes the store: a new checkpoint shows within a few seconds
IDLE_POLL_SECONDS = 15.0  # otherwise: notices a follower that starts later, at little cost


def watch(store: Store) -> None:
    """Poll ``store``'s version and its follower's status; rerun the app when the store grew.

    Call it in the sidebar, where its notice is drawn.
    """
    path = Path(store.path)
    status = read_status(path)
    every = LIVE_POLL_SECONDS if status is not None and status.live(time.time()) else IDLE_POLL_SECONDS
    last = int(store.steps[-1]) if len(store.steps) else None
    st.fragment(run_every=every)(_poll)(str(path), store_version(path), last, every)


def _poll(path: str, drawn: int, last: int | None, every: float) -> None:
    """One look: rerun the app if the store changed since it was ``drawn``; else say how live it is."""
    status = read_status(path)
    live = status is not None and status.live(time.time())
    if store_version(path) != drawn or (live and every != LIVE_POLL_SECONDS):
        st.rerun(scope="app")
    if status is not None:
        notice = live_notice(status, last, now=time.time())
        if notice:
            st.caption(notice)


def live_notice(status: FollowStatus, last: int | None, *, now: float) -> str | None:
    """The sidebar's line about the run's follower: live (and at which step), not answering, stopped, or finished
    (at the store's last step, ``last``, which the follower's last round completed); None while it says nothing."""
    at = f"step {last:,}" if last is not None else "no checkpoint yet"
    if status.live(now):
        return (
            f":green-badge[:material/radio_button_checked: Live] training: the store is at {at}; "
            "new checkpoints appear here as they are added."
        )
    if status.state == "following":
        return f":orange-badge[Not answering] the store's follower last looked {now - status.updated:,.0f} s ago, at {at}."
    if status.state == "stopped":
        return f":gray-badge[Stopped] the store's follower stopped at {at}; rerun it to add what the run saved since."
    if status.state == "finished":
        done = f"at {at}: the store holds every checkpoint the run saved" if last is not None else "before its first checkpoint"
        return f":blue-badge[:material/check_circle: Finished] training finished {done}."
    return None
