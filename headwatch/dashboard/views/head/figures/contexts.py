"""The head explorer's tokens in context drawn as text, as the refined-LLC study's Figure 4 draws them: each context's
window one line, every token shaded by the head's attention to it from the query that predicts the target, the target
boxed, the loss increase beside it.

This is HTML, not a Plotly figure (a context is text); `contexts_html` returns the markup the panel hands to
``st.html``, escaped, with no script.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd

ATTENTION_RGB = (230, 85, 13)  # the shade of attention: orange, its opacity the weight over the window's largest
TARGET_BORDER = "#1f4e9c"
MOST_TOKENS = 48  # window tokens drawn before the target (the rest cut, an ellipsis shown)


def token_text(token: str) -> str:
    """A token as drawn: newlines as ``⏎``, tabs as ``⇥``, a token of spaces alone as ``·`` per space (visible)."""
    text = str(token).replace("\n", "⏎").replace("\t", "⇥")
    return "·" * len(text) if text and not text.strip(" ") else text


def shades(attention: Sequence[float] | np.ndarray) -> np.ndarray:
    """Each token's shade in [0, 1]: its attention over the window's largest (0 everywhere when all are 0)."""
    a = np.clip(np.asarray(attention, dtype=np.float64), 0.0, None)
    top = float(a.max()) if a.size else 0.0
    return a / top if top > 0 else np.zeros_like(a)


def context_line(tokens: Sequence[str], attention: Sequence[float], *, most: int = MOST_TOKENS) -> str:
    """One context's window as HTML spans: each token before the target shaded by `shades` (its weight in the hover
    title), the target (the last token) boxed; at most ``most`` tokens before it."""
    tokens = [str(t) for t in tokens]
    if not tokens:
        return ""
    weights = np.asarray(attention, dtype=np.float64) if len(attention) == len(tokens) else np.zeros(len(tokens))
    shade = shades(weights)
    first = max(0, len(tokens) - 1 - most)
    r, g, b = ATTENTION_RGB
    parts = ["<span style='color:#888'>…</span>"] if first > 0 else []
    for i in range(first, len(tokens) - 1):
        parts.append(
            f"<span title='attention {weights[i]:.3f}' style='background:rgba({r},{g},{b},{shade[i]:.3f})'>"
            f"{html.escape(token_text(tokens[i]))}</span>"
        )
    parts.append(
        f"<span title='target' style='border:2px solid {TARGET_BORDER};border-radius:3px;padding:0 2px;font-weight:600'>"
        f"{html.escape(token_text(tokens[-1]))}</span>"
    )
    return "".join(parts)


def contexts_html(rows: pd.DataFrame) -> str:
    """Every context of ``rows`` (head_contexts.parquet rows, by rank) as a table: rank, loss increase (nats), where
    the target is (text, or the probe's first or second copy), and the window with the attention shaded."""
    body = []
    for r in rows.itertuples(index=False):
        where = "probe, 2nd copy" if bool(r.second_copy) else ("probe" if r.set == "probe" else "text")
        body.append(
            "<tr>"
            f"<td style='text-align:right;color:#666'>{int(r.rank)}</td>"
            f"<td style='text-align:right;font-variant-numeric:tabular-nums'>{float(r.loss_increase):+.3f}</td>"
            f"<td style='color:#666;white-space:nowrap'>{html.escape(where)} · seq {int(r.sequence)} · pos {int(r.position)}</td>"
            f"<td style='font-family:monospace;white-space:pre-wrap;word-break:break-all'>"
            f"{context_line(list(r.tokens), list(r.attention))}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>#</th><th title='nats'>Δ loss</th><th>where</th>"
        "<th style='text-align:left'>context (shade: the head's attention from the query; box: the target)</th></tr>"
    )
    return (
        "<table class='head-contexts' style='border-collapse:collapse;font-size:13px;line-height:1.7'>"
        f"<thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"
    )
