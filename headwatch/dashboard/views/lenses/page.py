"""Forward lenses: what the heads do on text over training (attention entropy, span, layer divergence, head types).

One tab drawn at a time (URL ``panel``): entropy and span per layer, the layer-pair divergence (animated), the head
types' scores of every head, the losses on the induction probe, the in-context-learning scores
(`dashboard.icl`). This module: the layout, the tabs' controls and the
four panels; the figures are `views.lenses.figures`' and `views.lenses.figures.probe_losses`', the CSVs' rows
`views.lenses.data`'s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from headwatch.analysis.findings.events import basis_text, primary_basis, stage_rows
from headwatch.analysis.findings.held_types import TYPE_LABELS, absent_types, head_types, missing_text
from headwatch.analysis.store.lenses.attention import ATTENTION, EVAL_LOSS, LAYER_DIVERGENCE
from headwatch.dashboard import charts, export, viewstate, widgets
from headwatch.dashboard.data import StepAxis, loss_curve, uniform_attention
from headwatch.dashboard.figures.common import overlay_loss, stacked
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.icl import icl_panel
from headwatch.dashboard.labels import STATS
from headwatch.dashboard.views.lenses import data
from headwatch.dashboard.views.lenses import figures as figs
from headwatch.dashboard.views.lenses.figures.probe_losses import PROBE_COPY_LABEL, probe_losses
from headwatch.families.registry import language_config

# Head types shown as heatmaps over training, with the score uniform causal attention gives.
HEAD_TYPES = ("prev_token", "induction", "sink", "current_token")
PANELS = {  # URL panel -> its tab; one drawn at a time (a stage boundary's evidence links panel=losses)
    "layers": "Entropy and span per layer",
    "divergence": "Layer-pair divergence",
    "types": "Head types",
    "losses": "Losses with the step marked",
    "icl": "In-context learning",
}
# The URL parameters of each tab's own control: a link keeps those of the tabs not drawn (`widgets.panel_tabs`).
OWNS = {"layers": ("loss",), "divergence": ("step",), "types": ("loss",), "losses": ("step",), "icl": ()}
STACK = dict(left=100, right=170)  # px: margins of every chart over training (head ticks L2 H3; colour bars, legends)


MISSING = (
    "This store has no forward-lens tables (attention.parquet, layer_divergence.parquet, "
    "eval_loss.parquet). Add them to it with `python -m headwatch.precompute --source SOURCE --out STORE "
    "--lenses attention` (and `--eval-text FILE` for a model not trained here): checkpoints already in "
    "the store get their forward rows, the weight statistics stay as they are."
)


@dataclass(frozen=True)
class _Overlay:
    """The loss overlay of the tabs over training (URL ``loss``); ``curve``: the run's loss curve, if any."""

    show_loss: bool
    curve: tuple[np.ndarray, str] | None

    def with_loss(self, fig: go.Figure, axis: StepAxis) -> go.Figure:
        """``fig`` with the loss drawn over its time axis when the switch is on, in the page's margins."""
        return stacked(overlay_loss(fig, axis, *self.curve) if self.show_loss and self.curve else fig, **STACK)


def main() -> None:
    st.title("Forward lenses")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    info = frame.store.meta.forward
    if not frame.store.has(ATTENTION) or info is None:
        st.info(MISSING)
        return
    uniform = uniform_attention(info.seq_len, info.induction_repeat)

    # --- the evaluation set ---
    st.caption(
        f"On {info.n_sequences} sequences of {info.seq_len} tokens of {info.text} (tokenizer: {info.tokenizer}; "
        f"text sha256 {info.text_sha256[:12]}); induction on {info.induction_sequences} sequences of "
        f"{info.induction_repeat} random tokens repeated twice."
    )

    # --- one panel at a time, in tabs (URL panel): only the chosen one is computed and drawn ---
    widgets.image_format()  # above the tabs: the same place on every tab
    panel, tab = widgets.panel_tabs("panel", PANELS, "layers", owns=OWNS)
    with tab:  # each tab's own control: the loss overlay over training, or the step
        if panel == "layers":  # entropy and span per layer over training
            _bands_panel(frame, _overlay(frame), uniform)
        elif panel == "divergence":  # layer-pair divergence, animated
            _divergence_panel(frame, _step(frame, "Step (the heatmap's frame)"))
        elif panel == "types":  # head types over training
            _types_panel(frame, _overlay(frame), uniform)
        elif panel == "losses":  # the losses over training, the step marked
            _probe_panel(frame, info, _step(frame, "Step (marked on the losses)"))
        else:  # the in-context-learning scores over training, against the run's stages
            _icl_panel(frame)


