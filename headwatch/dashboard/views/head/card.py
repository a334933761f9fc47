"""The head explorer's card tab: one card that gathers what the store knows of the head (its types and emergence
steps, its ablation effect, its tokens in context, its refined LLC and flag, its strongest composition partners), the
same card `headwatch report` writes (`analysis.findings.cards`); a part the store lacks says which lens adds it."""

from __future__ import annotations

import streamlit as st

from headwatch.analysis.findings.cards import card_markdown, head_card
from headwatch.dashboard import derived
from headwatch.dashboard.views.head.choice import Head

CARD_PANEL = "head_card"  # the card's container key


def card_panel(h: Head) -> None:
    """The head's card, in a bordered box."""
    store = h.store
    card = head_card(store, h.layer, h.head, flags=derived.llc_flags(store))
    with st.container(key=CARD_PANEL, border=True):
        st.markdown("\n".join(card_markdown(card, run=h.frame.run or "", store_path=str(store.path))))
    st.caption(
        "Types: those the head holds at the last checkpoint, with the step from which it holds each (docs/head-types.md). "
        "Ablation: the loss increase when its output is ablated, last and largest over training (the tab What this head "
        "does draws it over training and lists all 20 tokens in context). Refined LLC: its last estimate, the chains' "
        "standard deviation and the chains' flag (the Refined LLC page). Composition: the heads it reads from and that "
        "read it, by their largest of Q-, K- and V-composition at the last checkpoint with scores, against random heads "
        "of the same shapes (the Circuits page)."
    )
