"""Head explorer: one head's weight distribution and spectrum over training, with chosen steps."""

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.analysis.stats.crossings import level_crossings
from headwatch.analysis.stats.density import density_curves, density_extent, density_grid
from headwatch.dashboard import charts, derived, export, viewstate, widgets
from headwatch.dashboard.data import approach_table, default_steps, fixed_range, loss_curve, null_spectra
from headwatch.dashboard.figures import density as density_figs
from headwatch.dashboard.figures import head as head_figs
from headwatch.dashboard.figures import panels
from headwatch.dashboard.figures import spectrum as spectrum_figs
from headwatch.dashboard.figures.common import overlay_loss, stacked
from headwatch.dashboard.labels import LAMBDA, PER_HEAD_STATS, STATS, stats_for
from headwatch.dashboard.pagedata import head as head_data
from headwatch.dashboard.style import step_colours
from headwatch.dashboard.tables import REFERENCE_FACTORS, SWAP_SCORE_HELP, reference_of

DENSITY_GRID_POINTS = 320  # w resolution of the P(w) map; the histogram has 200 bins per step
MAX_CHOSEN_STEPS = 8
MAX_COMPARED = 6  # other heads overlaid on the over-training panel
PANELS = {  # URL panel -> its tab; one drawn at a time (a link to an event's evidence names its panel)
    "weights": "Weight distribution P(w)",
    "spectrum": "Spectrum λ_k",
    "leading": "λ_0 … λ_3: crossings",
    "statistic": "One statistic against its layer",
}
# The URL parameters of each tab's own widgets (the rest are above the tabs): a link keeps those of the tabs not drawn.
OWNS = {
    "weights": ("both", "gauss", "logp", "zview"),
    "spectrum": ("both", "null"),
    "leading": ("both", "gap", "loglam"),
    "statistic": ("stat", "k", "logy"),
}
STACK_RIGHT = 90  # px: right margin of every chart over training, for the loss axis (the maps' colour bars lie above)


@dataclass(frozen=True)
class _Head:
    """The head shown and what every panel shares: the widgets above the panels, and the head's arrays.

    Attributes:
        frame: the sidebar's run; axis: its time axis.
        matrix: ``qk`` or ``ov`` (URL ``matrix``); both: W_QK and W_OV side by side in every weight panel (the
            weight tabs' switch, URL ``both``, stores with both: `_with_both`); layer, head: the head (URL ``layer``,
            ``head``).
        idx: the chosen steps' checkpoint indices (URL ``step``); labels, colours, chosen_x: their names, colours
            and places on the time axis. pairs: other heads overlaid (URL ``cmp``).
        show_loss, curve: the loss toggle (URL ``loss``) and the loss curve, on every chart over training.
        hist, mu, sigma, kl: ``(S, 202)``, ``(S,)`` x 3: the standardized histogram, mean, sigma and D_KL.
        lam: ``(S, d_head)`` lambda_k = s_k^2.
        refs: the random heads of this matrix (its own init scale).
        key: the suffix of its charts' keys (``_other``: the matrix beside the chosen one).
    """

    frame: Any
    axis: Any
    matrix: str
    both: bool
    layer: int
    head: int
    idx: list[int]
    labels: list[str]
    colours: list[str]
    chosen_x: list[float]
    pairs: list[tuple[int, int]]
    show_loss: bool
    curve: Any
    hist: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    kl: np.ndarray
    lam: np.ndarray
    refs: Any
    key: str = ""  # its charts' key suffix: "" for the matrix chosen, "_other" for the one drawn beside it

    @property
    def store(self):
        return self.frame.store

    @property
    def w_name(self) -> str:
        return "W_QK" if self.matrix == "qk" else "W_OV"

    @property
    def name(self) -> str:
        return f"layer {self.layer}, head {self.head}"

    @property
    def shown(self) -> str:
        """What every chart's title names, the matrix included: an exported OV figure says it is one."""
        return f"{self.name} · {self.w_name}"

    def title(self, what: str) -> str:
        """A weight panel's chart title: run, head and matrix, then ``what`` (the statistic and the steps); on a second
        line when W_QK and W_OV stand side by side, where one line does not fit half the page."""
        return f"{self.frame.run} · {self.shown}{'<br>' if self.both else ' · '}{what}"

    def shown_for(self, stat: str) -> str:
        """What a chart of ``stat`` names: the head and its matrix, or the head alone for a statistic of the head itself
        (a forward-lens score, the refined LLC), which no matrix has."""
        return self.name if stat in PER_HEAD_STATS else self.shown

    @property
    def tag(self) -> str:
        return f"L{self.layer}H{self.head}" + ("" if self.matrix == "qk" else f"-{self.matrix.upper()}")

    def over_time(self, fig):
        """A chart over training: the loss on it when asked, margins shared with the page's others (`stacked`)."""
        return stacked(overlay_loss(fig, self.axis, *self.curve) if self.show_loss and self.curve else fig, right=STACK_RIGHT)


