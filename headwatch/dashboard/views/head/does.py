"""The head explorer's "what this head does" tab: the tokens in context whose loss rises most when the head is
ablated, at a step chosen among those the store keeps them for (URL ``ctxstep``, the last by default, the stage
boundaries named), drawn as text with the head's attention shaded (the refined-LLC study's Figure 4) with a CSV; the
head's ablation effect over training (the loss increase on the probe's second copy and on the text, ± 1 standard
error), the stages shaded and the chosen step marked; and the ICL scores with the head ablated against the intact
ones (the study's Figure 10).

What it reads: `analysis.findings.ablation`; the markup `views.head.figures.contexts`, the chart
`dashboard.figures.errors`.
"""

from __future__ import annotations

import streamlit as st

from headwatch.analysis.findings.ablation import (
    ICL_LABELS,
    MEASURE_LABELS,
    ablation_effect,
    context_steps,
    contexts_csv,
    head_contexts,
    icl_scores,
    missing_ablation_text,
    second_copy_share,
)
from headwatch.analysis.findings.events import stage_bases, stage_rows
from headwatch.dashboard import charts, export, widgets
from headwatch.dashboard.figures.errors import Mark, Series, lines_with_errors
from headwatch.dashboard.views.head import data
from headwatch.dashboard.views.head.choice import Head
from headwatch.dashboard.views.head.figures.contexts import contexts_html

CONTEXT_STEP = "ctxstep"  # URL parameter: the step of the tokens in context
DOES_PANEL = "head_does"  # the tab's container key
ABLATION_COLOURS = {"probe_increase": "#d62728", "text_increase": "#1f77b4"}
ICL_COLOURS = {"probe": "#d62728", "text": "#1f77b4"}


def does_panels(h: Head) -> None:
    """The tokens in context at the chosen step, then the ablation effect over training; a store without the
    ablation lens gets the command that adds it."""
    store = h.store
    with st.container(key=DOES_PANEL):
        st.subheader(f"What {h.name} does: the tokens in context the loss needs it for")
        if ablation_effect(store) is None:
            st.info(missing_ablation_text(store.path), icon=":material/info:")
            return
        step = _contexts(h)
        _ablation_over_training(h, step)
        _icl_with_head_ablated(h, step)


def _named_stages(store):
    return stage_rows(store, basis="run") if "run" in stage_bases(store) else stage_rows(store)


def _contexts(h: Head) -> int | None:
    """The step picker (URL ``ctxstep``), the contexts at that step as text with the attention shaded, and their CSV;
    returns the step picked (None: the store keeps no contexts)."""
    store, run = h.store, h.frame.run
    steps = context_steps(store)
    if not steps:
        st.info(
            "This store keeps no tokens in context (head_contexts.parquet has no rows at its steps): rerun "
            "`--lenses ablation` with `--ablation-steps` naming the checkpoints to keep them at.",
            icon=":material/info:",
        )
        return None
    labels = data.context_step_labels(steps, _named_stages(store))
    c_step, _ = st.columns([3, 2])
    step = widgets.select(
        CONTEXT_STEP,
        "Step of the tokens in context",
        steps,
        steps[-1],
        fmt=labels.__getitem__,
        where=c_step,
        help="The checkpoints the ablation lens kept the tokens in context at (by default the last and the first of each "
        "of the run's stages); in the link as ctxstep",
    )
    rows = head_contexts(store, h.layer, h.head, step)
    if rows is None or not len(rows):
        st.markdown(f"No tokens in context for {h.name} at step {step:,}.")
        return step
    st.html(contexts_html(rows))
    charts.download(
        "Tokens in context (CSV)",
        lambda: export.to_csv(contexts_csv(rows, run=run or "", layer=h.layer, head=h.head, step=step)),
        file_name=f"{export.safe_name(run, h.tag.split('-')[0], 'contexts', 'step', step)}.csv",
        mime="text/csv",
        key="head_contexts_csv",
        help="One row per context: rank, set, sequence, position, target, loss increase, intact loss, the window (the "
        "target bracketed), its tokens and the head's attention over them",
    )
    share = second_copy_share(rows)
    st.caption(
        f"The {len(rows)} predicted tokens, pooled over the evaluation text and the induction probe, whose next-token "
        f"loss rises most when {h.name} is ablated at step {step:,} (Δ loss: ablated minus intact, nats; "
        f"{share:.0%} of them are second-copy tokens of the probe, which only copying predicts). Each line is the "
        "context window ending at the target (boxed), each token shaded by the head's attention to it from the query "
        "that predicts the target, relative to the window's largest (hover a token for its weight), as the "
        "refined-LLC study's Figure 4 draws them (docs/views/head.md)."
    )
    return step


