"""Circuits: how heads wire together over training, from the weights (Q-, K- and V-composition between heads).

The layout (`main`), the composition, scale, step, head and number of partners as one frozen record, and one
function per panel. What the panels say about paths and partners is computed in `analysis.findings.paths`
(previous-token -> induction pairs, a head's strongest partners) and `views.circuits.data` (the scores as a matrix
of heads, the induction paths ringed, the tables); the composition scores are the store's (composition.parquet),
the figures `views.circuits.figures`'.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np
import streamlit as st

from headwatch.analysis.findings.paths import Role, partners, types_at
from headwatch.analysis.store.lenses.composition import COMPOSITION, COMPOSITION_KINDS
from headwatch.dashboard import charts, export, viewstate, widgets
from headwatch.dashboard.views.circuits import data
from headwatch.dashboard.views.circuits import figures as figs
from headwatch.families.registry import folded_note

SCALES = {"random": "× random heads", "score": "raw score (0 to 1)"}
TOP = [3, 5, 8]
FORMULAS = {
    "q": "||W_QK,B^T W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F)",
    "k": "||W_QK,B W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F)",
    "v": "||W_OV,B W_OV,A||_F / (||W_OV,B||_F ||W_OV,A||_F)",
}


def main() -> None:
    st.title("Circuits")
    # --- empty case: no run, no composition scores, or one layer ---
    frame = viewstate.run_frame()
    if frame is None or no_composition(frame.store):
        return

    # --- widgets ---
    view = pick_view(frame.store)
    scores = frame.store.require(COMPOSITION, view.kind)  # (S, L, H, L, H) over store.steps, NaN without a row

    # --- panel: the composition matrix, animated over training ---
    matrix_panel(frame, view, scores)

    # --- panel: one head's strongest sources and targets over training ---
    partners_panel(frame, view, scores)


def no_composition(store) -> bool:
    """Whether there is nothing to show (no composition scores, or one layer); says why and how to add them."""
    if not store.has(COMPOSITION) or not data.composition_steps(store):
        st.info(
            "This store has no composition scores (composition.parquet). Add them with `python -m headwatch.precompute --source "
            f"SOURCE --out {store.path} --lenses composition`: every checkpoint already in the store gets its rows "
            "from the weights (docs/precompute.md, 'Composition scores').",
            icon=":material/hub:",
        )
        return True
    if store.n_layers < 2:
        st.info("Composition joins heads of different layers; this model has one layer.")
        return True
    return False


@dataclass(frozen=True)
class CircuitsView:
    """What the Circuits page shows (its widgets).

    Attributes:
        kind: ``q``, ``k`` or ``v`` composition (URL ``kind``); scale: ``random`` or ``score`` (URL ``scale``).
        baseline: the mean score of independent Gaussian heads of the model's shapes for ``kind`` (meta.json
            ``composition.baseline``), or None.
        steps: the steps with composition rows; step: the frame shown (URL ``step``).
        layer, head: the head whose partners are shown (URL ``layer``, ``head``); top: how many (URL ``top``).
    """

    kind: str
    scale: str
    baseline: float | None
    steps: list[int]
    step: int
    layer: int
    head: int
    top: int

    @property
    def divisor(self) -> float:
        """What the scores are divided by: the random-heads mean on the ``random`` scale, else 1."""
        return float(self.baseline) if self.scale == "random" and self.baseline else 1.0

    @property
    def unit(self) -> str:
        name = figs.KIND_NAMES[self.kind]
        return f"{name} / random-heads mean" if self.divisor != 1.0 else f"{name}, 0 to 1"

    @property
    def unit_short(self) -> str:
        return "× random" if self.divisor != 1.0 else "score"


def pick_view(store) -> CircuitsView:
    """The composition, scale and step in one row; the head and the number of partners in a second."""
    info = store.meta.composition or {}
    steps = data.composition_steps(store)
    c_kind, c_scale, c_step = st.columns([2, 2, 4], vertical_alignment="bottom")
    kind = widgets.select(
        "kind", "Composition", list(COMPOSITION_KINDS), "k", kind="radio", fmt=figs.KIND_NAMES.__getitem__, where=c_kind
    )
    baseline = (info.get("baseline") or {}).get(kind)
    scale = widgets.select(
        "scale",
        "Scale",
        list(SCALES) if baseline else ["score"],
        "random" if baseline else "score",
        kind="radio",
        fmt=SCALES.__getitem__,
        where=c_scale,
    )
    step = widgets.select(
        "step",
        "Step (the frame shown and linked; Play runs on from it in the browser)",
        steps,
        steps[-1],
        kind="select_slider",
        fmt=lambda s: f"{s:,}",
        where=c_step,
    )
    n_layers, n_heads = store.n_layers, store.n_heads
    c_layer, c_head, c_top = st.columns([1, 1, 2])
    layer = widgets.select("layer", "Head: layer", list(range(n_layers)), n_layers - 1, where=c_layer)
    head = widgets.select("head", "Head", list(range(n_heads)), 0, where=c_head)
    top = widgets.select("top", "Strongest partners shown", TOP, 5, kind="radio", where=c_top)
    return CircuitsView(kind=kind, scale=scale, baseline=baseline, steps=steps, step=step, layer=layer, head=head, top=top)


def matrix_panel(frame, view: CircuitsView, scores: np.ndarray) -> None:
    """The composition matrix between every pair of heads, animated over training, the induction paths ringed.

    Args:
        scores: ``(S, L, H, L, H)`` over ``store.steps`` (composition.parquet), NaN without a row.
    """
    store, kind, steps, step = frame.store, view.kind, view.steps, view.step
    name = figs.KIND_NAMES[kind]
    at = data.rows_of(store, steps)
    matrix = data.pair_matrix(scores[at]) / view.divisor  # (S', N targets, N sources)
    paths = data.ringed_paths(store, steps, at)
    types = types_at(store, steps)
    top_k = (store.meta.composition or {}).get("top")
    st.subheader(f"{name} between every pair of heads")
    fig = figs.composition_animation(
        matrix,
        steps=steps,
        start=steps.index(step),
        n_heads=store.n_heads,
        kind=kind,
        unit=view.unit,
        paths=paths,
        types=types,
        divisor=view.divisor,
        title=f"{frame.run} · {name} ({view.unit_short})",
    )
    charts.chart(
        fig,
        "composition",
        title=f"{frame.run} · {name} ({view.unit_short})",
        filename=export.safe_name(frame.run, "composition", kind, view.scale, "step", step),
        csv=lambda: data.pairs_csv(frame.run, scores[at], steps, kind, view.divisor),
    )
    charts.follow_play("composition", step)
    charts.open_in_new_tab("composition", pair_link(frame.run))
    ratio = (
        f"divided by {view.baseline:.4g}, the mean score of independent Gaussian heads of this model's shapes (1 = random)"
        if view.divisor != 1.0
        else "between 0 and 1"
    )
    ring = (
        " Red squares: for each head that holds the induction type at that step, the previous-token source (same step, "
        "head_types.parquet) with the largest K-composition into it: the path its induction circuit runs through. The "
        "hover gives each cell's score, its ratio to random heads and both heads' types."
        if paths is not None
        else " (With head types in the store, each induction head's strongest previous-token source is ringed.)"
    )
    kept = (
        f" Only pairs whose source is among the {top_k} strongest of its target for q, k or v were stored; the others are blank."
        if top_k
        else ""
    )
    folded = f"; except: {note}" if (note := folded_note(store.meta.model.family)) else ""
    st.caption(
        f"{name} ({figs.KIND_READS[kind]}): {FORMULAS[kind]}, {ratio}, from the raw weights (LayerNorm not "
        f"folded{folded}). Rows: target head B; columns: source head A in an earlier layer (blank: same or later layer, "
        f"which cannot compose). Step {step:,} is the frame (and the link): Play runs the following checkpoints in the "
        f"browser; Pause moves the step control to the frame shown. Colours fixed over training. Click a cell to open "
        f"the pair in a new tab: the head explorer on the target head B with the source A overlaid on every chart "
        f"over training, at the step of the frame shown.{ring}{kept}"
    )


def pair_link(run: str) -> str:
    """The head explorer on a cell's pair, as `charts.open_in_new_tab`'s template over the cell's ``customdata``
    (``[target layer, target head, step (NaN), source layer, source head, ...values]``) and its trace's ``meta``
    (``[the step of the frame shown]``), `figs.composition_animation`'s: the target head B, the source A overlaid
    (``cmp=L1H2``), the frame's step the one step chosen."""
    return (
        f"head?run={quote(run, safe='')}&layer={{0}}&head={{1}}"
        f"&cmp=L{{{figs.SOURCE_LAYER}}}H{{{figs.SOURCE_HEAD}}}&step={{meta[0]}}"
    )


