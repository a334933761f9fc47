"""The head explorer's leading-eigenvalue panel (tab ``leading``): lambda_0 .. lambda_3 over training, each close
approach marked a crossing or a repulsion when the store has overlaps, with the threshold and the list of approaches;
for one matrix or for W_QK and W_OV side by side.

The approaches are classified in `views.head.data.crossings`; the figures are `views.head.figures.spectrum`'s.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.dashboard import charts, derived, export, widgets
from headwatch.dashboard.data import approach_table
from headwatch.dashboard.tables import SWAP_SCORE_HELP
from headwatch.dashboard.views.head import data
from headwatch.dashboard.views.head.choice import Head, other
from headwatch.dashboard.views.head.figures import spectrum as spectrum_figs


def both_leading(h: Head) -> None:
    """lambda_0 .. lambda_3 and their approaches for both matrices (``h``'s and the other), side by side, the switches
    made once."""
    leading: tuple | None = None
    for x, col in zip((h, other(h)), st.columns(2), strict=True):
        with col:
            leading = leading_panel(x, controls=leading, narrow=True)


def leading_panel(h: Head, *, controls: tuple | None = None, narrow: bool = False) -> tuple:
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
                csv=lambda: data.lam_table(lam[:, :4], range(len(store.steps)), steps=store.steps, **h.who),
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
                csv=lambda: data.lam_table(lam[:, :4], range(len(store.steps)), steps=store.steps, **h.who),
            )
            st.caption(
                f"Top: λ_0 … λ_3 of {h.w_name} for {h.name} over training; ✕ a crossing, ○ a repulsion, at the "
                "closest approach. Bottom: O_kk, how much level k kept its singular directions from the "
                "previous checkpoint (1: unchanged; a dip to 0 with a rise of O_k,k±1: the levels swapped)."
            )
    return controls


def _approaches(h: Head, controls: tuple | None = None) -> tuple[tuple, Any]:
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
        crossings = data.crossings(h.lam, overlaps, gap_pct=gap_pct)
    if crossings is None:
        st.info(
            "This store has no singular-vector overlaps, so approaches cannot be told apart. "
            "Run `python -m headwatch.precompute` on it again to add them (it re-reads the checkpoints).",
            icon=":material/info:",
        )
        return (log_lam, gap_pct), None
    counts = data.approach_counts(crossings)

    def counted(kind: str) -> str:
        n = counts[kind]
        return f"{n} {kind}{'' if n == 1 else 's'}"

    st.markdown(
        f"**{counted('crossing')}, {counted('repulsion')}**"
        + (f", {counts['unresolved']} unresolved" if counts["unresolved"] else "")
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
