"""The files beside a run's checkpoints that say how far the run is (read by `precompute.follow`).

- ``run-started.json``: written by ``headwatch train`` when it starts: ``run.json`` less wall time and losses.
- ``run.json``: written by ``headwatch train`` last: the run has finished.
- ``training-finished.json``: written by `training.watch.HeadwatchCallback` when a Trainer's training ends.

A checkpoint folder itself says it is complete by its files (`precompute.sources.checkpoints.incomplete_reason`).
"""

from __future__ import annotations

RUN_FILE = "run.json"
RUN_STARTED_FILE = "run-started.json"
FINISHED_FILE = "training-finished.json"