def main() -> None:
    st.title("Head explorer")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return

    # --- widgets: matrix, layer, head, the loss, the chosen steps, other heads to overlay ---
    h = _pick_head(frame)
    widgets.image_format()  # above the tabs: the same place on every tab, and two panels side by side start level

    # --- one panel at a time, in tabs (URL panel): only the chosen one is computed and drawn ---
    panel, tab = widgets.panel_tabs("panel", PANELS, "weights", owns=OWNS)
    stat = k = None
    with tab:
        if panel == "statistic":  # any statistic of this head against its layer
            picked = _statistic_panels(h)
            if picked is None:
                return
            stat, k, _, event = picked
            clicks = [event]
        elif panel == "leading":  # lambda_0 .. lambda_3, their crossings and repulsions
            h = _with_both(h)
            if h.both:
                _both_leading((h, _other(h)))
            else:
                _leading_panel(h)
            clicks = []
        else:  # P(w) or the spectrum, over training and at the chosen steps
            h = _with_both(h)
            clicks = _weight_panels(h, panel) if not h.both else _both_weight_panels(h, panel)
    for clicked in clicks:  # a click on another head's line opens it
        charts.open_head_on_click(clicked, h.store, stat=stat, k=k, matrix=h.matrix)


def _weight_panels(h: _Head, panel: str) -> list[Any]:
    """P(w) over training | at the chosen steps (``panel`` ``weights``), or the spectrum over training | at the chosen
    steps (``spectrum``): one matrix. Returns the chart's selection (a click on an overlaid head)."""
    left, right = st.columns([5, 6])
    if panel == "weights":
        w_range = density_extent(h.hist, h.mu, h.sigma)  # the w axis of the map and of the slices
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


def _both_weight_panels(h: _Head, panel: str) -> list[Any]:
    """P(w) (``panel`` ``weights``) or the spectrum (``spectrum``) for W_QK and W_OV side by side: the matrix chosen on
    the left, the other on the right; the panels' switches are set once, on the left, and hold for both. Returns the
    charts' selections."""
    pair = (h, _other(h))
    picks: list[Any] = []
    if panel == "weights":
        ranges = [density_extent(x.hist, x.mu, x.sigma) for x in pair]
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


def _both_leading(pair: tuple[_Head, _Head]) -> None:
    """lambda_0 .. lambda_3 and their approaches for both matrices, side by side, the switches made once."""
    leading: tuple | None = None
    for x, col in zip(pair, st.columns(2), strict=True):
        with col:
            leading = _leading_panel(x, controls=leading, narrow=True)


def _statistic_panels(h: _Head) -> tuple[str, int | None, bool, Any] | None:
    """One statistic of the head against its layer, then (stores with both) its W_QK and W_OV on one pair of axes;
    returns `_head_in_layer`'s choice and selection, or None when the store has no values of the statistic."""
    with st.container():
        picked = _head_in_layer(h)
    if picked is None:
        return None
    stat, k, log_y, _ = picked
    _both_matrices(h.frame.run, h.store, h.axis, layer=h.layer, head=h.head, stat=stat, k=k, log_y=log_y)
    return picked


