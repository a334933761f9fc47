"""Refined LLC: every head's local learning coefficient over training, the whole model's beside it with the
loss, and the heads clustered by the shape of their curves.

The estimates at the checkpoints that have them, their clusters and the tables the charts export are
`views.llc.data`'s; the chains' diagnostics and loss traces are `views.llc.diagnostics`' panels. This module: the
layout, the widgets as one record, the sampler's settings and the panels of the heads' curves, the whole model and
the clusters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st

from headwatch.analysis.store.lenses.llc import LLC, data_records
from headwatch.analysis.trajectories.maps import NORMALISATIONS, Normalisation
from headwatch.dashboard import charts, derived, export, style, viewstate, widgets
from headwatch.dashboard.data import loss_curve
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import LLC_STAT, STATS
from headwatch.dashboard.settings import DATA_DIR
from headwatch.dashboard.views.llc import data
from headwatch.dashboard.views.llc import figures as figs
from headwatch.dashboard.views.llc.data import Estimates
from headwatch.dashboard.views.llc.diagnostics import diagnostics_panel, traces_panel

NORM_LABELS = {"zscore": "shape (each head's curve standardised)", "global": "level and shape"}
CLUSTERS = list(range(2, 9))
FIRST_PANELS = {  # URL panel: the one shown first (where a Timeline event's evidence link lands)
    "heads": "every head over training",
    "model": "the whole model",
    "traces": "the chains of one estimate",
}


@dataclass(frozen=True)
class _Choices:
    """The page's widgets: how the heads' curves are coloured (``colour``), the clusters' number (``k``) and what
    they are made on (``norm``), the loss overlay (``loss``) and the panel shown first (``panel``: ``heads``, or
    ``traces``, the chains' loss traces of one estimate, where an rLLC rise's evidence link lands); ``curve``: the
    run's loss curve, if any; ``data``: the distribution the SGLD loss was taken on that the page shows."""

    colour_by: str
    k: int
    norm: Normalisation
    show_loss: bool
    curve: tuple[np.ndarray, str] | None
    panel: str = "heads"
    data: str = "text"


def main() -> None:
    st.title("Refined LLC")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    if not frame.store.has(LLC) or not len(frame.store.steps_with(LLC)):
        _missing(frame)
        return
    held = data.distributions(frame.store)

    # --- widgets, and the sampler's settings under them ---
    opts = _choose(frame, held)
    est = data.estimates(frame.store, derived.llc_flags(frame.store, opts.data), opts.data)
    _settings_caption(frame, est, opts.data)

    # --- data: clusters of the heads' curves (k-means on the normalised trajectories) ---
    labels = data.clusters(est.values, k=opts.k, norm=opts.norm)
    cluster_names = data.cluster_names(labels)

    # --- panel: the chains' loss traces of one estimate, first when the link asks (panel=traces) ---
    sampler = (frame.store.meta.llc or {}).get("sampler") or {}
    if opts.panel == "traces":
        traces_panel(frame.run, frame.store, est.steps, sampler, distribution=opts.data)
    if opts.panel == "model":  # an LLC stage boundary's evidence: the whole-model curve the stages are read from
        _model_panel(frame, est, opts.curve)

    # --- panel: every head over training ---
    _heads_panel(frame, est, opts, labels, cluster_names)

    # --- panel: can the estimates be trusted? ---
    diagnostics_panel(frame.run, frame.store, est, sampler, traces=opts.panel != "traces", distribution=opts.data)

    # --- panel: the whole model, with the loss (first when the link asks: panel=model) ---
    if opts.panel != "model":
        _model_panel(frame, est, opts.curve)

    # --- panel: one head under each distribution the store holds, and their ratio ---
    _distributions_panel(frame, held)

    # --- panel: clusters of heads by the shape of their curves ---
    _clusters_panel(frame, est, opts, labels, cluster_names)


