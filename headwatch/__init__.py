"""headwatch: watch attention heads learn over training.

One package, four parts (docs/layout.md): `headwatch.analysis` (pure computation and the store format),
`headwatch.precompute` (the job that reads checkpoints and writes a store), `headwatch.dashboard` (the Streamlit
app's views) and `headwatch.training` (the reference runs); the ``headwatch`` command (`headwatch.cli`) serves the
dashboard, runs the job, trains a reference run, publishes a store, and describes a store (``info``) or a run before
it starts (``plan``).

In a notebook::

    from headwatch import open_store

    store = open_store("data/induction-d128")
    store.array("stable_rank", matrix="qk")  # (steps, layers, heads)

``headwatch.HeadwatchCallback`` (`headwatch.training.watch`, needs the train extra) adds each checkpoint a
``transformers.Trainer`` saves to a store while it trains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["HeadwatchCallback", "Store", "StoreError", "open_store"]

if TYPE_CHECKING:  # imported when first asked for: ``headwatch --help`` and the job's workers need neither
    from headwatch.analysis.errors import StoreError
    from headwatch.analysis.store import Store, open_store
    from headwatch.training.watch import HeadwatchCallback


def __getattr__(name: str) -> Any:
    """The public names above, imported when first asked for (transformers is not a core requirement, and pandas and
    pyarrow are not needed to print the command's help)."""
    if name in ("open_store", "Store"):
        from headwatch.analysis import store

        return getattr(store, name)
    if name == "StoreError":
        from headwatch.analysis.errors import StoreError

        return StoreError
    if name == "HeadwatchCallback":
        from headwatch.training.watch import HeadwatchCallback

        return HeadwatchCallback
    raise AttributeError(f"module 'headwatch' has no attribute {name!r}")
