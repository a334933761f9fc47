"""The head explorer's weight panels: P(w) over training and at the chosen steps (tab ``weights``), the spectrum over
training and at the chosen steps (tab ``spectrum``), for one matrix or for W_QK and W_OV side by side.

What they draw is computed in `views.head.data` (the P(w) grid and curves, the random-head spectra, the CSV tables);
the figures are `views.head.figures.density` and `views.head.figures.spectrum`.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from headwatch.dashboard import charts, export, widgets
from headwatch.dashboard.data import fixed_range
from headwatch.dashboard.labels import STATS
from headwatch.dashboard.tables import REFERENCE_FACTORS, reference_of
from headwatch.dashboard.views.head import data
from headwatch.dashboard.views.head.choice import Head, other
from headwatch.dashboard.views.head.figures import density as density_figs
from headwatch.dashboard.views.head.figures import spectrum as spectrum_figs


def weight_panels(h: Head, panel: str) -> list[Any]:
    """P(w) over training | at the chosen steps (``panel`` ``weights``), or the spectrum over training | at the chosen
    steps (``spectrum``): one matrix. Returns the chart's selection (a click on an overlaid head)."""
    left, right = st.columns([5, 6])
    if panel == "weights":
        w_range = data.w_range(h.hist, h.mu, h.sigma)  # the w axis of the map and of the slices
        with left:
            _density_map(h, w_range)
        with right:
            picked, _ = _density_slices(h, w_range)
    else:
        with left:
            _spectrum_map(h)
        with right:
            picked, _ = _spectrum_slices(h)
    return [picked]


def both_weight_panels(h: Head, panel: str) -> list[Any]:
    """P(w) (``panel`` ``weights``) or the spectrum (``spectrum``) for W_QK and W_OV side by side: the matrix chosen on
    the left, the other on the right; the panels' switches are set once, on the left, and hold for both. Returns the
    charts' selections."""
    pair = (h, other(h))
    picks: list[Any] = []
    if panel == "weights":
        ranges = [data.w_range(x.hist, x.mu, x.sigma) for x in pair]
        for x, w_range, col in zip(pair, ranges, st.columns(2), strict=True):
            with col:
                _density_map(x, w_range)
        density: tuple | None = None
        for x, w_range, col in zip(pair, ranges, st.columns(2), strict=True):
            with col:
                picked, density = _density_slices(x, w_range, controls=density)
                picks.append(picked)
        return picks
    for x, col in zip(pair, st.columns(2), strict=True):
        with col:
            _spectrum_map(x)
    null: bool | None = None
    for x, col in zip(pair, st.columns(2), strict=True):
        with col:
            picked, null = _spectrum_slices(x, show_null=null)
            picks.append(picked)
    return picks


def _density_map(h: Head, w_range: tuple[float, float]) -> None:
    """P(w) of the head over (step, w), log colour."""
    st.subheader(f"Weight distribution over training · {h.w_name}" if h.both else "Weight distribution over training")
    w, grid = data.density_map(h.hist, h.mu, h.sigma, w_range)
    run, store = h.frame.run, h.store
    charts.chart(
        h.over_time(density_figs.density_map(h.axis, w, grid, chosen_x=h.chosen_x, colours=h.colours, matrix_name=h.w_name)),
        f"density_map{h.key}",
        title=h.title("P(w) over training"),
        filename=export.safe_name(run, h.tag, "Pw-map"),
        csv=lambda: data.grid_table(grid, w, x_name="w", statistic="p(w)", steps=store.steps, **h.who),
    )
    st.caption(
        f"p(w) of the d_model² entries of {h.w_name} for {h.name} at every checkpoint (log colour); "
        "rebuilt from the standardized histogram as p_z((w − μ)/σ)/σ. Top ticks: chosen steps."
    )