def _ablation_over_training(h: Head, step: int | None) -> None:
    """The loss increase on the probe and on the text when the head is ablated, over training, ± 1 standard error;
    the run's stages shaded, ``step`` marked."""
    store, run = h.store, h.frame.run
    effect = ablation_effect(store)
    assert effect is not None
    st.subheader(f"What the loss needs of {h.name} over training")
    series = [
        Series(
            f"{MEASURE_LABELS[m]} (nats)",
            ABLATION_COLOURS[m],
            effect.value[m][:, h.layer, h.head],
            effect.se[m][:, h.layer, h.head],
        )
        for m in ("probe_increase", "text_increase")
    ]
    marks = [Mark(f"tokens in context: step {step:,}", step)] if step is not None else []
    y_title = "loss increase when ablated (nats/token)"
    fig = lines_with_errors(h.axis, series, y_title=y_title, stages=_named_stages(store), marks=marks, zero_line=True)
    charts.chart(
        h.over_time(fig),
        "head_ablation",
        title=f"{run} · {h.name} · loss increase when {effect.method}-ablated",
        filename=export.safe_name(run, h.tag.split("-")[0], "ablation"),
        csv=lambda: data.ablation_rows(effect, run=run or "", layer=h.layer, head=h.head),
    )
    by = "its mean over the evaluation tokens" if effect.method == "mean" else "zero"
    st.caption(
        f"The loss increase when the head's output is replaced by {by} "
        "(ablated minus intact, nats per token), on the induction probe's second copy (red: the tokens only copying "
        "predicts) and on the evaluation text (blue), ± 1 standard error over sequences as a band; the run's stages "
        "shaded, the dashed line the step of the tokens in context above. The CSV also holds the ICL scores with the "
        "head ablated."
    )


def _icl_with_head_ablated(h: Head, step: int | None) -> None:
    """The run's two in-context-learning scores with the head ablated (solid) against the intact model's (dotted), over
    training, ± 1 standard error: the refined-LLC study's Figure 10, which reads when in-context learning comes to need
    the head."""
    store, run = h.store, h.frame.run
    effect = ablation_effect(store)
    assert effect is not None
    intact = icl_scores(store)
    st.subheader(f"In-context learning with {h.name} ablated")
    series = []
    for name in ("probe", "text"):
        measure = f"icl_{name}"
        colour = ICL_COLOURS[name]
        series.append(
            Series(
                f"{ICL_LABELS[name]}, {h.tag.split('-')[0]} ablated (nats)",
                colour,
                effect.value[measure][:, h.layer, h.head],
                effect.se[measure][:, h.layer, h.head],
            )
        )
        if intact is not None:
            series.append(Series(f"{ICL_LABELS[name]}, intact (nats)", colour, intact.score[name], intact.se[name], dash="dot"))
    marks = [Mark(f"tokens in context: step {step:,}", step)] if step is not None else []
    y_title = "ICL score: late minus early loss (nats)"
    fig = lines_with_errors(h.axis, series, y_title=y_title, stages=_named_stages(store), marks=marks, zero_line=True)
    charts.chart(
        h.over_time(fig),
        "head_icl",
        title=f"{run} · ICL scores with {h.name} {effect.method}-ablated, and intact",
        filename=export.safe_name(run, h.tag.split("-")[0], "icl-ablated"),
        csv=lambda: data.ablation_rows(effect, run=run or "", layer=h.layer, head=h.head).query(
            "statistic in ('icl_probe', 'icl_text')"
        ),
    )
    st.caption(
        "The in-context-learning scores (the loss late in a sequence minus early; probe: the second copy against the "
        "first; the Timeline defines both) with this head ablated (solid) and intact (dotted), ± 1 standard error over "
        "sequences. Where the solid curve lies above the dotted one, the model's in-context learning needs this head; "
        "when that gap opens over training says when it came to (the refined-LLC study's Figure 10)."
        + ("" if intact is not None else " This store has no intact scores (icl.parquet, `--lenses losses`).")
    )
