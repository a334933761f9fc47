"""The head explorer's head: the widgets above its panels and the record every panel reads (`Head`).

The record holds the head shown, the choices made above the tabs and the head's arrays (`views.head.data.head_arrays`,
with the random-head references of its matrix); `with_both` adds the weight tabs' switch and `other` gives the same
head and choices for the matrix drawn beside the chosen one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from headwatch.dashboard import derived, widgets
from headwatch.dashboard.data import default_steps, loss_curve
from headwatch.dashboard.figures.common import overlay_loss, stacked
from headwatch.dashboard.labels import PER_HEAD_STATS
from headwatch.dashboard.style import step_colours
from headwatch.dashboard.views.head import data

MAX_CHOSEN_STEPS = 8
MAX_COMPARED = 6  # other heads overlaid on the over-training panel
STACK_RIGHT = 90  # px: right margin of every chart over training, for the loss axis (the maps' colour bars lie above)


@dataclass(frozen=True)
class Head:
    """The head shown and what every panel shares: the widgets above the panels, and the head's arrays.

    Attributes:
        frame: the sidebar's run; axis: its time axis.
        matrix: ``qk`` or ``ov`` (URL ``matrix``); both: W_QK and W_OV side by side in every weight panel (the
            weight tabs' switch, URL ``both``, stores with both: `with_both`); layer, head: the head (URL ``layer``,
            ``head``).
        idx: the chosen steps' checkpoint indices (URL ``step``); labels, colours, chosen_x: their names, colours
            and places on the time axis. pairs: other heads overlaid (URL ``cmp``).
        show_loss, curve: the loss toggle (URL ``loss``) and the loss curve, on every chart over training.
        hist, mu, sigma, kl: ``(S, 202)``, ``(S,)`` x 3: the standardized histogram, mean, sigma and D_KL.
        lam: ``(S, d_head)`` lambda_k = s_k^2.
        refs: the random heads of this matrix (its own init scale).
        key: the suffix of its charts' keys (``_other``: the matrix beside the chosen one).
    """

    frame: Any
    axis: Any
    matrix: str
    both: bool
    layer: int
    head: int
    idx: list[int]
    labels: list[str]
    colours: list[str]
    chosen_x: list[float]
    pairs: list[tuple[int, int]]
    show_loss: bool
    curve: Any
    hist: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    kl: np.ndarray
    lam: np.ndarray
    refs: Any
    key: str = ""  # its charts' key suffix: "" for the matrix chosen, "_other" for the one drawn beside it

    @property
    def store(self):
        return self.frame.store

    @property
    def w_name(self) -> str:
        return "W_QK" if self.matrix == "qk" else "W_OV"

    @property
    def name(self) -> str:
        return f"layer {self.layer}, head {self.head}"

    @property
    def shown(self) -> str:
        """What every chart's title names, the matrix included: an exported OV figure says it is one."""
        return f"{self.name} · {self.w_name}"

    def title(self, what: str) -> str:
        """A weight panel's chart title: run, head and matrix, then ``what`` (the statistic and the steps); on a second
        line when W_QK and W_OV stand side by side, where one line does not fit half the page."""
        return f"{self.frame.run} · {self.shown}{'<br>' if self.both else ' · '}{what}"

    def shown_for(self, stat: str) -> str:
        """What a chart of ``stat`` names: the head and its matrix, or the head alone for a statistic of the head itself
        (a forward-lens score, the refined LLC), which no matrix has."""
        return self.name if stat in PER_HEAD_STATS else self.shown

    @property
    def tag(self) -> str:
        return f"L{self.layer}H{self.head}" + ("" if self.matrix == "qk" else f"-{self.matrix.upper()}")

    @property
    def who(self) -> dict[str, Any]:
        """The columns that name this head in its CSV tables (`views.head.data`'s tables): run, layer, head, matrix."""
        return dict(run=self.frame.run, layer=self.layer, head=self.head, matrix=self.matrix)

    def over_time(self, fig):
        """A chart over training: the loss on it when asked, margins shared with the page's others (`stacked`)."""
        return stacked(overlay_loss(fig, self.axis, *self.curve) if self.show_loss and self.curve else fig, right=STACK_RIGHT)