def _pick_head(frame) -> _Head:
    """The widgets above the panels (matrix; layer, head, chosen steps, the loss in one row; other heads), and the
    head's arrays (views of the cached store)."""
    store = frame.store
    axis = frame.axis()
    steps = [int(s) for s in store.steps]
    c_matrix, _ = st.columns([2, 6], vertical_alignment="bottom")
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path), where=c_matrix)
    c_layer, c_head, c_steps, c_loss = st.columns([1, 1, 3, 3], vertical_alignment="bottom")
    layer = widgets.select("layer", "Layer", list(range(store.n_layers)), 0, where=c_layer)
    head = widgets.select("head", "Head", list(range(store.n_heads)), 0, where=c_head)
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None, where=c_loss)  # on every chart over training
    chosen = widgets.multiselect(
        "step",
        "Chosen steps (marked in every panel)",
        steps,
        default_steps(store.steps),
        fmt=lambda s: f"{s:,}",
        where=c_steps,
        max_selections=MAX_CHOSEN_STEPS,
    )
    heads_all = [(lay, hd) for lay in range(store.n_layers) for hd in range(store.n_heads) if (lay, hd) != (layer, head)]
    compared = widgets.multiselect(
        "cmp",
        "Overlay other heads, from any layer (dotted on every panel over training)",
        [f"L{lay}H{hd}" for lay, hd in heads_all],
        [],
        fmt=lambda c: c.replace("H", " H"),
        max_selections=MAX_COMPARED,
        help="In the link as cmp=L2H3 (repeatable)",
    )
    if not chosen:
        st.caption("No step chosen: pick at least one to draw the distribution and spectrum at fixed steps.")
    idx = [steps.index(s) for s in chosen]
    return _Head(
        frame=frame,
        axis=axis,
        matrix=matrix,
        both=False,  # the weight tabs' own switch (`_with_both`)
        layer=layer,
        head=head,
        idx=idx,
        labels=[f"step {s:,}" for s in chosen],
        colours=step_colours(len(chosen)),
        chosen_x=[float(axis.x[i]) for i in idx],
        pairs=[(int(c[1:].split("H")[0]), int(c.split("H")[1])) for c in compared],
        show_loss=show_loss,
        curve=curve,
        **_arrays(store, matrix, layer, head),
    )


def _arrays(store, matrix: str, layer: int, head: int) -> dict[str, Any]:
    """One head's arrays of one matrix (views of the cached store): what `_Head` holds per matrix."""
    sv = store.array("sv", matrix=matrix)[:, layer, head, :].astype(np.float64)  # (S, d_head)
    return dict(
        hist=store.array("hist_z", matrix=matrix)[:, layer, head, :].astype(np.float64),  # (S, 202)
        mu=store.array("mean", matrix=matrix)[:, layer, head],
        sigma=store.array("std", matrix=matrix)[:, layer, head],
        kl=store.array("kl_gauss", matrix=matrix)[:, layer, head],
        lam=sv * sv,
        refs=derived.references(store, matrix=matrix),
    )


def _with_both(h: _Head) -> _Head:
    """The switch of the weight tabs (P(w), spectrum, leading eigenvalues) that draws each of their panels for W_QK and
    W_OV side by side (URL ``both``, on by default; stores with both matrices): ``h`` with its answer. The statistic
    tab draws both matrices on one pair of axes whatever it says, so the switch is not on that tab."""
    both = {"qk", "ov"} <= set(h.store.meta.matrices) and widgets.toggle(
        "both",
        "Both W_QK and W_OV",  # a longer label is cut short at 1,024 px
        True,
        help="Every weight panel twice, side by side: the matrix chosen on the left, the other on the right, one load "
        "(off: the matrix chosen alone, both=0 in the link)",
    )
    return dataclasses.replace(h, both=both)


def _other(h: _Head) -> _Head:
    """The same head and choices for the other matrix, drawn beside the chosen one (``both``)."""
    matrix = "ov" if h.matrix == "qk" else "qk"
    return dataclasses.replace(h, matrix=matrix, key="_other", **_arrays(h.store, matrix, h.layer, h.head))


