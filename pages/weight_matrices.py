"""Weight matrices: every block weight's singular values against Marchenko-Pastur, over training and depth,
and the Frobenius norm and tail exponent alpha of every block over training.

One step control: the page's ``step`` sets the histogram's frame, its caption and the depth panel
(and the link); Plotly's own slider is left out (`dashboard.figures.weights.sv_animation`), and Pause
moves the step control to the frame shown (`dashboard.charts.follow_play`).
"""

import numpy as np
import pandas as pd
import streamlit as st

from analysis.store.format import LAYER_ROLES as ROLES
from dashboard import charts, export, loader, viewstate, widgets
from dashboard.data import loss_curve
from dashboard.figures import weights as figs
from dashboard.figures.common import overlay_loss, stacked

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


def main() -> None:
    st.title("Weight matrices")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    table = loader.layer_matrices(store)
    if table is None or table.empty:
        st.info(
            "This store has no whole-layer weight matrices (`layers.parquet`). Rerun the precompute job on it "
            "with `--matrices layers` (included in the default `qk,ov,layers`) to add them: "
            "`python -m precompute --source SOURCE --out STORE --matrices layers`; the checkpoints it already "
            "has are read again for their block weights, nothing else changes."
        )
        return
    roles = [r for r in ROLES if r in set(table["role"])]
    steps = sorted(int(s) for s in table["step"].unique())
    layers = sorted(int(x) for x in table["layer"].unique())

    # --- widgets ---
    c_role, c_layer = st.columns([3, 1], vertical_alignment="bottom")
    c_log, c_loss, _ = st.columns([2, 3, 2])  # the switches on their own row: their labels read whole at 1,024 px
    role = widgets.select("role", "Weight", roles, roles[0], fmt=lambda r: f"{ROLE_TEXT.get(r, r)} ({r})", where=c_role)
    layer = widgets.select("layer", "Layer", layers, layers[0], where=c_layer)
    log_y = widgets.toggle("logy", "log y (norms)", where=c_log)
    step = widgets.select(
        "step",
        "Step (the histogram's frame and the depth panel's; Play runs on from it in the browser)",
        steps,
        steps[-1],
        kind="select_slider",
        fmt=lambda s: f"{s:,}",
    )
    rows_role = table[table["role"] == role]
    n_rows, n_cols = int(rows_role["rows"].iloc[0]), int(rows_role["cols"].iloc[0])
    shape = f"{n_rows:,} x {n_cols:,}"

    # --- panel: one weight's singular values over training ---
    st.subheader(f"Layer {layer} {role}: singular values over training")
    one = rows_role[rows_role["layer"] == layer].sort_values("step")
    charts.chart(
        figs.sv_animation(
            list(one["sv"]),
            list(one["std"]),
            steps=steps,
            start=steps.index(step),
            rows=n_rows,
            cols=n_cols,
            title=f"layer {layer} {role} ({shape})",
        ),
        "sv_animation",
        title=frame.run,  # the figure's own title names the weight, its shape and the step
        filename=export.safe_name(frame.run, f"L{layer}", role, "sv"),
        csv=lambda: _sv_csv(frame.run, role, one),
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
        f"Histogram of the {min(n_rows, n_cols):,} singular values of layer {layer}'s {ROLE_TEXT.get(role, role)} "
        f"weight ({shape}, as stored) at each checkpoint; red: the Marchenko-Pastur law of a random matrix of "
        "the same shape and entry variance (a Gaussian and a logistic give the same). Axes are fixed over the "
        "run. The step control above is the frame shown (and the link); Play runs the following checkpoints "
        f"in the browser, and Pause (or the last frame) moves the step control to the frame shown.{at_step}"
    )

    # --- panel: every layer at one step ---
    st.subheader(f"{role} across depth at step {step:,}")
    at = rows_role[rows_role["step"] == step].sort_values("layer")
    n = max(n_rows, n_cols)
    x_all = [np.asarray(v) / (sd * np.sqrt(n)) for v, sd in zip(rows_role["sv"], rows_role["std"], strict=True) if sd > 0]
    x_max = 1.04 * max(float(np.max(x)) for x in x_all) if x_all else 2.0
    charts.chart(
        figs.sv_depth(
            list(at["sv"]),
            list(at["std"]),
            layers=list(at["layer"]),
            rows=n_rows,
            cols=n_cols,
            x_max=x_max,
            title=f"{role} ({shape}), step {step:,}",
        ),
        "sv_depth",
        title=frame.run,  # the figure's own title names the weight, its shape and the step
        filename=export.safe_name(frame.run, role, "depth", "step", step),
        csv=lambda: _sv_csv(frame.run, role, at),
    )
    st.caption(
        "Each layer's singular values in the law's units, s / (σ √n) with σ the weight's entry standard "
        "deviation and n its longer side: the Marchenko-Pastur law (black dashed) is then the same for every "
        "layer. x range fixed over the run."
    )

    # --- panel: Frobenius norms over training ---
    st.subheader(f"Frobenius norm of every layer's {role} over training")
    axis = frame.axis()
    known = [s for s in steps if s in set(int(x) for x in store.steps)]
    frob = _per_layer(rows_role, known, layers, "frob_norm")
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None, where=c_loss)
    fig = figs.frob_lines(axis, known, frob, layers=layers, role=role, log_y=log_y)
    charts.chart(
        stacked(overlay_loss(fig, axis, *curve) if show_loss and curve else fig, right=STACK_RIGHT),
        "frob_lines",
        title=f"{frame.run} · {role} · Frobenius norm of every layer",
        filename=export.safe_name(frame.run, role, "frobenius"),
        csv=lambda: _per_layer_csv(frame.run, role, "frob_norm", known, layers, frob),
    )
    st.caption(
        f"‖W‖_F = sqrt(sum of squared entries) of the {role} weight of each layer (one line per layer) at "
        "every checkpoint with layer matrices."
    )

    # --- panel: the tail exponent alpha over training ---
    st.subheader(f"Tail exponent α of every layer's {role} over training")
    alpha = _per_layer(rows_role, known, layers, "alpha")
    fig = figs.alpha_lines(axis, known, alpha, layers=layers, role=role)
    charts.chart(
        stacked(overlay_loss(fig, axis, *curve) if show_loss and curve else fig, right=STACK_RIGHT),
        "alpha_lines",
        title=f"{frame.run} · {role} · tail exponent α of every layer",
        filename=export.safe_name(frame.run, role, "alpha"),
        csv=lambda: _per_layer_csv(frame.run, role, "alpha", known, layers, alpha),
    )
    st.caption(
        f"α of the {role} weight of each layer at every checkpoint with layer matrices: the exponent of a "
        "power law p(λ) ∝ λ^(−α) fitted to the tail λ ≥ x_min of its eigenvalues λ = s² (weightwatcher's "
        "alpha; analysis/rmt/marchenko_pastur.py `powerlaw_fit`, the method of the `powerlaw` package): for "
        "each candidate x_min, the continuous maximum-likelihood exponent α = 1 + n_tail / Σ ln(λ / x_min) "
        "over the tail, and the x_min whose fitted law is closest to the tail by the Kolmogorov-Smirnov "
        "distance wins. The smaller α, the heavier the tail; a gap: fewer than 4 distinct values."
    )


