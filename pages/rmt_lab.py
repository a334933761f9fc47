"""Random-matrix lab: what W_QK = W_Q^T W_K looks like when W_Q and W_K are pure noise."""

import pandas as pd
import streamlit as st

from dashboard import charts, export, loader, viewstate, widgets
from dashboard.figures import rmt as figs
from dashboard.labels import STATS
from dashboard.tables import init_scale

D_MODELS = [128, 256, 512, 768, 1024]
N_HEADS = [1, 2, 4, 8, 16, 32]
SIGMAS = [0.005, 0.01, 0.014, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]  # 0.014 ~ Pythia-1.4B's small init


def main() -> None:
    st.title("Random-matrix lab")
    st.caption(
        "W_Q and W_K drawn with i.i.d. Gaussian entries: the null hypothesis the head statistics are compared against. "
        "Every change draws a new pair (fixed seed). It opens at the chosen run's d_model, d_head and init σ₀; "
        "nothing else is read from a store."
    )
    # --- the open run's shape and init scale, offered and chosen by default ---
    frame = viewstate.frame()
    store = frame.store
    d_model0, heads0, sigma0 = 512, 8, 0.02
    if store is not None and store.d_model % store.d_head == 0 and store.d_model <= 2048:
        d_model0, heads0 = int(store.d_model), int(store.d_model // store.d_head)
        scale = init_scale(store)
        sigma0 = float(f"{scale:.3g}") if scale else sigma0
    d_models = sorted(set(D_MODELS) | {d_model0})
    n_heads_opts = sorted(set(N_HEADS) | {heads0})
    sigmas = sorted(set(SIGMAS) | {sigma0})

    # --- widgets ---
    c1, c2, c3, c4 = st.columns([2, 2, 2, 2], vertical_alignment="bottom")
    c5, _ = st.columns([1, 3])  # the switch on its own row: its label reads whole at 1,024 px
    d_model = widgets.select("dmodel", "d_model", d_models, d_model0, where=c1)
    n_heads = widgets.select("nheads", "heads (d_head = d_model / heads)", n_heads_opts, heads0, where=c2)
    sigma_q = widgets.select("sq", "σ of W_Q entries", sigmas, sigma0, where=c3)
    sigma_k = widgets.select("sk", "σ of W_K entries", sigmas, sigma0, where=c4)
    full = widgets.toggle(
        "full", "full rank", False, where=c5, help="d_model x d_model factors instead of d_head x d_model (one head)"
    )
    if d_model % n_heads:
        st.info(f"{n_heads} heads do not divide d_model {d_model}: pick another number of heads.")
        return
    sample = loader.rmt_sample(d_model, n_heads, sigma_q, sigma_k, not full, 0)
    tag = f"d_model {d_model}, {n_heads} heads, σ_Q {sigma_q:g}, σ_K {sigma_k:g}{', full rank' if full else ''}"
    if store is not None:
        st.caption(
            f"Opened at the run *{frame.run}*: d_model {store.d_model}, d_head {store.d_head}, init σ₀ "
            f"{sigma0:.3g} (from its step-0 heads: σ_QK = σ₀² √d_head)."
            if init_scale(store)
            else f"Opened at the run *{frame.run}*: d_model {store.d_model}, d_head {store.d_head}."
        )

    # --- panel: the head pages' statistics of this draw, against many draws ---
    st.subheader("Statistics of this W_QK")
    with_ref = (
        not full
        and sigma_q == sigma_k
        and (
            d_model <= REFERENCE_AT_ONCE
            or st.button(f"Add the random-head reference (32 draws at d_model {d_model}: some seconds, once per shape)")
        )
    )
    st.dataframe(_stats_table(sample, d_model, n_heads, sigma_q, with_ref), hide_index=True, key="rmt_stats")
    st.caption(
        "The statistics the head pages show, of this one draw; for a low-rank product with σ_Q = σ_K, the "
        "random-head reference of the Heads page and head explorer (mean and 5-95% over 32 seeded draws of "
        "this shape). An entry of W_QK is a sum of d_head products of Gaussians: excess kurtosis 6/d_head, and "
        "D_KL from a Gaussian above 0."
    )

    # --- panel: element distribution ---
    left, right = st.columns(2)
    with left:
        st.subheader("Entries of W_QK")
        log_p = widgets.toggle("logp", "log density axis", False)
        charts.chart(
            figs.entries_figure(sample, log_density=log_p),
            "rmt_entries",
            title=f"random W_QK · {tag} · entries",
            filename=export.safe_name("random", tag, "entries"),
            csv=lambda: _trace_csv(figs.entries_figure(sample), tag),
        )
        st.caption(
            f"Histogram of the {d_model}² entries; red: the Gaussian of the predicted width σ_Q σ_K √r "
            f"= {sample.predicted_std:.3g} (r = {sample.rank}); measured σ = {sample.entry_std:.3g}."
        )
    # --- panel: ordered singular values ---
    with right:
        st.subheader("Ordered singular values")
        charts.chart(
            figs.singular_values_figure(sample),
            "rmt_sv",
            title=f"random W_QK · {tag} · singular values",
            filename=export.safe_name("random", tag, "sv"),
            csv=lambda: _trace_csv(figs.singular_values_figure(sample), tag),
        )
        cut = f"only the first {sample.rank} are non-zero (dashed line: the cut at d_head)" if not full else "all non-zero"
        st.caption(f"All {d_model} singular values of W_QK, largest first, log scale: {cut}; the rest are rounding noise.")
    # --- panel: P(lambda) with the free-product and plain Marchenko-Pastur laws ---
    st.subheader("Spectrum against the null laws")
    charts.chart(
        figs.spectrum_law_figure(sample),
        "rmt_law",
        title=f"random W_QK · {tag} · spectrum against the null laws",
        filename=export.safe_name("random", tag, "law"),
        csv=lambda: _trace_csv(figs.spectrum_law_figure(sample), tag),
    )
    st.caption(
        f"The {sample.rank} non-zero λ_k = s_k², rescaled by (d_model σ_Q σ_K)²; red: the free product of two "
        f"Marchenko-Pastur laws with c = {sample.c:.3g} (the null model of `analysis/rmt/nullmodel.py`); grey dotted: one "
        "factor's plain Marchenko-Pastur law, which a product of two does not follow."
    )


LAB_STATS = ("std", "kurtosis", "skew", "kl_gauss", "stable_rank", "spectral_entropy", "participation_ratio")


REFERENCE_AT_ONCE = 512  # up to this d_model the reference is drawn at once; above it, on request


def _stats_table(sample, d_model: int, n_heads: int, sigma: float, with_reference: bool) -> pd.DataFrame:
    """This draw's statistics, with the Gaussian-factor reference when asked (it applies to low rank, equal widths)."""
    from analysis.rmt.references import gaussian_references

    refs = gaussian_references(d_model, d_model // n_heads, sigma)[0] if with_reference else {}
    rows = []
    for name in LAB_STATS:
        ref = refs.get(name)
        rows.append(
            {
                "statistic": STATS[name].label,
                "this draw": sample.stats.get(name, float("nan")),
                "random heads, mean": ref.mean if ref else None,
                "5%": ref.lo if ref else None,
                "95%": ref.hi if ref else None,
            }
        )
    return pd.DataFrame(rows)


def _trace_csv(fig, tag: str) -> pd.DataFrame:
    """Every trace of a lab figure as tidy rows: setting, series, x, value."""
    parts = [
        pd.DataFrame({"setting": tag, "series": t.name, "x": list(t.x), "value": list(t.y)})
        for t in fig.data
        if t.x is not None and t.y is not None
    ]
    return pd.concat(parts, ignore_index=True)


main()
