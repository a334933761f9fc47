"""One card per head: what the product knows of it, gathered from every lens the store has (the head explorer's card
tab and ``headwatch report``'s head cards).

A card holds the types the head holds at the end of training and when it became each (head_emergence.parquet), its
ablation effect over training (ablation.parquet: the loss increase on the text and on the probe's second copy, with
their standard errors), its tokens in context at the last checkpoint that has them (head_contexts.parquet), its
refined LLC over training with the last estimate's flag (llc.parquet, `analysis.llc.diagnostics`), and its strongest
composition partners at the last checkpoint with composition scores (composition.parquet): the heads it reads from
and the heads that read it, each score against random heads' (meta.json ``composition`` baseline). A part the store
lacks is None, and the card says which lens adds it.

`card_heads` picks the heads a report gives cards: every head that holds a type at the end, then the heads whose
ablation costs the probe most and the text most at the last checkpoint with ablations, each with why it was picked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headwatch.analysis.findings.ablation import ablation_effect, context_steps, head_contexts, second_copy_share
from headwatch.analysis.findings.held_types import TYPE_LABELS, head_types
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.composition import COMPOSITION, COMPOSITION_KINDS
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, default_llc_data, llc_data_words
from headwatch.analysis.store.lenses.types import HEAD_TYPES

CARD_CONTEXTS = 5  # the tokens in context a card lists (the head explorer's panel shows all 20)
CARD_PARTNERS = 3  # the strongest partners a card names on each side
CARD_BY_COST = 2  # heads a report adds for their ablation cost, on the probe and on the text each
CATCH_ALL_TYPES = ("other",)  # a type that names what no other type does earns no card alone (its card lists it)


@dataclass(frozen=True)
class Series:
    """A value over training with its standard error (NaN where missing), on ``steps``."""

    steps: np.ndarray
    value: np.ndarray
    se: np.ndarray

    def last(self) -> tuple[int, float, float] | None:
        """The last step with a finite value, the value and its error; None without one."""
        ok = np.flatnonzero(np.isfinite(self.value))
        if not len(ok):
            return None
        i = int(ok[-1])
        return int(self.steps[i]), float(self.value[i]), float(self.se[i])

    def peak(self) -> tuple[int, float] | None:
        """The step of the largest finite value and the value; None without one."""
        if not np.isfinite(self.value).any():
            return None
        i = int(np.nanargmax(self.value))
        return int(self.steps[i]), float(self.value[i])


@dataclass(frozen=True)
class Partner:
    """A composition partner: the other head, which composition (q, k or v), the score and the score over random
    heads' (None without a recorded baseline), at ``step``."""

    layer: int
    head: int
    kind: str
    score: float
    ratio: float | None
    step: int

    @property
    def name(self) -> str:
        return head_name(self.layer, self.head)


@dataclass(frozen=True)
class HeadCard:
    """What the store knows of one head (None: the store lacks the lens that says it).

    Attributes:
        layer, head: the head.
        types: type -> its emergence step, for each type it holds at the last checkpoint (empty: none; None: no
            head types in the store).
        probe, text: its ablation's loss increase over training on the probe's second copy and on the text (nats).
        method: how it was ablated (``mean``, ``zero``).
        contexts: its tokens in context at ``contexts_step`` (head_contexts.parquet rows by rank).
        llc: its refined LLC over training (``se``: the chains' standard deviation) under ``llc_data``, the
            distribution readers show by default (`analysis.store.lenses.llc.default_llc_data`: the training
            distribution where held, else held-out text); llc_flag: the last estimate's flag (``""`` without chain
            diagnostics).
        reads_from, read_by: its strongest sources (earlier heads whose output it reads) and targets (later heads
            that read its output), strongest first.
        why: why a report gives it a card (`card_heads`); empty on the head explorer.
    """

    layer: int
    head: int
    types: dict[str, int] | None
    probe: Series | None
    text: Series | None
    method: str
    contexts: pd.DataFrame | None
    contexts_step: int | None
    llc: Series | None
    llc_flag: str
    reads_from: list[Partner] | None
    read_by: list[Partner] | None
    why: tuple[str, ...] = field(default=())
    llc_data: str = ""

    @property
    def name(self) -> str:
        return head_name(self.layer, self.head)


def _types(store: Store, layer: int, head: int) -> dict[str, int] | None:
    kinds = head_types(store)
    if kinds is None:
        return None
    return {t: int(kinds.emergence[t][layer, head]) for t in HEAD_TYPES if kinds.emergence[t][layer, head] >= 0}


def _llc(
    store: Store, layer: int, head: int, flags: tuple[np.ndarray, np.ndarray] | None, data: str
) -> tuple[Series | None, str]:
    if not store.has(LLC):
        return None, ""
    at = {LLC_DATA_COLUMN: data}
    value = store.require(LLC, "llc", at=at)[:, layer, head]
    spread = store.require(LLC, "llc_std", at=at)[:, layer, head]
    series = Series(np.asarray(store.steps), value, spread)
    last = np.flatnonzero(np.isfinite(value))
    flag = str(flags[0][int(last[-1]), layer, head]) if flags is not None and len(last) else ""
    return series, flag