def _per_layer(rows: pd.DataFrame, steps: list[int], layers: list[int], column: str) -> np.ndarray:
    """``(len(steps), len(layers))`` values of ``column`` of one role's rows; NaN where a (step, layer) has none."""
    out = np.full((len(steps), len(layers)), np.nan)
    pos = {s: i for i, s in enumerate(steps)}
    for s, lay, value in zip(rows["step"], rows["layer"], rows[column], strict=True):
        if int(s) in pos:
            out[pos[int(s)], layers.index(int(lay))] = value
    return out


def _per_layer_csv(run: str, role: str, statistic: str, steps: list[int], layers: list[int], values: np.ndarray) -> pd.DataFrame:
    """A (step, layer) table of one role's values as tidy rows."""
    return pd.DataFrame(
        {
            "run": run,
            "role": role,
            "statistic": statistic,
            "step": np.repeat(np.asarray(steps, dtype=np.int64), len(layers)),
            "layer": np.tile(np.asarray(layers, dtype=np.int64), len(steps)),
            "value": values.ravel(),
        }
    )


def _sv_csv(run: str, role: str, rows: pd.DataFrame) -> pd.DataFrame:
    """Every singular value of the given ``layers.parquet`` rows as tidy rows (run, role, layer, step, index, value)."""
    parts = [
        pd.DataFrame(
            {
                "run": run,
                "role": role,
                "layer": int(r.layer),
                "step": int(r.step),
                "statistic": "sv",
                "index": np.arange(len(r.sv)),
                "value": np.asarray(r.sv, dtype=np.float64),
            }
        )
        for r in rows.itertuples(index=False)
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


main()
