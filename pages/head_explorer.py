"""Head explorer: one head's weight distribution and spectrum over training, with chosen steps."""

import numpy as np
import streamlit as st

from analysis.crossings import GAP_THRESHOLD, level_crossings
from analysis.density import density_curves, density_extent, density_grid
from analysis.errors import StoreError
from dashboard import loader, widgets
from dashboard.data import approach_table, default_steps, fixed_range, loss_curve, null_spectra
from dashboard.figures.common import overlay_loss
from dashboard.figures import head as figs
from dashboard.stats import STATS, stats_for
from dashboard.style import step_colours

DENSITY_GRID_POINTS = 320  # w resolution of the P(w) map; the histogram has 200 bins per step
MAX_CHOSEN_STEPS = 8
GAP_PERCENT = [2, 5, 10, 20]  # choices of the close-approach threshold, percent relative gap


def main() -> None:
    st.title("Head explorer")
    # --- empty case ---
    frame = widgets.run_frame()
    if frame is None:
        return
    store = frame.store
    axis = frame.axis()
    steps = [int(s) for s in store.steps]

    # --- widgets ---
    c_layer, c_head, c_steps, c_loss = st.columns([1, 1, 4, 1], vertical_alignment="bottom")
    layer = widgets.select("layer", "Layer", list(range(store.n_layers)), 0, where=c_layer)
    head = widgets.select("head", "Head", list(range(store.n_heads)), 0, where=c_head)
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None, where=c_loss)  # on the line charts over training

    def with_loss(fig):
        return overlay_loss(fig, axis, *curve) if show_loss else fig
    chosen = widgets.multiselect(
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
        log_p = widgets.toggle("logp", "log density axis", True)
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
        show_null = widgets.toggle("null", "random-head reference", True,
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

    # --- panel: lambda_0 .. lambda_3 over training, close approaches marked crossing or repulsion ---
    st.subheader("Leading eigenvalues: crossings and repulsions")
    left, right = st.columns([7, 4])
    with right:
        c_log, c_gap = st.columns(2, vertical_alignment="bottom")
        log_lam = widgets.toggle("loglam", "log λ axis", False, where=c_log)
        try:
            overlaps = loader.head_overlaps(store, layer, head)
        except StoreError as exc:
            st.error(str(exc))
            overlaps = None
        crossings = None
        if overlaps is not None:
            gap_pct = widgets.select(
                "gap", "Close when the gap of s is below", GAP_PERCENT, round(100 * GAP_THRESHOLD),
                fmt=lambda g: f"{g}%", where=c_gap,
                help="Relative gap of adjacent singular values, (s_i − s_i+1)/(s_i + s_i+1). "
                     "An approach is a stretch of checkpoints below it, with the levels farther apart before and after.",
            )
            crossings = level_crossings(lam, overlaps, gap_threshold=gap_pct / 100)
        if crossings is None:
            st.info("This store has no singular-vector overlaps, so approaches cannot be told apart. "
                    "Run `python -m precompute` on it again to add them (it re-reads the checkpoints).",
                    icon=":material/info:")
        else:
            kinds = [a.kind for a in crossings.approaches]
            st.markdown(f"**{kinds.count('crossing')} crossings, {kinds.count('repulsion')} repulsions**"
                        + (f", {kinds.count('unresolved')} unresolved" if "unresolved" in kinds else "")
                        + f" among λ_0 … λ_{crossings.kept.shape[1] - 1}")
            st.dataframe(approach_table(crossings.approaches, store.steps), hide_index=True, height=260,
                         key="approaches")
            st.caption("A close approach is a **crossing** when the two levels' singular vectors swap places between "
                       "neighbouring checkpoints (O_i,i+1·O_i+1,i > O_ii·O_i+1,i+1) and a **repulsion** when each keeps "
                       "its own; O_ab = |⟨u_a(t), u_b(t+1)⟩|·|⟨v_a(t), v_b(t+1)⟩|. Rule: README, \"Crossing or repulsion?\"")
    with left:
        if crossings is None:
            st.plotly_chart(with_loss(figs.leading_lambdas(axis, lam[:, :4], chosen_x=chosen_x, colours=colours,
                                                           log_y=log_lam)), key="leading")
            st.caption(f"λ_0 … λ_3, the four largest squared singular values of W_QK for {name}, over training.")
        else:
            st.plotly_chart(with_loss(figs.level_crossings(axis, lam, crossings, chosen_x=chosen_x, colours=colours,
                                                           log_y=log_lam)), key="leading")
            st.caption(f"Top: λ_0 … λ_3 of W_QK for {name} over training; ✕ a crossing, ○ a repulsion, at the "
                       "closest approach. Bottom: O_kk, how much level k kept its singular directions from the "
                       "previous checkpoint (1: unchanged; a dip to 0 with a rise of O_k,k±1: the levels swapped).")

    # --- panel: any statistic of this head against its layer ---
    with st.container():
        st.subheader("One statistic, head against its layer")
        c_stat, c_k, c_log = st.columns([4, 3, 2], vertical_alignment="bottom")
        stat, k, log_y = widgets.statistic(store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log,
                                           log=("logy", "log y axis"), options=stats_for(store))
        values = loader.stat_values(store, stat, k=k or 0)
        fig = figs.head_in_layer(
            axis, values[:, layer, :], head=head, stat=STATS[stat], k=k,
            y_range=fixed_range(values, log=log_y), log_y=log_y, chosen_x=chosen_x, colours=colours,
        )
        st.plotly_chart(with_loss(fig), key="head_in_layer")
        st.caption(f"{STATS[stat].short(k)} of head {head} (dark) over training, the other heads of layer {layer} "
                   "in grey and the layer mean red dashed; y range fixed over all layers and heads.")


main()
