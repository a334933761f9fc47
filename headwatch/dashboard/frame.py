"""The frame of one app run: what the shared sidebar chose (store, run, time axis) and offered (every run).

app.py builds one `Frame` per run and hands it to the view (`dashboard.viewstate`), where
every page reads it with ``viewstate.frame()`` or ``viewstate.run_frame()``. Pure: no
streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from headwatch.analysis.store import Store
from headwatch.dashboard.data import Scale, StepAxis, Unit, step_axis


@dataclass(frozen=True)
class Frame:
    """What the shared sidebar chose for this run: the store and the training-time axis.

    Attributes:
        store: the opened store, or None when none is available.
        run: its ``run`` name (URL value).
        unit: ``step`` or ``tokens``; scale: ``linear`` or ``log``.
        runs: every run the sidebar offers, name -> store folder (`dashboard.loader.runs`).
    """

    store: Store | None
    run: str | None
    unit: Unit = "step"
    scale: Scale = "linear"
    runs: dict[str, Path] = field(default_factory=dict)

    def axis(self) -> StepAxis:
        """The training-time axis of the chosen store (`dashboard.data.step_axis`)."""
        assert self.store is not None
        return step_axis(self.store, unit=self.unit, scale=self.scale)

    def empty_reason(self) -> str | None:
        """Why a page that shows statistics has nothing to show, or None when the store has checkpoints."""
        if self.store is None:
            return "No run to show: pick or create a statistics store (see the sidebar)."
        if len(self.store.steps) == 0:
            return "This run has no checkpoints with statistics yet."
        return None

    def opened(self) -> RunFrame | None:
        """This frame with its store, typed as present (None when `empty_reason` has a reason)."""
        if self.store is None or self.run is None or self.empty_reason() is not None:
            return None
        return RunFrame(self.store, self.run, self.unit, self.scale, self.runs)


@dataclass(frozen=True)
class RunFrame(Frame):
    """A `Frame` whose store is open and has checkpoints: what a page that shows statistics works with."""

    store: Store
    run: str
