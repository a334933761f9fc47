"""Weight matrices: every block weight's singular values against Marchenko-Pastur, over training and depth,
and the Frobenius norm and tail exponent alpha of every block over training.

One step control: the page's ``step`` sets the histogram's frame, its caption and the depth panel
(and the link); Plotly's own slider is left out (`views.weights.figures.sv_animation`), and Pause
moves the step control to the frame shown (`dashboard.charts.follow_play`). The layout, the widgets as one record
and the panels; what the panels read from ``layers.parquet`` is `views.weights.data`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from headwatch.dashboard import charts, export, viewstate, widgets
from headwatch.dashboard.cache import store_cached
from headwatch.dashboard.data import loss_curve
from headwatch.dashboard.figures.common import overlay_loss, stacked
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.views.weights import data
from headwatch.dashboard.views.weights import figures as figs

STACK_RIGHT = 150  # px: the layer legend right of the norms and alpha over training (one margin for both)
ROLE_TEXT = {
    "attn_qkv": "attention QKV (fused)",
    "attn_q": "attention Q",
    "attn_k": "attention K",
    "attn_v": "attention V",
    "attn_out": "attention output",
    "mlp_gate": "MLP gate",
    "mlp_in": "MLP in",
    "mlp_out": "MLP out",
}


MISSING = (
    "This store has no whole-layer weight matrices (`layers.parquet`). Rerun the precompute job on it "
    "with `--matrices layers` (included in the default `qk,ov,layers`) to add them: "
    "`python -m headwatch.precompute --source SOURCE --out STORE --matrices layers`; the checkpoints it already "
    "has are read again for their block weights, nothing else changes."
)


# the store's whole-layer matrices (`views.weights.data.layer_matrices`)
_layer_matrices = store_cached(data.layer_matrices, spinner="Reading the layer matrices ...", max_entries=8)


@dataclass(frozen=True)
class _Choices:
    """The page's widgets: the weight (``role``, ``layer``), the norms' log axis (``logy``) and the step shown
    (``step``). ``loss_slot``: where the loss switch goes; it is made with the norms panel, after the first chart's
    export choice, so the link keeps its parameters' order."""

    role: str
    layer: int
    log_y: bool
    step: int
    loss_slot: Any


def main() -> None:
    st.title("Weight matrices")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    table = _layer_matrices(frame.store)
    if table is None or table.empty:
        st.info(MISSING)
        return
    have = data.contents(table)

    # --- widgets ---
    opts = _choose(have)
    weight = data.role(table, opts.role)

    # --- panel: one weight's singular values over training ---
    _sv_panel(frame, have, weight, opts)

    # --- panel: every layer at one step ---
    _depth_panel(frame, weight, opts)

    # --- panels: Frobenius norms and the tail exponent alpha over training ---
    _over_training_panels(frame, have, weight, opts)


def _choose(have: data.Contents) -> _Choices:
    """The widgets: weight and layer in a row, the log switch in the next (the loss switch's row), the step below."""
    c_role, c_layer = st.columns([3, 1], vertical_alignment="bottom")
    c_log, c_loss, _ = st.columns([2, 3, 2])  # the switches on their own row: their labels read whole at 1,024 px
    role = widgets.select("role", "Weight", have.roles, have.roles[0], fmt=lambda r: f"{ROLE_TEXT.get(r, r)} ({r})", where=c_role)
    layer = widgets.select("layer", "Layer", have.layers, have.layers[0], where=c_layer)
    log_y = widgets.toggle("logy", "log y (norms)", where=c_log)
    step = widgets.select(
        "step",
        "Step (the histogram's frame and the depth panel's; Play runs on from it in the browser)",
        have.steps,
        have.steps[-1],
        kind="select_slider",
        fmt=lambda s: f"{s:,}",
    )
    return _Choices(role=role, layer=layer, log_y=log_y, step=step, loss_slot=c_loss)