def pick_head(frame) -> Head:
    """The widgets above the panels (matrix; layer, head, chosen steps, the loss in one row; other heads), and the
    head's arrays (views of the cached store)."""
    store = frame.store
    axis = frame.axis()
    steps = [int(s) for s in store.steps]
    c_matrix, _ = st.columns([2, 6], vertical_alignment="bottom")
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path), where=c_matrix)
    c_layer, c_head, c_steps, c_loss = st.columns([1, 1, 3, 3], vertical_alignment="bottom")
    layer = widgets.select("layer", "Layer", list(range(store.n_layers)), 0, where=c_layer)
    head = widgets.select("head", "Head", list(range(store.n_heads)), 0, where=c_head)
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None, where=c_loss)  # on every chart over training
    chosen = widgets.multiselect(
        "step",
        "Chosen steps (marked in every panel)",
        steps,
        default_steps(store.steps),
        fmt=lambda s: f"{s:,}",
        where=c_steps,
        max_selections=MAX_CHOSEN_STEPS,
    )
    heads_all = [(lay, hd) for lay in range(store.n_layers) for hd in range(store.n_heads) if (lay, hd) != (layer, head)]
    compared = widgets.multiselect(
        "cmp",
        "Overlay other heads, from any layer (dotted on every panel over training)",
        [f"L{lay}H{hd}" for lay, hd in heads_all],
        [],
        fmt=lambda c: c.replace("H", " H"),
        max_selections=MAX_COMPARED,
        help="In the link as cmp=L2H3 (repeatable)",
    )
    if not chosen:
        st.caption("No step chosen: pick at least one to draw the distribution and spectrum at fixed steps.")
    idx = [steps.index(s) for s in chosen]
    return Head(
        frame=frame,
        axis=axis,
        matrix=matrix,
        both=False,  # the weight tabs' own switch (`with_both`)
        layer=layer,
        head=head,
        idx=idx,
        labels=[f"step {s:,}" for s in chosen],
        colours=step_colours(len(chosen)),
        chosen_x=[float(axis.x[i]) for i in idx],
        pairs=[(int(c[1:].split("H")[0]), int(c.split("H")[1])) for c in compared],
        show_loss=show_loss,
        curve=curve,
        **_arrays(store, matrix, layer, head),
    )


def _arrays(store, matrix: str, layer: int, head: int) -> dict[str, Any]:
    """One head's arrays of one matrix (`views.head.data.head_arrays`) and the random heads of that matrix: what
    `Head` holds per matrix."""
    return dict(**data.head_arrays(store, matrix=matrix, layer=layer, head=head), refs=derived.references(store, matrix=matrix))


def with_both(h: Head) -> Head:
    """The switch of the weight tabs (P(w), spectrum, leading eigenvalues) that draws each of their panels for W_QK and
    W_OV side by side (URL ``both``, on by default; stores with both matrices): ``h`` with its answer. The statistic
    tab draws both matrices on one pair of axes whatever it says, so the switch is not on that tab."""
    both = {"qk", "ov"} <= set(h.store.meta.matrices) and widgets.toggle(
        "both",
        "Both W_QK and W_OV",  # a longer label is cut short at 1,024 px
        True,
        help="Every weight panel twice, side by side: the matrix chosen on the left, the other on the right, one load "
        "(off: the matrix chosen alone, both=0 in the link)",
    )
    return dataclasses.replace(h, both=both)


def other(h: Head) -> Head:
    """The same head and choices for the other matrix, drawn beside the chosen one (``both``)."""
    matrix = "ov" if h.matrix == "qk" else "qk"
    return dataclasses.replace(h, matrix=matrix, key="_other", **_arrays(h.store, matrix, h.layer, h.head))
