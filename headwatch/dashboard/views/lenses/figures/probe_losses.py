"""The Forward lenses' losses figure: the loss on the induction probe's second copy and on the evaluation text over
training, the page's step marked (a stage boundary's evidence)."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import duplicate_shapes, figure, layout, step_marks, step_xaxis, value_axis

STEP_MARK_COLOUR = "#9467bd"  # the page's step on the losses (a stage boundary's evidence): purple, dashed

PROBE_COPY_LABEL = "loss on the probe's second copy, nats per token"
EVAL_LOSS_LABEL = "loss on the evaluation text, nats per token"


def probe_losses(
    axis: StepAxis, eval_loss: np.ndarray, copy_loss: np.ndarray, *, vocab_size: int | None, step: int | None = None
) -> go.Figure:
    """The loss on the induction probe's second copy and on the evaluation text, over training.

    Args:
        eval_loss, copy_loss: ``(S,)`` nats per token (NaN where a step has none).
        vocab_size: marks ln V, the loss of a uniform guess (no copying), when known.
        step: one of ``axis.steps`` marked by a dashed vertical line named ``step N`` (the page's step: where a
            stage boundary of the Timeline links), or None.
    """
    traces: list[dict[str, Any]] = []
    for values, name, colour, dash in (
        (copy_loss, PROBE_COPY_LABEL, style.LOSS_COLOUR, "solid"),
        (eval_loss, EVAL_LOSS_LABEL, "#888888", "dot"),
    ):
        traces.append(
            dict(
                type="scatter",
                x=axis.x,
                y=np.asarray(values, dtype=np.float64),
                mode="lines+markers",
                name=name,
                line=dict(color=colour, width=2, dash=dash),
                marker=dict(size=4),
                customdata=axis.steps,
                hovertemplate=f"step %{{customdata:,}}<br>{name} = %{{y:.4f}}<extra></extra>",
            )
        )
    shapes = duplicate_shapes(axis)
    annotations = []
    reference = [float(np.log(vocab_size))] if vocab_size else []
    if reference:
        shapes.append(
            dict(
                type="line",
                xref="x domain",
                yref="y",
                x0=0,
                x1=1,
                y0=reference[0],
                y1=reference[0],
                line=dict(color="#555", width=1, dash="dot"),
            )
        )
        annotations.append(
            dict(
                xref="x domain",
                yref="y",
                x=1,
                y=reference[0],
                xanchor="right",
                yanchor="bottom",
                text=f"uniform guess: ln {vocab_size} = {reference[0]:.3g}",
                showarrow=False,
                font=dict(size=11, color="#555"),
            )
        )
    if step is not None and step in axis.steps:
        x = float(axis.x[list(axis.steps).index(step)])
        (mark,) = step_marks([x], [STEP_MARK_COLOUR])
        # the label rides on the line: an annotation's x would be log10(x) on a log axis
        mark["label"] = dict(
            text=f" step {step:,}", textposition="middle", textangle=0, xanchor="left", font=dict(color=STEP_MARK_COLOUR, size=11)
        )
        shapes.append(mark)
    rng = fixed_range(np.concatenate([np.ravel(copy_loss), np.ravel(eval_loss), reference]))
    return figure(
        traces,
        layout(
            height=style.HEIGHT,
            xaxis=step_xaxis(axis),
            yaxis=value_axis("loss (nats per token)", rng),
            shapes=shapes,
            annotations=annotations,
        ),
    )