def partners(store: Store, layer: int, head: int, *, top: int = CARD_PARTNERS) -> tuple[list[Partner], list[Partner]] | None:
    """The head's strongest composition partners at the last checkpoint with composition scores: the ``top`` sources
    it reads from and the ``top`` targets that read it, each pair scored by its largest of q, k and v composition
    (the kind named), strongest first; None without composition.parquet or rows."""
    if not store.has(COMPOSITION):
        return None
    with_rows = store.steps_with(COMPOSITION)
    if not len(with_rows):
        return None
    step = int(with_rows[-1])
    t = int(np.searchsorted(store.steps, step))
    baseline = (store.meta.composition or {}).get("baseline") or {}
    scores = np.stack([store.require(COMPOSITION, kind)[t] for kind in COMPOSITION_KINDS])  # (3, L_a, H_a, L_b, H_b)

    def ranked(block: np.ndarray) -> list[Partner]:  # block: (3, L, H) scores of the partners, NaN where none
        with np.errstate(all="ignore"):
            best = np.where(np.isfinite(block), block, -np.inf).max(axis=0)  # (L, H)
        kind = np.where(np.isfinite(block), block, -np.inf).argmax(axis=0)  # (L, H)
        order = [int(i) for i in np.argsort(-best.ravel(), kind="stable") if np.isfinite(best.ravel()[i])][:top]
        out = []
        for i in order:
            a, b = divmod(i, block.shape[2])
            name = COMPOSITION_KINDS[int(kind[a, b])]
            score = float(block[int(kind[a, b]), a, b])
            base = baseline.get(name)
            out.append(Partner(a, b, name, score, score / float(base) if base else None, step))
        return out

    return ranked(scores[:, :, :, layer, head]), ranked(scores[:, layer, head, :, :])


def head_card(store: Store, layer: int, head: int, *, why: tuple[str, ...] = (), flags=None) -> HeadCard:
    """The card of head (``layer``, ``head``) of ``store``.

    Args:
        flags: the store's refined-LLC flags (`analysis.llc.diagnostics.store_flags`), when the caller has them cached.

    Raises:
        ValueError: a head the model does not have.
    """
    if not (0 <= layer < store.n_layers and 0 <= head < store.n_heads):
        raise ValueError(f"head L{layer} H{head}: the model has layers 0..{store.n_layers - 1} and heads 0..{store.n_heads - 1}")
    effect = ablation_effect(store)
    probe = text = None
    method = ""
    if effect is not None:
        steps = effect.steps
        probe = Series(steps, effect.value["probe_increase"][:, layer, head], effect.se["probe_increase"][:, layer, head])
        text = Series(steps, effect.value["text_increase"][:, layer, head], effect.se["text_increase"][:, layer, head])
        method = effect.method
    at = context_steps(store)
    contexts = head_contexts(store, layer, head, at[-1]) if at else None
    data = default_llc_data(store.read(LLC, columns=[])) if store.has(LLC) else ""
    if flags is None and store.has(LLC):
        from headwatch.analysis.llc.diagnostics import store_flags

        flags = store_flags(store, data=data)
    llc, flag = _llc(store, layer, head, flags, data)
    found = partners(store, layer, head)
    return HeadCard(
        layer=layer,
        head=head,
        types=_types(store, layer, head),
        probe=probe,
        text=text,
        method=method,
        contexts=contexts,
        contexts_step=at[-1] if at else None,
        llc=llc,
        llc_flag=flag,
        reads_from=None if found is None else found[0],
        read_by=None if found is None else found[1],
        why=why,
        llc_data=data,
    )


def card_heads(store: Store, *, by_cost: int = CARD_BY_COST) -> list[tuple[int, int, tuple[str, ...]]]:
    """The heads a report gives cards, layer-major, each with why: every head that holds a type at the last checkpoint
    (``holds induction``; a catch-all type, `CATCH_ALL_TYPES`, earns none alone), and the ``by_cost`` heads whose
    ablation raises the probe's loss most and the ``by_cost`` raising the text's most at the last step with ablations
    (``costs the probe most (1st)``)."""
    why: dict[tuple[int, int], list[str]] = {}
    kinds = head_types(store)
    if kinds is not None:
        for t in (t for t in HEAD_TYPES if t not in CATCH_ALL_TYPES):
            for layer, head in zip(*np.nonzero(kinds.emergence[t] >= 0), strict=True):
                why.setdefault((int(layer), int(head)), []).append(f"holds {TYPE_LABELS.get(t, t)}")
    effect = ablation_effect(store)
    at = effect.last_index() if effect is not None else None
    if effect is not None and at is not None:
        for measure, what in (("probe_increase", "the probe"), ("text_increase", "the text")):
            values = effect.value[measure][at].ravel()  # (n_layers * n_heads,), layer-major
            order = [int(i) for i in np.argsort(-np.where(np.isfinite(values), values, -np.inf), kind="stable")]
            for rank, i in enumerate(order[:by_cost]):
                if not np.isfinite(values[i]):
                    continue
                layer, head = divmod(i, store.n_heads)
                why.setdefault((layer, head), []).append(
                    f"its ablation costs {what} most ({_ordinal(rank + 1)}: {values[i]:+.3g} nats at step "
                    f"{int(effect.steps[at]):,})"
                )
    return [(layer, head, tuple(reasons)) for (layer, head), reasons in sorted(why.items())]


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def window_text(tokens, *, target_marks: tuple[str, str] = ("[", "]"), most: int = 48) -> str:
    """A context's window as one line of text, the target (its last token) between ``target_marks``, newlines shown
    as ``⏎``, at most ``most`` tokens before the target (an ellipsis when cut)."""
    tokens = [str(t) for t in tokens]
    if not tokens:
        return ""
    before = tokens[:-1]
    cut = len(before) > most
    shown = ("…" if cut else "") + "".join(before[-most:] if cut else before)
    open_, close = target_marks
    return (shown + open_ + tokens[-1] + close).replace("\n", "⏎")