def _density_map(h: _Head, w_range: tuple[float, float]) -> None:
    """P(w) of the head over (step, w), log colour."""
    st.subheader(f"Weight distribution over training · {h.w_name}" if h.both else "Weight distribution over training")
    w = np.linspace(*w_range, DENSITY_GRID_POINTS)
    grid = density_grid(h.hist, h.mu, h.sigma, w)
    run, store = h.frame.run, h.store
    charts.chart(
        h.over_time(density_figs.density_map(h.axis, w, grid, chosen_x=h.chosen_x, colours=h.colours, matrix_name=h.w_name)),
        f"density_map{h.key}",
        title=h.title("P(w) over training"),
        filename=export.safe_name(run, h.tag, "Pw-map"),
        csv=lambda: _long(run, h.layer, h.head, h.matrix, store.steps, "p(w)", w, grid, "w"),
    )
    st.caption(
        f"p(w) of the d_model² entries of {h.w_name} for {h.name} at every checkpoint (log colour); "
        "rebuilt from the standardized histogram as p_z((w − μ)/σ)/σ. Top ticks: chosen steps."
    )


def _density_slices(h: _Head, w_range: tuple[float, float], *, controls: tuple | None = None) -> tuple[Any, tuple]:
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
    w_all, p_all = density_curves(h.hist, mu, sigma)
    if standardized:  # z = (w - mu)/sigma, p_z = p(w) sigma
        w_all, p_all = head_data.standardized(w_all, p_all, mu, sigma)
        x_range = density_figs.z_range(h.hist)
    else:
        x_range = w_range
    p_range = density_figs.log_density_range(p_all) if log_p else fixed_range(p_all)
    gauss = ([(0.0, 1.0)] * len(idx) if standardized else [(float(mu[i]), float(sigma[i])) for i in idx]) if gauss_on else []
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
            compare=[
                (lay, hd, (store.array("std", matrix=matrix)[:, lay, hd], store.array("kl_gauss", matrix=matrix)[:, lay, hd]))
                for lay, hd in h.pairs
            ],
            matrix_name=h.w_name,
        ),
        f"density_slices{h.key}",
        title=h.title("P(w) at chosen steps, σ, D_KL"),
        filename=export.safe_name(run, h.tag, "Pw-sigma-DKL"),
        csv=lambda: _slices_csv(run, h.layer, h.head, matrix, store.steps, idx, w_all, p_all, standardized, sigma, kl),
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


def _spectrum_map(h: _Head) -> None:
    """lambda_k of the head over (k, step), log colour."""
    st.subheader(f"Spectrum over training · {h.w_name}" if h.both else "Spectrum over training")
    run, store = h.frame.run, h.store
    charts.chart(
        h.over_time(spectrum_figs.spectrum_map(h.axis, h.lam, chosen_x=h.chosen_x, colours=h.colours)),
        f"spectrum_map{h.key}",
        title=h.title("λ_k over training"),
        filename=export.safe_name(run, h.tag, "lambda-map"),
        csv=lambda: _lam_csv(run, h.layer, h.head, h.matrix, store.steps, h.lam, range(len(store.steps))),
    )
    st.caption(f"λ_k = s_k² of {h.w_name} for {h.name}, every singular-value index k at every checkpoint (log colour).")


def _spectrum_slices(h: _Head, *, show_null: bool | None = None) -> tuple[Any, bool]:
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
    null_lam = null_spectra(lam[idx], store) if show_null else None
    picked = charts.chart(
        spectrum_figs.spectrum_slices(
            lam[idx],
            labels=h.labels,
            colours=h.colours,
            axis=h.axis,
            chosen_idx=idx,
            stable_rank=store.array("stable_rank", matrix=matrix)[:, h.layer, h.head],
            entropy=store.array("spectral_entropy", matrix=matrix)[:, h.layer, h.head],
            stats=(STATS["stable_rank"], STATS["spectral_entropy"]),
            lam_range=fixed_range(lam, log=True),
            null_lam=null_lam,
            compare=[
                (
                    lay,
                    hd,
                    (
                        store.array("stable_rank", matrix=matrix)[:, lay, hd],
                        store.array("spectral_entropy", matrix=matrix)[:, lay, hd],
                    ),
                )
                for lay, hd in h.pairs
            ],
        ),
        f"spectrum_slices{h.key}",
        title=h.title("λ_k at chosen steps, stable rank, entropy"),
        filename=export.safe_name(run, h.tag, "spectrum"),
        csv=lambda: _lam_csv(run, h.layer, h.head, matrix, store.steps, lam, idx),
        select=bool(h.pairs),
    )
    st.caption(
        "Left: λ_k versus k at each chosen step (log scale, fixed over the run); dotted: a random "
        "(Gaussian) head rescaled to the same Frobenius norm, the free-product Marchenko-Pastur null. "
        "Right: stable rank Σλ/λ_max and spectral entropy of the same head over training, chosen steps marked."
    )
    return picked, show_null


