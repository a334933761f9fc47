"""The Refined LLC's diagnostics: whether the estimates can be trusted (the chains' flags per checkpoint, the
negative estimates explained) and the SGLD loss traces of one estimate (first, where an rLLC rise's evidence link
lands)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from headwatch.analysis.findings.llc_flags import flag_totals_text
from headwatch.analysis.llc.diagnostics import FLAG_NOTES, FLAGS
from headwatch.dashboard import charts, export, widgets
from headwatch.dashboard.views.llc import data
from headwatch.dashboard.views.llc import figures as figs
from headwatch.dashboard.views.llc.data import Estimates


def diagnostics_panel(
    run: str, store, est: Estimates, sampler: dict, *, traces: bool = True, distribution: str | None = None
) -> None:
    """Whether the estimates mean anything: the flags per checkpoint, the negative estimates explained, and (unless
    shown first) the chains' loss traces of one estimate."""
    st.subheader("Can these estimates be trusted? The chains' diagnostics")
    for warning in data.negative_warnings(est):
        st.warning(warning)
    if est.flags is None or est.model_flags is None:
        st.info(
            "This store has no chain diagnostics (llc_chains.parquet): its estimates were made before they were "
            "stored. Rerun the precompute job with the same `--lenses llc` options to add them (the estimates "
            "are made again, the same under the same settings and seed)."
        )
        return
    st.markdown(flag_totals_text(est.flags, est.model_flags, explain=False))  # the warnings above explain them
    st.dataframe(data.flag_counts(est), hide_index=True, column_config={"step": st.column_config.NumberColumn(format="%d")})
    st.caption(
        f"Estimates per checkpoint ({store.n_layers * store.n_heads} heads and the whole model) by flag. "
        + " ".join(f"**{f}**: {FLAG_NOTES[f]}." for f in FLAGS)
        + " The rule: analysis/llc/diagnostics.py; the spread over chains is each point's ± in the hover."
    )
    if traces:
        traces_panel(run, store, est.steps, sampler, distribution=distribution)


def traces_panel(run: str, store, steps: np.ndarray, sampler: dict, *, distribution: str | None = None) -> None:
    """The SGLD loss traces of one estimate (URL ``trace``: the whole model or a head; ``trace_step``) under
    ``distribution`` (None: the store's default)."""
    targets = data.trace_targets(store.n_layers, store.n_heads)
    c_target, c_step = st.columns([1, 1])
    target = widgets.select(
        "trace",
        "Loss traces of",
        targets,
        data.WHOLE_MODEL,
        where=c_target,
        fmt=lambda t: t.replace("H", " H") if t[0] == "L" else t,
    )
    at_step = widgets.select(
        "trace_step", "at step", [int(s) for s in steps], int(steps[-1]), where=c_step, fmt=lambda s: f"{s:,}"
    )
    layer, head = data.trace_target(target)
    trace, init = data.chain_traces(store, step=at_step, layer=layer, head=head, data=distribution)
    if not len(trace) or init is None:
        st.info(f"No chains stored for {target} at step {at_step:,}.")
        return
    label = f"{'whole model' if layer < 0 else f'L{layer} H{head}'}, step {at_step:,}"
    charts.chart(
        figs.chain_traces(
            trace,
            init,
            burnin=int(sampler.get("burnin") or 0),
            n_beta=float(sampler.get("n_beta") or 0),
            label=label,
        ),
        "llc_traces",
        title=f"{run} · {label} · SGLD loss traces",
        filename=export.safe_name(run, "llc-traces", target, at_step),
        csv=lambda: data.traces_csv(run, trace, step=at_step, layer=layer, head=head),
    )
    st.caption(
        "Each chain's sampled loss at every SGLD step; dashed, the loss at the checkpoint's weights w*. An "
        "estimate is n β times the mean rise of the loss after the burn-in: it means something when the "
        "traces rose and flattened, not when they keep climbing or run away, and a trace below the dashed "
        "line is a checkpoint that is not a local minimum of this loss."
    )
