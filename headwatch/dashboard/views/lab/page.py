"""Random-matrix lab: what W_QK = W_Q^T W_K looks like when W_Q and W_K are pure noise.

One random W_QK drawn at the chosen shape and widths (`analysis.rmt.rmt_lab.lab_sample`, cached here per setting):
its statistics against the random-head reference, its entries, its ordered singular values and its spectrum against
the null laws. This module: the layout, the widgets as one record and the four panels; what the lab offers and its
tables in `views.lab.data`, its figures in `views.lab.figures`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from headwatch.analysis.rmt.rmt_lab import lab_sample
from headwatch.dashboard import charts, export, viewstate, widgets
from headwatch.dashboard.frame import Frame
from headwatch.dashboard.views.lab import data
from headwatch.dashboard.views.lab import figures as figs

REFERENCE_AT_ONCE = 512  # up to this d_model the reference is drawn at once; above it, on request


_sample = st.cache_data(max_entries=64, show_spinner=False)(lab_sample)  # one random W_QK per setting


@dataclass(frozen=True)
class _Choices:
    """The draw's settings: ``dmodel``, ``nheads``, the entries' widths ``sq`` and ``sk``, and ``full`` rank."""

    d_model: int
    n_heads: int
    sigma_q: float
    sigma_k: float
    full: bool

    @property
    def tag(self) -> str:
        """The settings as charts' titles and file names say them."""
        full = ", full rank" if self.full else ""
        return f"d_model {self.d_model}, {self.n_heads} heads, σ_Q {self.sigma_q:g}, σ_K {self.sigma_k:g}{full}"


def main() -> None:
    st.title("Random-matrix lab")
    st.caption(
        "W_Q and W_K drawn with i.i.d. Gaussian entries: the null hypothesis the head statistics are compared against. "
        "Every change draws a new pair (fixed seed). It opens at the chosen run's d_model, d_head and init σ₀; "
        "nothing else is read from a store."
    )
    # --- the open run's shape and init scale, offered and chosen by default ---
    frame = viewstate.frame()
    offer = data.offer(frame.store)

    # --- widgets ---
    opts = _choose(offer)
    if opts.d_model % opts.n_heads:
        st.info(f"{opts.n_heads} heads do not divide d_model {opts.d_model}: pick another number of heads.")
        return
    sample = _sample(opts.d_model, opts.n_heads, opts.sigma_q, opts.sigma_k, low_rank=not opts.full, seed=0)
    _opened_at(frame, offer)

    # --- panel: the head pages' statistics of this draw, against many draws ---
    _stats_panel(sample, opts)

    # --- panels: element distribution; ordered singular values ---
    left, right = st.columns(2)
    with left:
        _entries_panel(sample, opts)
    with right:
        _sv_panel(sample, opts)

    # --- panel: P(lambda) with the free-product and plain Marchenko-Pastur laws ---
    _law_panel(sample, opts)


def _choose(offer: data.Offer) -> _Choices:
    """The widgets: d_model, heads and the two widths in a row, the full-rank switch in the next."""
    c1, c2, c3, c4 = st.columns([2, 2, 2, 2], vertical_alignment="bottom")
    c5, _ = st.columns([1, 3])  # the switch on its own row: its label reads whole at 1,024 px
    d_model = widgets.select("dmodel", "d_model", offer.d_models, offer.d_model0, where=c1)
    n_heads = widgets.select("nheads", "heads (d_head = d_model / heads)", offer.n_heads, offer.heads0, where=c2)
    sigma_q = widgets.select("sq", "σ of W_Q entries", offer.sigmas, offer.sigma0, where=c3)
    sigma_k = widgets.select("sk", "σ of W_K entries", offer.sigmas, offer.sigma0, where=c4)
    full = widgets.toggle(
        "full", "full rank", False, where=c5, help="d_model x d_model factors instead of d_head x d_model (one head)"
    )
    return _Choices(d_model=d_model, n_heads=n_heads, sigma_q=sigma_q, sigma_k=sigma_k, full=full)