def _choose(frame: RunFrame, held: list[str]) -> _Choices:
    """The widgets: the distribution (when the store holds several) on its own; colour, clusters and their
    normalisation in one row; the loss switch on its own."""
    chosen = held[0]
    if len(held) > 1:
        chosen = widgets.select(
            "data",
            "The SGLD loss taken on",
            held,
            held[0],
            kind="radio",
            fmt=data.distribution_label,
            help="Every curve of the page under this distribution; on the run's training distribution the refined LLC is "
            "the weight-refined one, on any other a data-refined one. The panel at the bottom overlays them.",
        )
    c_colour, c_k, c_norm = st.columns([2, 1, 3], vertical_alignment="bottom")
    c_loss, c_panel = st.columns([1, 1])  # on its own row: the label reads whole at 1,024 px
    colour_by = widgets.select("colour", "Colour heads by", ["layer", "cluster"], "layer", kind="radio", where=c_colour)
    k = widgets.select("k", "Clusters", CLUSTERS, 4, where=c_k)
    norm = widgets.select(
        "norm",
        "Cluster on",
        list(NORMALISATIONS),
        "zscore",
        kind="radio",
        fmt=NORM_LABELS.__getitem__,
        where=c_norm,
        help="; ".join(f"{n}: {v}" for n, v in NORMALISATIONS.items()),
    )
    curve = loss_curve(frame.store)
    show_loss = widgets.loss_toggle(curve is not None, where=c_loss)
    panel = widgets.select(
        "panel",
        "First panel",
        list(FIRST_PANELS),
        "heads",
        kind="radio",
        fmt=FIRST_PANELS.__getitem__,
        where=c_panel,
        help="The Timeline's links open on their evidence: an LLC stage boundary on the whole model, an rLLC rise on "
        "the chains of that estimate",
    )
    return _Choices(colour_by=colour_by, k=k, norm=norm, show_loss=show_loss, curve=curve, panel=panel, data=chosen)


def _missing(frame: RunFrame) -> None:
    """A store without refined LLCs: the rerun that adds them, the command that prices it, and on a shipped store
    why it has none."""
    store = frame.store
    path = Path(store.path).resolve()
    shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
    forward = store.meta.forward
    st.info(
        data.missing_note(
            source=store.meta.source[0],
            store=str(shown),
            eval_length=getattr(forward, "seq_len", None),
            shipped=path.is_relative_to(DATA_DIR.resolve()),
        )
    )


def _settings_caption(frame: RunFrame, est: Estimates, shown: str) -> None:
    """The sampler's settings and the distribution the loss was taken on: estimates compare only under the same."""
    info = frame.store.meta.llc or {}
    sampler = info.get("sampler") or {}
    record = data_records(info).get(shown) or {}
    st.caption(
        f"{data.sampler_name(info)} at {len(est.idx)} of the run's {len(frame.store.steps)} checkpoints: "
        f"step size {sampler.get('lr')}, n β {sampler.get('n_beta')}, localization γ {sampler.get('localization')}, "
        f"{sampler.get('chains')} chains × {sampler.get('draws')} draws (burn-in {sampler.get('burnin')}), batches of "
        f"{sampler.get('batch_size')} of {record.get('sequences')} sequences of {record.get('seq_len')} tokens; the loss "
        f"taken on **{shown}** ({record.get('description', '?')}). Estimates compare only under these settings."
    )


def _distributions_panel(frame: RunFrame, held: list[str]) -> None:
    """One head's (or the whole model's) refined LLC under each distribution the store holds, and each one's ratio to
    a chosen one; a store with one distribution says which and the rerun that adds the others."""
    st.subheader("One head under each distribution")
    store = frame.store
    if len(held) < 2:
        path = Path(store.path).resolve()
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        forward = store.meta.forward
        st.info(
            data.only_one_note(held, source=store.meta.source[0], store=str(shown), eval_length=getattr(forward, "seq_len", None))
        )
        return
    c_target, c_ref = st.columns([1, 2], vertical_alignment="bottom")
    target = widgets.select(
        "data_head", "Estimate", data.trace_targets(store.n_layers, store.n_heads), data.WHOLE_MODEL, where=c_target
    )
    reference = widgets.select(
        "data_ref", "Ratio to the estimate on", held, held[0], kind="radio", fmt=data.distribution_label, where=c_ref
    )
    layer, head = data.trace_target(target)
    curves = data.distribution_curves(store, layer=layer, head=head)
    axis = frame.axis()
    charts.chart(
        figs.distribution_curves(axis, curves, target=target),
        "llc_data",
        title=f"{frame.run} · {target} · refined LLC under each distribution",
        filename=export.safe_name(frame.run, target, "llc-by-data"),
        csv=lambda: curves.assign(run=frame.run, layer=layer, head=head),
    )
    ratios = data.distribution_ratios(curves, reference)
    charts.chart(
        figs.distribution_ratios(axis, ratios, target=target, reference=reference),
        "llc_data_ratio",
        title=f"{frame.run} · {target} · refined LLC over its estimate on {reference}",
        filename=export.safe_name(frame.run, target, "llc-ratio", reference),
        csv=lambda: ratios.assign(run=frame.run, layer=layer, head=head, reference=reference),
    )
    st.caption(
        f"The refined LLC of {target} with the SGLD loss taken on each distribution the store holds (error bars the "
        f"spread over chains), and below each one's ratio to the estimate on {reference} at the checkpoints both have "
        "(dotted: equal). The same sampler settings for all; only the sequences differ. A data-refined estimate above "
        "the one on text says the head's weights matter more to the loss on that data (the refined-LLC paper, section "
        "4.2: an induction head's rises on data full of repeats)."
    )