def partners_panel(frame, view: CircuitsView, scores: np.ndarray) -> None:
    """One head's strongest sources and targets over training (`analysis.findings.paths.partners`).

    Args:
        scores: ``(S, L, H, L, H)`` over ``store.steps`` (composition.parquet), NaN without a row.
    """
    store, kind, layer, head = frame.store, view.kind, view.layer, view.head
    n_heads, name, unit_short = store.n_heads, figs.KIND_NAMES[kind], view.unit_short
    st.subheader(f"Layer {layer}, head {head}: its strongest partners over training")
    axis = frame.axis()
    own = layer * n_heads + head
    full = data.pair_matrix(scores) / view.divisor  # (S, N targets, N sources) over store.steps
    chance = 1.0 if view.divisor != 1.0 else view.baseline
    roles: tuple[tuple[Role, str], ...] = (
        ("source", "heads in earlier layers whose output this head reads"),
        ("target", "heads in later layers that read this head's output"),
    )
    for role, note in roles:
        strongest, values = partners(full, own, role=role, top=view.top)
        if not strongest:
            where = "it is in the first layer" if role == "source" else "it is in the last layer"
            st.caption(f"Layer {layer}, head {head} has no {role}s: {where}.")
            continue
        pairs = [(i // n_heads, i % n_heads) for i in strongest]
        line_fig = figs.partner_lines(axis, values, pairs, kind=kind, unit=unit_short, role=role, baseline=chance)
        event = charts.chart(
            line_fig,
            f"{role}s",
            title=f"{frame.run} · L{layer} H{head} · strongest {role}s · {name} ({unit_short})",
            filename=export.safe_name(frame.run, f"L{layer}H{head}", f"{role}s", kind, view.scale),
            csv=functools.partial(data.partners_csv, frame.run, store.steps, values, strongest, n_heads, role, kind, layer, head),
            select=True,
        )
        st.caption(
            f"The {len(strongest)} {note}, ranked by their largest {name} with layer {layer}, head "
            f"{head} over training ({unit_short}); the dotted line is independent random heads. A click opens that "
            "head in the head explorer."
        )
        charts.open_head_on_click(event, store)
