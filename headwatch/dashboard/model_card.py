"""The model card in the sidebar: architecture, checkpoints, duplicates, the loss curve's data."""

from __future__ import annotations

import numpy as np

from headwatch.analysis.findings.events import Event, basis_text, key_events
from headwatch.analysis.stages.run import NO_EVENTS
from headwatch.analysis.store import Meta, Store
from headwatch.families.registry import folded_note


def model_card_lines(meta: Meta) -> list[str]:
    """Markdown lines describing a run from its ``meta.json``: model, shape, checkpoints, flagged duplicates.

    Needs only the metadata, so the overview can describe every run without reading its table.
    """
    m = meta.model
    kv = m.n_kv_heads
    kv_text = f" ({kv} key/value heads)" if kv and kv != m.n_heads else ""
    steps = meta.done_steps
    lines = [
        f"**{m.id or '?'}** · {m.family}",
        f"{m.n_layers} layers × {m.n_heads} heads{kv_text} · d_model {m.d_model} · d_head {m.d_head}",
    ]
    if folded := folded_note(m.family):  # what W_QK / W_OV mean for it (docs/design-notes.md section 3)
        lines.append(f"weights as stored, except: {folded}")
    if len(steps):
        lines.append(f"{len(steps)} checkpoints with statistics, steps {steps[0]:,}–{steps[-1]:,}")
    else:
        lines.append("no checkpoints with statistics yet")
    dups = meta.duplicates
    if dups:
        shown = ", ".join(f"{d} = {o}" for d, o in dups[:4]) + (" ..." if len(dups) > 4 else "")
        lines.append(
            f":orange[**{len(dups)} duplicate checkpoint{'s' if len(dups) > 1 else ''}**] "
            f"(same weights as an earlier step; flagged, never plotted): step {shown}"
        )
    for c in meta.mixed:
        files = ", ".join(f"{s.file} = step {s.step:,}'s {s.other_file}" for s in c.shared_files[:2])
        more = " ..." if len(c.shared_files) > 2 else ""
        lines.append(
            f":orange[**step {c.step:,} mixes weights of two revisions**] ({files}{more}): "
            "not a training state, left out of the plots unless shown"
        )
    failed = meta.failed
    if failed:
        lines.append(f":red[{len(failed)} checkpoint(s) failed in precompute]")
    return lines


def loss_series(store: Store) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, train loss, validation loss) from ``meta.training.losses``; NaN where missing; None if absent."""
    losses = store.meta.training_losses
    if not losses:
        return None
    rows = sorted(losses, key=lambda r: r["step"])

    def col(name: str) -> np.ndarray:
        return np.array([np.nan if r.get(name) is None else float(r[name]) for r in rows], dtype=np.float64)

    return np.array([r["step"] for r in rows], dtype=np.float64), col("train_loss"), col("val_loss")


def timeline_card_lines(stages, events: list[Event], *, basis: str | None) -> list[str]:
    """Markdown lines for the Overview card's compact timeline: the stages in one line, then the key events
    (stage boundaries aside, which the stages line names).

    Args:
        stages: the shaded basis's rows of stages.parquet (`analysis.findings.events.stage_rows`), or None.
        events: `analysis.findings.events.run_events`; the first of each kind are the key events
            (`analysis.findings.events.key_events`).
        basis: ``run``, ``llc`` or ``loss`` (which curve the stages come from), or None.
    """
    if stages is None or not len(stages):
        lines = ["no developmental stages stored (`python -m headwatch.precompute.lenses.stages STORE`)"]
    else:
        curve = basis_text(basis) if basis else "no curve"
        if basis == "run":  # the run's stages say what forms in them, not a trend of one curve
            parts = [
                f"S{int(r.stage) + 1} {int(r.start_step):,}–{int(r.end_step):,}"
                + (f" ({r.boundary})" if r.stage > 0 and r.boundary not in NO_EVENTS else "")
                for r in stages.itertuples(index=False)
            ]
        else:
            parts = [
                f"S{int(r.stage) + 1} {int(r.start_step):,}–{int(r.end_step):,} {r.trend}" for r in stages.itertuples(index=False)
            ]
        lines = [f"**Stages** ({curve}): " + " · ".join(parts)]
    firsts = key_events(events)
    if firsts:
        lines.append("**Key events**: " + " · ".join(f"step {e.step:,}: {e.label}" for e in firsts))
    return lines
