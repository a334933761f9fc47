"""The in-context-learning panel the Timeline and the Forward lenses share: the run's two ICL scores over training
with their standard-error bands, the stages shaded behind them, each score's sharpest fall and the stage boundary at
which induction heads form marked and said in the caption.

What it says is `analysis.findings.icl`'s and `analysis.findings.ablation`'s (the report says the same); the figure
is `dashboard.figures.errors.lines_with_errors`.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from headwatch.analysis.findings.ablation import ICL_LABELS, icl_rows, icl_scores, missing_icl_text
from headwatch.analysis.findings.icl import NOISE_SE, fall_sentence, run_induction_boundary, sharpest_fall
from headwatch.analysis.store.lenses.losses import LOSS_SETS
from headwatch.dashboard import charts, export
from headwatch.dashboard.figures.errors import Mark, Series, lines_with_errors
from headwatch.dashboard.frame import RunFrame

ICL_COLOURS = {"text": "#1f77b4", "probe": "#d62728"}
BOUNDARY_COLOUR = "#2ca02c"


def icl_panel(frame: RunFrame, stages: pd.DataFrame | None, *, key: str, shaded: str = "") -> None:
    """The ICL scores over training on the page's time axis (``key``: the chart's widget key), ``stages`` shaded
    (``shaded``: what they are read from, for the caption); a store without icl.parquet gets the command that adds it."""
    store = frame.store
    scores = icl_scores(store)
    if scores is None:
        st.info(missing_icl_text(store.path), icon=":material/info:")
        return
    boundary = run_induction_boundary(store, stages)
    falls = {name: sharpest_fall(scores.steps, scores.score[name], scores.se[name]) for name in LOSS_SETS}
    marks = [
        Mark(f"{ICL_LABELS[name]}: sharpest fall", fall.start, fall.end, colour=ICL_COLOURS[name])
        for name, fall in falls.items()
        if fall is not None
    ]
    if boundary is not None:
        marks.append(Mark("induction heads form", boundary.step, colour=BOUNDARY_COLOUR, dash="dot"))
    series = [Series(f"{ICL_LABELS[name]} (nats)", ICL_COLOURS[name], scores.score[name], scores.se[name]) for name in LOSS_SETS]
    y_title = "ICL score: late minus early loss (nats)"
    charts.chart(
        lines_with_errors(frame.axis(), series, y_title=y_title, stages=stages, marks=marks, zero_line=True),
        key,
        title=f"{frame.run} · in-context-learning scores over training",
        filename=export.safe_name(frame.run, "icl-scores"),
        csv=lambda: icl_rows(scores, frame.run or ""),
    )
    sentences = " ".join(fall_sentence(ICL_LABELS[name], falls[name], boundary) for name in LOSS_SETS)
    st.caption(
        f"In-context-learning scores (Olsson et al. 2022: the loss at the 500th token minus at the 50th; negative when "
        f"later tokens are predicted better for the context before them), ± 1 standard error over sequences as a band. "
        f"Text: {scores.positions['text']} (Olsson's positions scaled to the run's context). Probe: "
        f"{scores.positions['probe']}, which only copying from the first copy lowers. Shaded: the stages"
        f"{' (' + shaded + ')' if shaded else ''}; a coloured interval marks each score's sharpest fall (the steepest "
        f"drop between consecutive checkpoints per unit of log10(1 + step) among the drops larger than {NOISE_SE:g} "
        "standard errors of the difference; none where no drop exceeds its noise), the green dotted line the stage "
        "boundary at which induction heads form (led by a rise in induction scores, nearest the first induction "
        f"head's emergence). {sentences}"
    )