def card_markdown(card: HeadCard, *, run: str, store_path: str) -> list[str]:
    """The card as Markdown lines (a ``###`` heading, then one bullet per part; the parts a store lacks say which
    lens adds them). The ablation figure is the report's to add."""
    lines = [f"### {card.name}", ""]
    if card.why:
        lines += [f"Why a card: {'; '.join(card.why)}.", ""]
    if card.types is None:
        lines.append(f"- **Types**: no head types in this store (`python -m headwatch.precompute.lenses.types {store_path}`).")
    elif not card.types:
        lines.append("- **Types**: holds no type at the last checkpoint.")
    else:
        held = ", ".join(f"{TYPE_LABELS.get(t, t)} from step {s:,}" for t, s in card.types.items())
        lines.append(f"- **Types** (held at the last checkpoint, emergence step): {held}.")
    if card.probe is None or card.text is None:
        lines.append(
            "- **Ablation**: no ablations in this store (`python -m headwatch.precompute --source SOURCE --out "
            f"{store_path} --lenses ablation`, on the run's checkpoints)."
        )
    else:
        parts = []
        for what, series in (("probe (second copy)", card.probe), ("text", card.text)):
            last, peak = series.last(), series.peak()
            if last is None or peak is None:
                parts.append(f"{what}: no value")
                continue
            parts.append(
                f"{what} {last[1]:+.3g} ± {last[2]:.2g} nats at step {last[0]:,} (largest {peak[1]:+.3g} at step {peak[0]:,})"
            )
        lines.append(f"- **Ablation** ({card.method} ablation, loss increase ± 1 s.e. over sequences): " + "; ".join(parts) + ".")
    if card.contexts is None:
        lines.append("- **Tokens in context**: none in this store (head_contexts.parquet, the ablation lens).")
    elif not len(card.contexts):
        lines.append(f"- **Tokens in context**: none for this head at step {card.contexts_step:,}.")
    else:
        share = second_copy_share(card.contexts)
        lines.append(
            f"- **Tokens in context** at step {card.contexts_step:,} (the target bracketed; loss increase when ablated): "
            f"{len(card.contexts)} kept, {share:.0%} of them second-copy tokens of the probe."
        )
        for r in card.contexts.head(CARD_CONTEXTS).itertuples(index=False):
            lines.append(f"  {int(r.rank)}. `{window_text(r.tokens, most=32)}` {r.loss_increase:+.3g} nats ({r.set})")
    if card.llc is None:
        lines.append("- **Refined LLC**: none in this store (`--lenses llc`).")
    else:
        last = card.llc.last()
        lines.append(
            f"- **Refined LLC {llc_data_words(card.llc_data)}**: no estimate."
            if last is None
            else f"- **Refined LLC {llc_data_words(card.llc_data)}**: {last[1]:.3g} ± {last[2]:.2g} (chains' s.d.) at step "
            f"{last[0]:,}" + (f", flag: {card.llc_flag}." if card.llc_flag else ".")
        )
    if card.reads_from is None or card.read_by is None:
        lines.append("- **Composition**: no composition scores in this store (`--lenses composition`).")
    else:

        def named(found: list[Partner], none: str) -> str:
            return (
                ", ".join(
                    f"{p.name} ({p.kind.upper()} {p.score:.3g}" + (f", {p.ratio:.1f}× random" if p.ratio else "") + ")"
                    for p in found
                )
                or none
            )

        found = [*card.reads_from, *card.read_by]
        at = f" at step {found[0].step:,}" if found else ""
        lines.append(
            f"- **Composition**{at}: reads from {named(card.reads_from, 'no earlier head')}; read by "
            f"{named(card.read_by, 'no later head')} (each pair's "
            "largest of Q-, K- and V-composition)."
        )
    return [*lines, ""]
