"""The head explorer's card tab: one card that gathers what the store knows of the head (its types and emergence
steps, its ablation effect, its tokens in context, its refined LLC and flag, its strongest composition partners), the
same card `headwatch report` writes (`analysis.findings.cards`), with its ablation effect and its refined LLC over
training drawn small beside each other; a part the store lacks says which lens adds it."""

from __future__ import annotations

import streamlit as st

from headwatch.analysis.findings.cards import HeadCard, card_markdown, head_card
from headwatch.analysis.store.lenses.llc import llc_data_words
from headwatch.dashboard import charts, derived, export
from headwatch.dashboard.figures.errors import Series, lines_with_errors
from headwatch.dashboard.style import SMALL_HEIGHT
from headwatch.dashboard.views.head.choice import Head

CARD_PANEL = "head_card"  # the card's container key
CARD_COLOURS = {"probe": "#d62728", "text": "#1f77b4", "llc": "#6a3d9a"}


def card_panel(h: Head) -> None:
    """The head's card, in a bordered box, its curves over training under it."""
    store = h.store
    card = head_card(store, h.layer, h.head, flags=derived.llc_flags(store))
    with st.container(key=CARD_PANEL, border=True):
        st.markdown("\n".join(card_markdown(card, run=h.frame.run or "", store_path=str(store.path))))
        _curves(h, card)
    st.caption(
        "Types: those the head holds at the last checkpoint, with the step from which it holds each (docs/head-types.md). "
        "Ablation: the loss increase when its output is ablated, last and largest over training, and over training "
        "below (± 1 standard error over sequences; the tab What this head does lists all 20 tokens in context with the "
        "attention shaded). Refined LLC: its last estimate with the chains' standard deviation and flag, and every "
        "estimate over training below (± the chains' standard deviation; the Refined LLC page). Composition: the heads "
        "it reads from and that read it, by their largest of Q-, K- and V-composition at the last checkpoint with "
        "scores, against random heads of the same shapes (the Circuits page)."
    )


def _curves(h: Head, card: HeadCard) -> None:
    """The card's ablation effect and refined LLC over training, small, side by side (each only when the store has it)."""
    run, name = h.frame.run, card.name
    words = llc_data_words(card.llc_data)  # the distribution of the card's refined LLC ("on held-out text")
    shown = [
        (
            "card_ablation",
            [
                Series("probe loss increase (nats)", CARD_COLOURS["probe"], card.probe.value, card.probe.se),
                Series("text loss increase (nats)", CARD_COLOURS["text"], card.text.value, card.text.se),
            ],
            "Δ loss ablated (nats)",
            f"{name} · loss increase when {card.method}-ablated",
        )
        if card.probe is not None and card.text is not None
        else None,
        (
            "card_llc",
            [Series(f"refined LLC {words} (± chains' s.d.)", CARD_COLOURS["llc"], card.llc.value, card.llc.se)],
            f"refined LLC {words}",
            f"{name} · refined LLC {words}",
        )
        if card.llc is not None
        else None,
    ]
    drawn = [s for s in shown if s is not None]
    if not drawn:
        return
    for where, (key, series, y_title, title) in zip(st.columns(len(drawn)), drawn, strict=True):
        with where:
            charts.chart(
                lines_with_errors(h.axis, series, y_title=y_title, zero_line=key == "card_ablation", height=SMALL_HEIGHT),
                key,
                title=f"{run} · {title}",
                filename=export.safe_name(run, f"L{h.layer}H{h.head}", key),
            )
