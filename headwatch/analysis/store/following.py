"""Whether a store is growing: the status a follower (`precompute.follow`) writes beside the store.

``.NAME.follow.json`` next to the store ``NAME`` (beside it, not in it: a commit swaps the store's folder
whole) holds what the follower is doing and when it last looked at its run folder. The follower rewrites it,
atomically, at every look (every few seconds), so a follower that was killed leaves a status that goes stale.
The dashboard reads it to say that a run is live.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

FollowState = Literal["following", "finished", "stopped"]
STALE_LOOKS = 10  # a status older than this many polls (and 30 s) is a follower that stopped answering
STALE_SECONDS = 30.0


def status_path(store: str | Path) -> Path:
    """Where the follower of ``store`` writes its status: ``.NAME.follow.json`` beside it."""
    store = Path(store)
    return store.parent / f".{store.name}.follow.json"


@dataclass(frozen=True)
class FollowStatus:
    """What a store's follower said last.

    Attributes:
        state: ``following`` (the run trains; new checkpoints are added), ``finished`` (the run said it
            finished and the store has every checkpoint) or ``stopped`` (a signal, or the trainer is gone).
        source: the run folder followed, as given.
        updated: when the follower last looked at the run folder (seconds since the epoch).
        poll: seconds between its looks.
        pid: the follower's process.
    """

    state: FollowState
    source: str
    updated: float
    poll: float
    pid: int

    def live(self, now: float) -> bool:
        """Following, and heard from within `STALE_LOOKS` polls (at least `STALE_SECONDS`)."""
        return self.state == "following" and now - self.updated <= max(STALE_LOOKS * self.poll, STALE_SECONDS)

    def to_json(self) -> str:
        return json.dumps(asdict(self)) + "\n"


def read_status(store: str | Path) -> FollowStatus | None:
    """The status beside ``store``, or None when there is none or it cannot be read (being replaced)."""
    try:
        record = json.loads(status_path(store).read_text())
        return FollowStatus(
            state=record["state"],
            source=str(record["source"]),
            updated=float(record["updated"]),
            poll=float(record["poll"]),
            pid=int(record["pid"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