def _leading_panel(h: _Head, *, controls: tuple | None = None, narrow: bool = False) -> tuple:
    """lambda_0 .. lambda_3 over training (left; ``narrow``: above), each close approach marked a crossing or a
    repulsion when the store has overlaps, with the threshold and the list of approaches (right; ``narrow``: below).
    Returns its switches (``controls``: those of the panel beside it, not made again)."""
    st.subheader(f"Leading eigenvalues · {h.w_name}" if h.both else "Leading eigenvalues: crossings and repulsions")
    left, right = (st.container(), st.container()) if narrow else st.columns([7, 4])
    with right:
        controls, crossings = _approaches(h, controls)
    log_lam = controls[0]
    run, store, lam = h.frame.run, h.store, h.lam
    with left:
        if crossings is None:
            charts.chart(
                h.over_time(
                    spectrum_figs.leading_lambdas(h.axis, lam[:, :4], chosen_x=h.chosen_x, colours=h.colours, log_y=log_lam)
                ),
                f"leading{h.key}",
                title=h.title("λ_0 … λ_3"),
                filename=export.safe_name(run, h.tag, "leading"),
                csv=lambda: _lam_csv(run, h.layer, h.head, h.matrix, store.steps, lam[:, :4], range(len(store.steps))),
            )
            st.caption(f"λ_0 … λ_3, the four largest squared singular values of {h.w_name} for {h.name}, over training.")
        else:
            charts.chart(
                h.over_time(
                    spectrum_figs.level_crossings(h.axis, lam, crossings, chosen_x=h.chosen_x, colours=h.colours, log_y=log_lam)
                ),
                f"leading{h.key}",
                title=h.title("λ_0 … λ_3, crossings and repulsions"),
                filename=export.safe_name(run, h.tag, "crossings"),
                csv=lambda: _lam_csv(run, h.layer, h.head, h.matrix, store.steps, lam[:, :4], range(len(store.steps))),
            )
            st.caption(
                f"Top: λ_0 … λ_3 of {h.w_name} for {h.name} over training; ✕ a crossing, ○ a repulsion, at the "
                "closest approach. Bottom: O_kk, how much level k kept its singular directions from the "
                "previous checkpoint (1: unchanged; a dip to 0 with a rise of O_k,k±1: the levels swapped)."
            )
    return controls


