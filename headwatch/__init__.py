"""headwatch: watch attention heads learn over training.

The ``headwatch`` command (`headwatch.cli`) serves the dashboard, runs the precompute
job, trains a reference run, publishes a store, and describes a store (``info``) or a
run before it starts (``plan``).

``headwatch.HeadwatchCallback`` (`training.watch`, needs the train extra) adds each checkpoint a
``transformers.Trainer`` saves to a store while it trains.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``headwatch.HeadwatchCallback``, imported when first asked for (transformers is not a core requirement)."""
    if name == "HeadwatchCallback":
        from training.watch import HeadwatchCallback

        return HeadwatchCallback
    raise AttributeError(f"module 'headwatch' has no attribute {name!r}")