def _density_slices(h: Head, w_range: tuple[float, float], *, controls: tuple | None = None) -> tuple[Any, tuple]:
    """P(w) at the chosen steps (raw or standardized, with their Gaussians), sigma and D_KL over training; returns
    the chart's selection (a click on an overlaid head) and its switches (``controls``: those of the panel beside it,
    not made again)."""
    st.subheader(f"Distribution at the chosen steps · {h.w_name}" if h.both else "Distribution at the chosen steps")
    if controls is None:
        c_logp = c_z = c_g = st  # one switch a line: side by side in this half-width panel they cut their labels at 1,024 px
        log_p = widgets.toggle("logp", "log density axis", True, where=c_logp)
        standardized = widgets.toggle(
            "zview", "standardized z", False, where=c_z, help="Plot z = (w − μ)/σ at each step: shapes compare at equal width"
        )
        gauss_on = widgets.toggle(
            "gauss", "Gaussian", True, where=c_g, help="Dashed: the Gaussian of the same mean and σ at each chosen step"
        )
        controls = (log_p, standardized, gauss_on)
    log_p, standardized, gauss_on = controls
    mu, sigma, kl, idx = h.mu, h.sigma, h.kl, h.idx
    w_all, p_all = data.curves(h.hist, mu, sigma, z_units=standardized)
    x_range = density_figs.z_range(h.hist) if standardized else w_range
    p_range = density_figs.log_density_range(p_all) if log_p else fixed_range(p_all)
    gauss = data.gaussians(mu, sigma, idx, z_units=standardized) if gauss_on else []
    run, store, matrix = h.frame.run, h.store, h.matrix
    picked = charts.chart(
        density_figs.density_slices(
            w_all[idx],
            p_all[idx],
            labels=h.labels,
            colours=h.colours,
            axis=h.axis,
            chosen_idx=idx,
            sigma=sigma,
            kl=kl,
            stats=(STATS["std"], STATS["kl_gauss"]),
            w_range=x_range,
            p_range=p_range,
            log_p=log_p,
            gauss=gauss,
            bands=(reference_of(h.refs, "std", None), reference_of(h.refs, "kl_gauss", None)),
            standardized=standardized,
            compare=data.compared(store, ("std", "kl_gauss"), matrix=matrix, pairs=h.pairs),
            matrix_name=h.w_name,
        ),
        f"density_slices{h.key}",
        title=h.title("P(w) at chosen steps, σ, D_KL"),
        filename=export.safe_name(run, h.tag, "Pw-sigma-DKL"),
        csv=lambda: data.slices_table(w_all, p_all, idx, sigma, kl, z_units=standardized, steps=store.steps, **h.who),
        select=bool(h.pairs),
    )
    band = reference_of(h.refs, "kl_gauss", None)
    ref = (
        f" Grey bands: 5-95% of σ and D_KL over random heads of {h.w_name} (Gaussian {REFERENCE_FACTORS[matrix]} of "
        f"this run's shape and the init σ₀ of its step-0 {h.w_name} heads; D_KL {band.mean:.2g} [{band.lo:.2g}, "
        f"{band.hi:.2g}] nats: a product of Gaussian factors is not itself Gaussian), mean dotted."
        if band is not None
        else ""
    )
    st.caption(
        f"Left: p{'(z) of z = (w − μ)/σ' if standardized else '(w)'} at each chosen step (axes fixed over the "
        "run), dashed: the Gaussian of the same mean and σ. Right: σ and D_KL(P‖N(μ,σ)) of the "
        f"same head over training, chosen steps marked in matching colours.{ref}"
    )
    return picked, controls


def _spectrum_map(h: Head) -> None:
    """lambda_k of the head over (k, step), log colour."""
    st.subheader(f"Spectrum over training · {h.w_name}" if h.both else "Spectrum over training")
    run, store = h.frame.run, h.store
    charts.chart(
        h.over_time(spectrum_figs.spectrum_map(h.axis, h.lam, chosen_x=h.chosen_x, colours=h.colours)),
        f"spectrum_map{h.key}",
        title=h.title("λ_k over training"),
        filename=export.safe_name(run, h.tag, "lambda-map"),
        csv=lambda: data.lam_table(h.lam, range(len(store.steps)), steps=store.steps, **h.who),
    )
    st.caption(f"λ_k = s_k² of {h.w_name} for {h.name}, every singular-value index k at every checkpoint (log colour).")


def _spectrum_slices(h: Head, *, show_null: bool | None = None) -> tuple[Any, bool]:
    """lambda_k versus k at the chosen steps (with the random-head null), stable rank and spectral entropy over
    training; returns the chart's selection (a click on an overlaid head) and the null switch (``show_null``: the
    panel beside it's, not made again)."""
    st.subheader(f"Spectrum at the chosen steps · {h.w_name}" if h.both else "Spectrum at the chosen steps")
    if show_null is None:
        show_null = widgets.toggle(
            "null",
            "random-head reference",
            True,
            help="Dotted: the typical spectrum of a Gaussian head with the same Frobenius norm",
        )
    run, store, matrix, lam, idx = h.frame.run, h.store, h.matrix, h.lam, h.idx
    null_lam = data.null_spectra_at(lam, idx, store) if show_null else None
    names = ("stable_rank", "spectral_entropy")
    stable_rank, entropy = data.series(store, names, matrix=matrix, layer=h.layer, head=h.head)
    picked = charts.chart(
        spectrum_figs.spectrum_slices(
            lam[idx],
            labels=h.labels,
            colours=h.colours,
            axis=h.axis,
            chosen_idx=idx,
            stable_rank=stable_rank,
            entropy=entropy,
            stats=(STATS["stable_rank"], STATS["spectral_entropy"]),
            lam_range=fixed_range(lam, log=True),
            null_lam=null_lam,
            compare=data.compared(store, names, matrix=matrix, pairs=h.pairs),
        ),
        f"spectrum_slices{h.key}",
        title=h.title("λ_k at chosen steps, stable rank, entropy"),
        filename=export.safe_name(run, h.tag, "spectrum"),
        csv=lambda: data.lam_table(lam, idx, steps=store.steps, **h.who),
        select=bool(h.pairs),
    )
    st.caption(
        "Left: λ_k versus k at each chosen step (log scale, fixed over the run); dotted: a random "
        "(Gaussian) head rescaled to the same Frobenius norm, the free-product Marchenko-Pastur null. "
        "Right: stable rank Σλ/λ_max and spectral entropy of the same head over training, chosen steps marked."
    )
    return picked, show_null