def _approaches(h: _Head, controls: tuple | None = None) -> tuple[tuple, Any]:
    """The log lambda toggle and the close-approach threshold (``controls``, when the panel beside it made them), then
    the approaches as a table; returns the switches and the crossings (None without overlaps, said with how to add)."""
    c_log = c_gap = st  # one control a line: side by side in this narrow panel they cut their labels at 1,024 px
    log_lam = widgets.toggle("loglam", "log λ axis", False, where=c_log) if controls is None else controls[0]
    store = h.store
    try:
        overlaps = derived.head_overlaps(store, h.layer, h.head, matrix=h.matrix)
    except StoreError as exc:
        st.error(str(exc))
        overlaps = None
    crossings = None
    gap_pct = controls[1] if controls is not None else None
    if overlaps is not None:
        gap_pct = widgets.gap_percent(where=c_gap) if gap_pct is None else gap_pct
        crossings = level_crossings(h.lam, overlaps, gap_threshold=gap_pct / 100)
    if crossings is None:
        st.info(
            "This store has no singular-vector overlaps, so approaches cannot be told apart. "
            "Run `python -m headwatch.precompute` on it again to add them (it re-reads the checkpoints).",
            icon=":material/info:",
        )
        return (log_lam, gap_pct), None
    kinds: list[str] = [a.kind for a in crossings.approaches]

    def counted(kind: str) -> str:
        n = kinds.count(kind)
        return f"{n} {kind}{'' if n == 1 else 's'}"

    st.markdown(
        f"**{counted('crossing')}, {counted('repulsion')}**"
        + (f", {kinds.count('unresolved')} unresolved" if "unresolved" in kinds else "")
        + f" among λ_0 … λ_{crossings.kept.shape[1] - 1}"
    )
    st.dataframe(
        approach_table(crossings.approaches, store.steps),
        hide_index=True,
        height=260,
        key=f"approaches{h.key}",
        width="stretch",
        column_config={
            "step": st.column_config.NumberColumn("step", format="%d", width="small"),
            "levels": st.column_config.TextColumn("levels", width="small"),
            "gap of s, %": st.column_config.NumberColumn("gap %", width="small"),
            "verdict": st.column_config.TextColumn("verdict", width="small"),
            "swap score": st.column_config.NumberColumn("swap score", format="%.3f", width="small", help=SWAP_SCORE_HELP),
        },
    )
    st.caption(
        "A close approach is a **crossing** when the two levels' singular vectors swap places between "
        "neighbouring checkpoints (O_i,i+1·O_i+1,i > O_ii·O_i+1,i+1) and a **repulsion** when each keeps "
        "its own; O_ab = |⟨u_a(t), u_b(t+1)⟩|·|⟨v_a(t), v_b(t+1)⟩|. An approach must dip 20% below the "
        f'threshold. **Swap score**: {SWAP_SCORE_HELP} Rule: README, "Crossing or repulsion?"; every '
        "head's approaches: the Heads page."
    )
    return (log_lam, gap_pct), crossings


def _head_in_layer(h: _Head) -> tuple[str, int | None, bool, Any] | None:
    """Any statistic (URL ``stat``, ``k``, ``logy``) of the head against the other heads of its layer, the overlaid
    heads and its random-head band; returns the choice and the chart's selection, or None when the store has no
    values of it (said on the page)."""
    st.subheader("One statistic, head against its layer")
    c_stat, c_k, c_log = st.columns([4, 3, 3], vertical_alignment="bottom")
    store, matrix, layer, head, pairs, run = h.store, h.matrix, h.layer, h.head, h.pairs, h.frame.run
    stat, k, log_y = widgets.statistic(
        store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log, log=("logy", "log y axis"), options=stats_for(store)
    )
    values = derived.stat_values(store, stat, k=k or 0, matrix=matrix)
    if charts.no_values(values, STATS[stat].label, matrix):
        return None
    band = reference_of(h.refs, stat, k)
    event = charts.chart(
        h.over_time(
            head_figs.head_in_layer(
                h.axis,
                values[:, layer, :],
                head=head,
                stat=STATS[stat],
                k=k,
                y_range=fixed_range(panels.with_band(values, band), log=log_y),
                log_y=log_y,
                chosen_x=h.chosen_x,
                colours=h.colours,
                layer=layer,
                compare=[(lay, hd, values[:, lay, hd]) for lay, hd in pairs],
                band=band,
            )
        ),
        "head_in_layer",
        title=f"{run} · {h.shown_for(stat)} · {STATS[stat].short(k)} against its layer",
        filename=export.safe_name(run, h.tag, stat if stat != LAMBDA else f"lambda_{k}", "in-layer"),
        csv=lambda: export.tidy(values, store.steps, run=run, statistic=stat, k=k, matrix=matrix, layers=[layer]).pipe(
            lambda t: t if not pairs else _with_pairs(t, values, store.steps, run, stat, k, matrix, pairs)
        ),
        select=True,
    )
    ref = (
        f" Grey band: 5-95% over random heads of {h.w_name} (Gaussian {REFERENCE_FACTORS[matrix]} of this shape and "
        f"init scale; {band.mean:.3g} on average)."
        if band is not None
        else ""
    )
    st.caption(
        f"{STATS[stat].short(k)} of head {head} (dark) over training, the other heads of layer {layer} "
        "in grey (click one to open it) and the layer mean red dashed"
        f"{', the overlaid heads dotted' if pairs else ''}; y range fixed over all layers and heads.{ref}"
    )
    return stat, k, log_y, event