def _sv_panel(frame: RunFrame, have: data.Contents, weight: data.Role, opts: _Choices) -> None:
    """One layer's weight: its singular values' histogram against Marchenko-Pastur, animated over training."""
    role, layer, step, steps = opts.role, opts.layer, opts.step, have.steps
    st.subheader(f"Layer {layer} {role}: singular values over training")
    one = weight.of_layer(layer)
    charts.chart(
        figs.sv_animation(
            list(one["sv"]),
            list(one["std"]),
            steps=steps,
            start=steps.index(step),
            rows=weight.n_rows,
            cols=weight.n_cols,
            title=f"layer {layer} {role} ({weight.shape})",
        ),
        "sv_animation",
        title=frame.run,  # the figure's own title names the weight, its shape and the step
        filename=export.safe_name(frame.run, f"L{layer}", role, "sv"),
        csv=lambda: data.sv_csv(frame.run, role, one),
    )
    charts.follow_play("sv_animation", step)
    shown = one[one["step"] == step]
    at_step = (
        f" At step {step:,}: {int(shown['mp_spikes'].iloc[0])} values above the law's upper edge, tail "
        f"exponent alpha = {shown['alpha'].iloc[0]:.2f} (over training: the last panel)."
        if len(shown)
        else f" This weight has no row at step {step:,}."
    )
    st.caption(
        f"Histogram of the {min(weight.n_rows, weight.n_cols):,} singular values of layer {layer}'s "
        f"{ROLE_TEXT.get(role, role)} weight ({weight.shape}, as stored) at each checkpoint; red: the Marchenko-Pastur "
        "law of a random matrix of the same shape and entry variance (a Gaussian and a logistic give the same). Axes "
        "are fixed over the run. The step control above is the frame shown (and the link); Play runs the following "
        f"checkpoints in the browser, and Pause (or the last frame) moves the step control to the frame shown.{at_step}"
    )


def _depth_panel(frame: RunFrame, weight: data.Role, opts: _Choices) -> None:
    """Every layer's singular values of the weight at the step shown, in the law's units."""
    role, step = opts.role, opts.step
    st.subheader(f"{role} across depth at step {step:,}")
    at = weight.at_step(step)
    charts.chart(
        figs.sv_depth(
            list(at["sv"]),
            list(at["std"]),
            layers=list(at["layer"]),
            rows=weight.n_rows,
            cols=weight.n_cols,
            x_max=weight.depth_x_max(),
            title=f"{role} ({weight.shape}), step {step:,}",
        ),
        "sv_depth",
        title=frame.run,  # the figure's own title names the weight, its shape and the step
        filename=export.safe_name(frame.run, role, "depth", "step", step),
        csv=lambda: data.sv_csv(frame.run, role, at),
    )
    st.caption(
        "Each layer's singular values in the law's units, s / (σ √n) with σ the weight's entry standard "
        "deviation and n its longer side: the Marchenko-Pastur law (black dashed) is then the same for every "
        "layer. x range fixed over the run."
    )


def _over_training_panels(frame: RunFrame, have: data.Contents, weight: data.Role, opts: _Choices) -> None:
    """Every layer's Frobenius norm and tail exponent alpha of the weight over training, the loss overlaid on both
    by the loss switch (made here, in its slot above)."""
    role, layers, axis = opts.role, have.layers, frame.axis()
    st.subheader(f"Frobenius norm of every layer's {role} over training")
    known = data.known_steps(have.steps, frame.store.steps)
    frob = data.per_layer(weight.rows, known, layers, "frob_norm")
    curve = loss_curve(frame.store)
    show_loss = widgets.loss_toggle(curve is not None, where=opts.loss_slot)
    fig = figs.frob_lines(axis, known, frob, layers=layers, role=role, log_y=opts.log_y)
    charts.chart(
        stacked(overlay_loss(fig, axis, *curve) if show_loss and curve else fig, right=STACK_RIGHT),
        "frob_lines",
        title=f"{frame.run} · {role} · Frobenius norm of every layer",
        filename=export.safe_name(frame.run, role, "frobenius"),
        csv=lambda: data.per_layer_csv(frame.run, role, "frob_norm", known, layers, frob),
    )
    st.caption(
        f"‖W‖_F = sqrt(sum of squared entries) of the {role} weight of each layer (one line per layer) at "
        "every checkpoint with layer matrices."
    )

    st.subheader(f"Tail exponent α of every layer's {role} over training")
    alpha = data.per_layer(weight.rows, known, layers, "alpha")
    fig = figs.alpha_lines(axis, known, alpha, layers=layers, role=role)
    charts.chart(
        stacked(overlay_loss(fig, axis, *curve) if show_loss and curve else fig, right=STACK_RIGHT),
        "alpha_lines",
        title=f"{frame.run} · {role} · tail exponent α of every layer",
        filename=export.safe_name(frame.run, role, "alpha"),
        csv=lambda: data.per_layer_csv(frame.run, role, "alpha", known, layers, alpha),
    )
    st.caption(
        f"α of the {role} weight of each layer at every checkpoint with layer matrices: the exponent of a "
        "power law p(λ) ∝ λ^(−α) fitted to the tail λ ≥ x_min of its eigenvalues λ = s² (weightwatcher's "
        "alpha; analysis/rmt/marchenko_pastur.py `powerlaw_fit`, the method of the `powerlaw` package): for "
        "each candidate x_min, the continuous maximum-likelihood exponent α = 1 + n_tail / Σ ln(λ / x_min) "
        "over the tail, and the x_min whose fitted law is closest to the tail by the Kolmogorov-Smirnov "
        "distance wins. The smaller α, the heavier the tail; a gap: fewer than 4 distinct values."
    )