def _overlay(frame: RunFrame) -> _Overlay:
    """The loss switch of the tabs over training (hidden without a loss curve)."""
    curve = loss_curve(frame.store)
    c_loss, _ = st.columns([2, 3])
    return _Overlay(show_loss=widgets.loss_toggle(curve is not None, where=c_loss), curve=curve)


def _step(frame: RunFrame, label: str) -> int:
    """The step of the divergence tab (its heatmap's frame) and of the losses' (marked): one parameter, ``step``."""
    steps = [int(s) for s in frame.store.steps]
    c_step, _ = st.columns([3, 2])
    return widgets.select("step", label, steps, steps[-1], kind="select_slider", fmt=lambda s: f"{s:,}", where=c_step)


def _bands_panel(frame: RunFrame, opts: _Overlay, uniform: dict[str, float]) -> None:
    """Attention entropy and span: one line per layer over training, its heads' range as a band."""
    st.subheader("Attention entropy and span per layer")
    store, axis = frame.store, frame.axis()
    for name in ("entropy", "span"):
        fig = figs.layer_bands(
            axis,
            store.require(ATTENTION, name),
            stat=STATS[name],
            reference=uniform[name],
            reference_label=f"uniform attention: {uniform[name]:.3g}",
        )
        values = store.require(ATTENTION, name)
        charts.chart(
            opts.with_loss(fig, axis),
            f"bands_{name}",
            title=f"{frame.run} · {STATS[name].short()} per layer over training",
            filename=export.safe_name(frame.run, "layers", name),
            csv=functools.partial(export.tidy, values, store.steps, run=frame.run, statistic=name, matrix="forward"),
        )
    st.caption(
        "One line per layer (the mean over its heads), the band spanning its heads' smallest to largest value; "
        "the dotted line is what uniform causal attention gives."
    )


def _divergence_panel(frame: RunFrame, step: int) -> None:
    """The layer x layer divergence at ``step``, animated over training; Pause hands its frame to ``step``."""
    st.subheader("How differently the layers attend")
    steps = [int(s) for s in frame.store.steps]
    jsd = frame.store.require(LAYER_DIVERGENCE, "jsd")
    charts.chart(
        figs.divergence_animation(jsd, steps=steps, start=steps.index(step)),
        "divergence",
        title=f"{frame.run} · layer-pair Jensen-Shannon divergence (bits)",
        filename=export.safe_name(frame.run, "layer-divergence", "step", step),
        csv=lambda: data.pair_rows(frame.run, jsd, steps),
    )
    charts.follow_play("divergence", step)
    st.caption(
        "Jensen-Shannon divergence (bits) between two layers' mean attention over relative offset i - j "
        "(averaged over heads, queries and sequences): 0 when they attend at the same distances alike. "
        f"Colours are fixed over training. Step {step:,} is the frame (and the link): Play runs the following "
        "frames in the browser, and Pause (or the last frame) moves the step control to the frame shown."
    )


