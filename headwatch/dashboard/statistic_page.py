"""What the pages of one statistic over every head share (Animation, Layer view, Architecture heatmaps).

`StatisticChoice`: the statistic a page shows, as its widgets chose it, with the names titles and files give it and
a click on a head that opens the head explorer with it; `open_page`: a page's opening, its title, its two empty
cases (no run; no values of the statistic) and the values it draws, ``(S, n_layers, n_heads)``. A view's own choices
subclass `StatisticChoice` with the widgets it alone has. One of the modules that import streamlit (through
`dashboard.charts`, `dashboard.derived` and `dashboard.viewstate`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import streamlit as st

from headwatch.dashboard import charts, derived, viewstate
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import STATS


@dataclass(frozen=True)
class StatisticChoice:
    """The statistic a page shows: ``matrix`` (``qk`` or ``ov``), ``stat`` (its URL name) and ``k`` (lambda_k's
    index; None for the other statistics)."""

    matrix: str
    stat: str
    k: int | None

    @property
    def label(self) -> str:
        """The statistic as titles say it (lambda_k with its k)."""
        return STATS[self.stat].short(self.k)

    @property
    def name(self) -> str:
        """The statistic as file names say it."""
        return self.stat if self.k is None else f"lambda_{self.k}"

    def open_clicked(self, event: Any, store: Any) -> None:
        """A head clicked on a chart (``event``, its selection) opens in the head explorer on this statistic."""
        charts.open_head_on_click(event, store, stat=self.stat, k=self.k, matrix=self.matrix)


C = TypeVar("C", bound=StatisticChoice)


def open_page(title: str, choose: Callable[[RunFrame], C]) -> tuple[RunFrame, C, np.ndarray] | None:
    """The page titled ``title`` opened: its run, its widgets (``choose``) and the chosen statistic of every head at
    every checkpoint, ``(S, n_layers, n_heads)``; None after saying why on the page when there is no run with
    statistics or no value of the statistic (the empty cases)."""
    st.title(title)
    frame = viewstate.run_frame()
    if frame is None:
        return None
    opts = choose(frame)
    values = derived.stat_values(frame.store, opts.stat, k=opts.k or 0, matrix=opts.matrix)
    if charts.no_values(values, STATS[opts.stat].label, opts.matrix):
        return None
    return frame, opts, values