def _heads_panel(frame: RunFrame, est: Estimates, opts: _Choices, labels: np.ndarray, cluster_names: list[str]) -> None:
    """Every head's estimates over training, coloured by layer or cluster; a click opens the head."""
    st.subheader("Every head's refined LLC over training")
    n_layers, n_heads = frame.store.n_layers, frame.store.n_heads
    if opts.colour_by == "layer":
        groups, names, colours = (
            np.repeat(np.arange(n_layers), n_heads),
            [f"L{i}" for i in range(n_layers)],
            style.layer_colours(n_layers),
        )
    else:
        groups, names, colours = labels, cluster_names, _cluster_colours(cluster_names)
    curve = opts.curve
    fig = figs.head_curves(
        frame.axis(),
        est.idx,
        est.values,
        stat=STATS[LLC_STAT],
        groups=groups,
        group_names=names,
        colours=colours,
        stds=est.stds,
        flags=est.flags,
        loss=curve[0] if curve and opts.show_loss else None,
        loss_label=curve[1] if curve else "",
    )
    event = charts.chart(
        fig,
        "llc_heads",
        title=f"{frame.run} · every head · refined LLC",
        filename=export.safe_name(frame.run, "all-heads", "llc"),
        select=True,
        csv=lambda: data.heads_csv(frame.run, est, labels),
    )
    st.caption(
        "One marker per head at each checkpoint with an estimate (thin lines join a head's consecutive "
        "estimates; nothing is drawn at the checkpoints in between), coloured by "
        f"{'layer' if opts.colour_by == 'layer' else 'cluster'}. The refined LLC samples only the head's Q, K, V "
        "rows and output columns; it measures how much the loss rises when those weights wander near the "
        "checkpoint's. A flagged estimate has a larger marker: square negative (no learning coefficient), triangle up "
        "still rising, triangle down still falling, cross diverged, open circle too few draws to judge (the "
        "diagnostics below). Dotted, on the right "
        "(with the loss switch): the loss at every checkpoint. Click a head to open it in the head explorer."
    )
    charts.open_head_on_click(event, frame.store, stat=LLC_STAT)


def _cluster_colours(names: list[str]) -> list[str]:
    return [figs.CLUSTER_COLOURS[c % len(figs.CLUSTER_COLOURS)] for c in range(len(names))]


def _model_panel(frame: RunFrame, est: Estimates, curve: tuple[np.ndarray, str] | None) -> None:
    """The whole model's estimates with their spread, the loss dotted beside them."""
    st.subheader("The whole model's LLC and the loss")
    charts.chart(
        figs.model_llc(
            frame.axis(),
            est.idx,
            est.model,
            est.model_std,
            loss=curve[0] if curve else None,
            loss_label=curve[1] if curve else "",
            flags=est.model_flags,
        ),
        "llc_model",
        title=f"{frame.run} · whole-model LLC and loss",
        filename=export.safe_name(frame.run, "model", "llc"),
        csv=lambda: data.model_csv(frame.run, est),
    )
    st.caption(
        "The LLC with every parameter sampled, error bars the spread over chains; dotted, the loss "
        f"({curve[1] if curve else 'none recorded'}) at every checkpoint."
    )


def _clusters_panel(frame: RunFrame, est: Estimates, opts: _Choices, labels: np.ndarray, cluster_names: list[str]) -> None:
    """The heads' clusters as a layer x head grid, with their sizes."""
    st.subheader("Heads clustered by their refined-LLC curves")
    n_layers, n_heads = frame.store.n_layers, frame.store.n_heads
    charts.chart(
        figs.cluster_grid(labels, n_layers=n_layers, n_heads=n_heads, names=cluster_names),
        "llc_clusters",
        title=f"{frame.run} · {len(cluster_names)} clusters of refined-LLC curves ({opts.norm})",
        filename=export.safe_name(frame.run, "llc-clusters", opts.k, opts.norm),
        csv=lambda: data.clusters_csv(frame.run, labels, n_layers=n_layers, n_heads=n_heads),
    )
    sizes = data.cluster_sizes(labels, cluster_names)
    st.caption(
        f"Euclidean k-means (best of 10 seeded starts) of each head's curve over the {len(est.idx)} estimated "
        f"checkpoints, normalised {NORMALISATIONS[opts.norm]}, as the refined-LLC paper clusters heads; {sizes}. "
        "Colour the curves above by cluster to compare their shapes."
    )