def _opened_at(frame: Frame, offer: data.Offer) -> None:
    """Which run's shape and init scale the lab opened at."""
    store = frame.store
    if store is not None:
        st.caption(
            f"Opened at the run *{frame.run}*: d_model {store.d_model}, d_head {store.d_head}, init σ₀ "
            f"{offer.sigma0:.3g} (from its step-0 heads: σ_QK = σ₀² √d_head)."
            if offer.run_sigma0
            else f"Opened at the run *{frame.run}*: d_model {store.d_model}, d_head {store.d_head}."
        )


def _stats_panel(sample: Any, opts: _Choices) -> None:
    """This draw's statistics, and the random-head reference where it applies (drawn on request for a large shape)."""
    st.subheader("Statistics of this W_QK")
    with_ref = (
        not opts.full
        and opts.sigma_q == opts.sigma_k
        and (
            opts.d_model <= REFERENCE_AT_ONCE
            or st.button(f"Add the random-head reference (32 draws at d_model {opts.d_model}: some seconds, once per shape)")
        )
    )
    table = data.stats_table(sample, opts.d_model, opts.n_heads, opts.sigma_q, with_ref)
    st.dataframe(table, hide_index=True, key="rmt_stats")
    st.caption(
        "The statistics the head pages show, of this one draw; for a low-rank product with σ_Q = σ_K, the "
        "random-head reference of the Heads page and head explorer (mean and 5-95% over 32 seeded draws of "
        "this shape). An entry of W_QK is a sum of d_head products of Gaussians: excess kurtosis 6/d_head, and "
        "D_KL from a Gaussian above 0."
    )


def _entries_panel(sample: Any, opts: _Choices) -> None:
    """The histogram of W_QK's entries against the Gaussian of the predicted width."""
    tag = opts.tag
    st.subheader("Entries of W_QK")
    log_p = widgets.toggle("logp", "log density axis", False)
    charts.chart(
        figs.entries_figure(sample, log_density=log_p),
        "rmt_entries",
        title=f"random W_QK · {tag} · entries",
        filename=export.safe_name("random", tag, "entries"),
        csv=lambda: data.trace_csv(figs.entries_figure(sample), tag),
    )
    st.caption(
        f"Histogram of the {opts.d_model}² entries; red: the Gaussian of the predicted width σ_Q σ_K √r "
        f"= {sample.predicted_std:.3g} (r = {sample.rank}); measured σ = {sample.entry_std:.3g}."
    )


def _sv_panel(sample: Any, opts: _Choices) -> None:
    """All singular values of W_QK, largest first, the cut at d_head marked."""
    tag = opts.tag
    st.subheader("Ordered singular values")
    charts.chart(
        figs.singular_values_figure(sample),
        "rmt_sv",
        title=f"random W_QK · {tag} · singular values",
        filename=export.safe_name("random", tag, "sv"),
        csv=lambda: data.trace_csv(figs.singular_values_figure(sample), tag),
    )
    cut = f"only the first {sample.rank} are non-zero (dashed line: the cut at d_head)" if not opts.full else "all non-zero"
    st.caption(f"All {opts.d_model} singular values of W_QK, largest first, log scale: {cut}; the rest are rounding noise.")


def _law_panel(sample: Any, opts: _Choices) -> None:
    """The non-zero lambda_k against the free product of two Marchenko-Pastur laws and one factor's plain law."""
    tag = opts.tag
    st.subheader("Spectrum against the null laws")
    charts.chart(
        figs.spectrum_law_figure(sample),
        "rmt_law",
        title=f"random W_QK · {tag} · spectrum against the null laws",
        filename=export.safe_name("random", tag, "law"),
        csv=lambda: data.trace_csv(figs.spectrum_law_figure(sample), tag),
    )
    st.caption(
        f"The {sample.rank} non-zero λ_k = s_k², rescaled by (d_model σ_Q σ_K)²; red: the free product of two "
        f"Marchenko-Pastur laws with c = {sample.c:.3g} (the null model of `analysis/rmt/nullmodel.py`); grey dotted: one "
        "factor's plain Marchenko-Pastur law, which a product of two does not follow."
    )
