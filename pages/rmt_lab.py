"""Random-matrix lab: what W_QK = W_Q^T W_K looks like when W_Q and W_K are pure noise."""

import streamlit as st

from dashboard import loader, widgets
from dashboard.figures import rmt as figs

D_MODELS = [128, 256, 512, 768, 1024]
N_HEADS = [1, 2, 4, 8, 16, 32]
SIGMAS = [0.005, 0.01, 0.014, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]  # 0.014 ~ Pythia-1.4B's small init


def main() -> None:
    st.title("Random-matrix lab")
    st.caption(
        "W_Q and W_K drawn with i.i.d. Gaussian entries: the null hypothesis the head statistics are compared against. "
        "Every change draws a new pair (fixed seed); nothing here reads a store."
    )
    # --- widgets ---
    c1, c2, c3, c4, c5 = st.columns([2, 2, 2, 2, 1], vertical_alignment="bottom")
    d_model = widgets.select("dmodel", "d_model", D_MODELS, 512, where=c1)
    n_heads = widgets.select("nheads", "heads (d_head = d_model / heads)", N_HEADS, 8, where=c2)
    sigma_q = widgets.select("sq", "σ of W_Q entries", SIGMAS, 0.02, where=c3)
    sigma_k = widgets.select("sk", "σ of W_K entries", SIGMAS, 0.02, where=c4)
    full = widgets.toggle("full", "full rank", False, where=c5,
                          help="d_model x d_model factors instead of d_head x d_model (one head)")
    sample = loader.rmt_sample(d_model, n_heads, sigma_q, sigma_k, not full, 0)

    # --- panel: element distribution ---
    left, right = st.columns(2)
    with left:
        st.subheader("Entries of W_QK")
        log_p = widgets.toggle("logp", "log density axis", False)
        st.plotly_chart(figs.entries_figure(sample, log_density=log_p), key="rmt_entries")
        st.caption(
            f"Histogram of the {d_model}² entries; red: the Gaussian of the predicted width σ_Q σ_K √r "
            f"= {sample.predicted_std:.3g} (r = {sample.rank}); measured σ = {sample.entry_std:.3g}."
        )
    # --- panel: ordered singular values ---
    with right:
        st.subheader("Ordered singular values")
        st.plotly_chart(figs.singular_values_figure(sample), key="rmt_sv")
        cut = f"only the first {sample.rank} are non-zero (dashed line: the cut at d_head)" if not full else "all non-zero"
        st.caption(f"All {d_model} singular values of W_QK, largest first, log scale: {cut}; the rest are rounding noise.")
    # --- panel: P(lambda) with the free-product and plain Marchenko-Pastur laws ---
    st.subheader("Spectrum against the null laws")
    st.plotly_chart(figs.spectrum_law_figure(sample), key="rmt_law")
    st.caption(
        f"The {sample.rank} non-zero λ_k = s_k², rescaled by (d_model σ_Q σ_K)²; red: the free product of two "
        f"Marchenko-Pastur laws with c = {sample.c:.3g} (the null model of `analysis/nullmodel.py`); grey dotted: one "
        "factor's plain Marchenko-Pastur law, which a product of two does not follow."
    )


main()
