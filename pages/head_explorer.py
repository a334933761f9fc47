"""Head explorer: one head's weight distribution and spectrum over training, with chosen steps."""

import numpy as np
import streamlit as st

from dashboard import controls, loader
from dashboard.data import default_steps, density_curves, density_extent, density_grid, fixed_range, null_spectra
from dashboard.figures import head as figs
from dashboard.stats import LAMBDA, STATS
from dashboard.style import step_colours

DENSITY_GRID_POINTS = 320  # w resolution of the P(w) map; the histogram has 200 bins per step
MAX_CHOSEN_STEPS = 8


def main() -> None:
    st.title("Head explorer")
    # --- empty case ---
    frame = controls.run_frame()
    if frame is None:
        return
    store = frame.store
    axis = frame.axis()
    steps = [int(s) for s in store.steps]

    # --- widgets ---
    c_layer, c_head, c_steps = st.columns([1, 1, 4])
    layer = controls.select("layer", "Layer", list(range(store.n_layers)), 0, where=c_layer)
    head = controls.select("head", "Head", list(range(store.n_heads)), 0, where=c_head)
    chosen = controls.multiselect(
        "step", "Chosen steps (marked in every panel)", steps, default_steps(store.steps), fmt=lambda s: f"{s:,}",
        where=c_steps, max_selections=MAX_CHOSEN_STEPS,
    )
    if not chosen:
        st.caption("No step chosen: pick at least one to draw the distribution and spectrum at fixed steps.")
    idx = [steps.index(s) for s in chosen]
    colours = step_colours(len(chosen))
    labels = [f"step {s:,}" for s in chosen]
    chosen_x = [float(axis.x[i]) for i in idx]

    # --- slices (views of cached arrays) ---
    hist = store.array("hist_z")[:, layer, head, :].astype(np.float64)  # (S, 202)
    mu = store.array("mean")[:, layer, head]
    sigma = store.array("std")[:, layer, head]
    kl = store.array("kl_gauss")[:, layer, head]
    sv = store.array("sv")[:, layer, head, :].astype(np.float64)  # (S, d_head)
    lam = sv * sv
    name = f"layer {layer}, head {head}"

    # --- panel: P(w) over training ---
    left, right = st.columns([5, 6])
    with left:
        st.subheader("Weight distribution over training")
        w_lo, w_hi = density_extent(hist, mu, sigma)
        w = np.linspace(w_lo, w_hi, DENSITY_GRID_POINTS)
        st.plotly_chart(figs.density_map(axis, w, density_grid(hist, mu, sigma, w), chosen_x=chosen_x, colours=colours),
                        key="density_map")
        st.caption(f"p(w) of the d_model² entries of W_QK for {name} at every checkpoint (log colour); "
                   "rebuilt from the standardized histogram as p_z((w − μ)/σ)/σ. Top ticks: chosen steps.")

    # --- panel: P(w) at the chosen steps, sigma(t), D_KL(t) ---
    with right:
        st.subheader("Distribution at the chosen steps")
        log_p = controls.toggle("logp", "log density axis", True)
        w_all, p_all = density_curves(hist, mu, sigma)
        p_range = figs.log_density_range(p_all) if log_p else fixed_range(p_all)
        st.plotly_chart(figs.density_slices(
            w_all[idx], p_all[idx], labels=labels, colours=colours, axis=axis, chosen_idx=idx, sigma=sigma, kl=kl,
            stats=(STATS["std"], STATS["kl_gauss"]), w_range=(w_lo, w_hi), p_range=p_range, log_p=log_p,
        ), key="density_slices")
        st.caption("Left: p(w) at each chosen step (axes fixed over the run). Right: σ and D_KL(P‖N(μ,σ)) of the "
                   "same head over training, chosen steps marked in matching colours.")

    # --- panel: lambda_k over (k, step) ---
    left, right = st.columns([5, 6])
    with left:
        st.subheader("Spectrum over training")
        st.plotly_chart(figs.spectrum_map(axis, lam, chosen_x=chosen_x, colours=colours), key="spectrum_map")
        st.caption(f"λ_k = s_k² of W_QK for {name}, every singular-value index k at every checkpoint (log colour).")

    # --- panel: lambda_k vs k at the chosen steps, stable rank and entropy over training ---
    with right:
        st.subheader("Spectrum at the chosen steps")
        show_null = controls.toggle("null", "random-head reference", True,
                                    help="Dotted: the typical spectrum of a Gaussian head with the same Frobenius norm")
        null_lam = null_spectra(lam[idx], store) if show_null else None
        st.plotly_chart(figs.spectrum_slices(
            lam[idx], labels=labels, colours=colours, axis=axis, chosen_idx=idx,
            stable_rank=store.array("stable_rank")[:, layer, head],
            entropy=store.array("spectral_entropy")[:, layer, head],
            stats=(STATS["stable_rank"], STATS["spectral_entropy"]), lam_range=fixed_range(lam, log=True),
            null_lam=null_lam,
        ), key="spectrum_slices")
        st.caption("Left: λ_k versus k at each chosen step (log scale, fixed over the run); dotted: a random "
                   "(Gaussian) head rescaled to the same Frobenius norm, the free-product Marchenko-Pastur null. "
                   "Right: stable rank Σλ/λ_max and spectral entropy of the same head over training, chosen steps marked.")

    # --- panel: lambda_0 .. lambda_3 over training ---
    left, right = st.columns([5, 6])
    with left:
        st.subheader("Leading eigenvalues")
        log_lam = controls.toggle("loglam", "log λ axis", False)
        st.plotly_chart(figs.leading_lambdas(axis, lam[:, :4], chosen_x=chosen_x, colours=colours, log_y=log_lam),
                        key="leading")
        st.caption(f"λ_0 … λ_3, the four largest squared singular values of W_QK for {name}, over training.")

    # --- panel: any statistic of this head against its layer ---
    with right:
        st.subheader("One statistic, head against its layer")
        c_stat, c_k, c_log = st.columns([4, 3, 2], vertical_alignment="bottom")
        stat = controls.select("stat", "Statistic", list(STATS), "std", fmt=lambda s: STATS[s].label, where=c_stat)
        k = None
        if stat == LAMBDA:
            k = controls.int_slider("k", "k (singular-value index)", 0, store.d_head - 1, 0, where=c_k)
        log_y = controls.toggle("logy", "log y axis", False, where=c_log) if STATS[stat].positive else False
        values = loader.stat_values(store, stat, k=k or 0)
        st.plotly_chart(figs.head_in_layer(
            axis, values[:, layer, :], head=head, stat=STATS[stat], k=k,
            y_range=fixed_range(values, log=log_y), log_y=log_y, chosen_x=chosen_x, colours=colours,
        ), key="head_in_layer")
        st.caption(f"{STATS[stat].short(k)} of head {head} (dark) over training, the other heads of layer {layer} "
                   "in grey and the layer mean red dashed; y range fixed over all layers and heads.")


main()