def _types_panel(frame: RunFrame, opts: _Overlay, uniform: dict[str, float]) -> None:
    """Previous-token, induction, sink and current-token scores of every head over training, the heads' types marked
    (multigram and other heads too); a click on a cell opens the head."""
    st.subheader("Head types over training")
    store, axis = frame.store, frame.axis()
    kinds = head_types(store)
    if kinds is None:
        st.info(missing_text(store.path), icon=":material/info:")
    else:
        rules = "; ".join(
            f"{name}: null {r['null']:.3g}, threshold {r['threshold']:.3g}, exit {r['exit']:.3g}"
            for name, r in kinds.rules.items()
        )
        st.caption(
            "Markers: the cells where a head holds a type (small: held at that step; large and open: the step from "
            "which it holds it to the end of training), the same on every heatmap, one symbol per type (legend). A "
            "head holds a type when its score reaches the entry threshold, and keeps it until the score falls below "
            f"the exit level (docs/head-types.md). {rules}. Multigram and other heads hold no attention type and "
            "their mean ablation costs measurable loss; they are decided, and marked, at the checkpoints with tokens "
            "in context only (their top contexts continue frequent n-grams of the training text, or do not)."
            + "".join(f" {TYPE_LABELS.get(t, t)}: not decided ({why})." for t, why in absent_types(store).items())
        )
    for name in HEAD_TYPES:
        if not np.isfinite(store.require(ATTENTION, name)).any():  # a forward lens written before the score
            st.info(
                f"This store's forward lens has no {STATS[name].label} (attention.parquet was written before it was "
                "recorded), so it has no current-token heads. Recompute the forward lens to have it: "
                f"`python -m headwatch.precompute --source CHECKPOINTS --out {store.path} --lenses attention`.",
                icon=":material/info:",
            )
            continue
        fig = figs.head_type_heatmap(
            axis,
            store.require(ATTENTION, name),
            stat=STATS[name],
            baseline=uniform[name],
            held=kinds.held if kinds is not None else None,
            emergence=kinds.emergence if kinds is not None else None,
        )
        values = store.require(ATTENTION, name)
        event = charts.chart(
            opts.with_loss(fig, axis),
            f"type_{name}",
            title=f"{frame.run} · every head · {STATS[name].short()}",
            filename=export.safe_name(frame.run, "all-heads", name),
            csv=functools.partial(export.tidy, values, store.steps, run=frame.run, statistic=name, matrix="forward"),
            select=True,
        )
        charts.open_head_on_click(event, store, stat=name)
        st.caption(f"{STATS[name].label}: {STATS[name].doc}; uniform attention scores {uniform[name]:.3g}.")


def _icl_panel(frame: RunFrame) -> None:
    """The run's two in-context-learning scores over training, the stages of its primary basis shaded (`dashboard.icl`)."""
    st.subheader("In-context learning over training")
    basis = primary_basis(frame.store)
    icl_panel(frame, stage_rows(frame.store), key="lenses_icl", shaded=f"read from: {basis_text(basis)}" if basis else "")


def _probe_panel(frame: RunFrame, info, step: int) -> None:
    """The loss on the induction probe's second copy over training, beside the loss on the evaluation text, ``step``
    marked."""
    store = frame.store
    copy_loss = store.dense(EVAL_LOSS, "probe_copy_loss")
    eval_loss = store.dense(EVAL_LOSS, "loss")
    st.subheader("Loss on the induction probe's second copy")
    if copy_loss is None or eval_loss is None or not np.isfinite(copy_loss).any():
        st.info(
            "This store has no loss on the induction probe (eval_loss.parquet `probe_copy_loss`: stores computed "
            "before it was recorded). Rerun `python -m headwatch.precompute --source SOURCE --out STORE --lenses attention` "
            "to add it."
        )
        return
    vocab = language_config(store.meta.model.config).get("vocab_size")
    charts.chart(
        stacked(probe_losses(frame.axis(), eval_loss, copy_loss, vocab_size=int(vocab) if vocab else None, step=step), **STACK),
        "probe_loss",
        title=f"{frame.run} · {PROBE_COPY_LABEL}, and on the evaluation text",
        filename=export.safe_name(frame.run, "probe-copy-loss"),
        csv=lambda: data.loss_rows(frame.run, store.steps, eval_loss, copy_loss),
    )
    st.caption(
        f"The mean next-token loss on positions R+1..2R-1 of the induction probe ({info.induction_sequences} "
        f"sequences of R = {info.induction_repeat} random tokens repeated twice), which only copying from the first "
        "copy can predict: it drops when induction heads form. The dotted grey line is the loss on the evaluation "
        "text; the dotted reference is a uniform guess over the vocabulary; the dashed line is step "
        f"{step:,} (the step control). The run's stage boundaries are read from these curves, the whole-model LLC "
        "(Refined LLC page) and the number of heads of each type (the Head types tab)."
    )