def _both_matrices(run, store, axis, *, layer: int, head: int, stat: str, k, log_y: bool) -> None:
    """The chosen statistic of this head for W_QK and W_OV over training, shared axes (stores with both)."""
    if not {"qk", "ov"} <= set(store.meta.matrices):
        return
    series = {m: derived.stat_values(store, stat, k=k or 0, matrix=m)[:, layer, head] for m in ("qk", "ov")}
    if np.array_equal(series["qk"], series["ov"], equal_nan=True):  # a forward statistic: one value per head
        return
    st.subheader(f"W_QK and W_OV of L{layer} H{head}")
    both = np.concatenate(list(series.values()))
    charts.chart(
        stacked(
            head_figs.both_matrices(axis, series, stat=STATS[stat], k=k, y_range=fixed_range(both, log=log_y), log_y=log_y),
            right=STACK_RIGHT,
        ),
        "both_matrices",
        title=f"{run} · L{layer} H{head} · {STATS[stat].short(k)} of W_QK and W_OV",
        filename=export.safe_name(run, f"L{layer}H{head}", stat if k is None else f"lambda_{k}", "qk-ov"),
        csv=lambda: pd.concat(
            export.tidy(
                derived.stat_values(store, stat, k=k or 0, matrix=m),
                store.steps,
                run=run,
                statistic=stat,
                k=k,
                matrix=m,
                layers=[layer],
                heads=[head],
            )
            for m in ("qk", "ov")
        ),
    )
    st.caption(
        f"{STATS[stat].short(k)} of head {head} of layer {layer} for both of its matrices over training, on one "
        "pair of axes (the statistic and log y chosen above; y range over both): W_QK (blue), where the head "
        "looks, and W_OV (orange), what it writes."
    )


def _long(run, layer, head, matrix, steps, what, x, grid, x_name) -> pd.DataFrame:
    """A (step, x) grid of one head as tidy rows."""
    s, n = grid.shape
    return pd.DataFrame(
        {
            "run": run,
            "layer": layer,
            "head": head,
            "matrix": matrix,
            "statistic": what,
            "step": np.repeat(np.asarray(steps, dtype=np.int64), n),
            x_name: np.tile(x, s),
            "value": np.asarray(grid, dtype=np.float64).ravel(),
        }
    )


def _lam_csv(run, layer, head, matrix, steps, lam, rows) -> pd.DataFrame:
    """lambda_k of one head at the given checkpoint indices as tidy rows (k, step, value)."""
    rows = list(rows)
    sub = lam[rows]
    n_k = sub.shape[1]
    return pd.DataFrame(
        {
            "run": run,
            "layer": layer,
            "head": head,
            "matrix": matrix,
            "statistic": "lambda",
            "k": np.tile(np.arange(n_k), len(rows)),
            "step": np.repeat(np.asarray(steps, dtype=np.int64)[rows], n_k),
            "value": sub.ravel(),
        }
    )


def _slices_csv(run, layer, head, matrix, steps, idx, x, p, standardized, sigma, kl) -> pd.DataFrame:
    """The density at the chosen steps (x, value) and sigma and D_KL at every step, as tidy rows."""
    parts = [_long(run, layer, head, matrix, np.asarray(steps)[idx], "p(z)" if standardized else "p(w)", None, p[idx], "x")]
    parts[0]["x"] = x[idx].ravel()
    for what, v in (("std", sigma), ("kl_gauss", kl)):
        parts.append(
            pd.DataFrame(
                {
                    "run": run,
                    "layer": layer,
                    "head": head,
                    "matrix": matrix,
                    "statistic": what,
                    "step": np.asarray(steps, dtype=np.int64),
                    "value": np.asarray(v, dtype=np.float64),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def _with_pairs(table, values, steps, run, stat, k, matrix, pairs) -> pd.DataFrame:
    extra = [
        export.tidy(values, steps, run=run, statistic=stat, k=k, matrix=matrix, layers=[lay], heads=[hd]) for lay, hd in pairs
    ]
    return pd.concat([table, *extra], ignore_index=True)


main()
