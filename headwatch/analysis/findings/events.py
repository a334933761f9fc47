"""What happened in a run, as events on one time axis, and its stages as the views read them: for the Timeline
page, the Overview's card and ``headwatch report``. Pure: reads a `Store`, returns plain records.

Each event is one checkpoint and one link to the view that shows its evidence (`Event.page` and
`Event.query`, the other pages' URL parameters):

- **stage boundary** (stages.parquet, the primary basis of meta.json ``stages``): the run's boundaries (basis
  ``run``: named by what forms, with the curves that support them) or, in stores made before them, the LLC's or
  the loss's; the Forward lenses page on its losses tab, that step marked (``panel=losses``; the Refined LLC
  page's whole-model LLC for LLC stages);
- **head type**: each type's first emergence (head_emergence.parquet: the earliest ``emergence_step``
  over heads), the head explorer at that head and step;
- **rLLC rise**: the `RLLC_RISES` largest rises of a head's refined LLC between consecutive estimates
  (llc.parquet; none from or to a negative estimate, which measures SGLD's descent, not a learning
  coefficient), the Refined LLC page's loss traces of that head at that step;
- **MP departure**: per kind of weight (layers.parquet ``role``), the first checkpoint at which a layer
  has at least `MP_EXTRA_SPIKES` more singular values above the Marchenko-Pastur upper edge
  (``mp_spikes``) than at the first checkpoint (one more is within the edge's finite-size
  fluctuation: the shipped runs have one at initialisation), the Weight matrices page there;
- **level crossing**: per per-head matrix, the first crossing of lambda_0..lambda_3 (overlaps.parquet,
  `analysis.findings.approaches` at `CROSSING_GAP`), the head explorer at that head and step.

The stages (`stage_rows`) are stages.parquet's rows of one basis (``run``, ``llc``, ``loss``, ...), by default the primary one
that meta.json ``stages`` names (the basis the views shade and the events' stage boundaries come from).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headwatch.analysis.findings.approaches import model_approaches
from headwatch.analysis.findings.held_types import CONTEXT_STEP, TYPE_LABELS, type_summaries
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.stages.run import curve_label
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.layers import LAYERS
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, llc_data_order
from headwatch.analysis.store.lenses.stages import STAGE_BASES, STAGES
from headwatch.analysis.store.lenses.types import FUNCTION_TYPES, HEAD_TYPE_SCORES

RLLC_RISES = 5  # the largest per-head rises of the refined LLC shown
MP_EXTRA_SPIKES = 2  # spikes above the MP edge beyond the first checkpoint's that make a departure
CROSSING_GAP = 0.1  # the relative gap of singular values below which levels approach (the Heads table's default)
EVIDENCE_PANEL = "statistic"  # the head explorer's tab of one statistic against its layer (URL ``panel``)
KINDS = ("stage boundary", "head type", "rLLC rise", "MP departure", "level crossing")


@dataclass(frozen=True)
class Event:
    """One event: a checkpoint, what happened there, and the view that shows it.

    Attributes:
        step: the checkpoint.
        kind: one of `KINDS`.
        label: what happened, one line.
        detail: the numbers behind it.
        page: the url_path of the view (``head``, ``llc``, ``weights``, ``lenses``).
        query: that view's URL parameters (``run`` is added by `link`).
    """

    step: int
    kind: str
    label: str
    detail: str
    page: str
    query: tuple[tuple[str, object], ...] = field(default_factory=tuple)

    def link(self, run: str) -> str:
        """A relative link to the view (``head?run=...&layer=2&head=3&step=64``)."""
        from urllib.parse import quote

        parts = [("run", run), *self.query]
        return self.page + "?" + "&".join(f"{quote(k)}={quote(url_value(v), safe='')}" for k, v in parts)


def url_value(value: object) -> str:
    """One URL parameter's value as the views read it (`dashboard.urlstate.encode`): ``True`` -> ``"1"``,
    ``3`` -> ``"3"``, ``"std"`` -> ``"std"``."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _head_query(layer: int, head: int, step: int, **more: object) -> tuple[tuple[str, object], ...]:
    return (("layer", layer), ("head", head), *more.items(), ("step", step))


def head_link(run: str, layer: int, head: int, step: int, **more: object) -> str:
    """A relative link to the head explorer at one head and step (``head?run=...&layer=2&head=3&stat=...&step=64``)."""
    return Event(step, "head type", "", "", "head", _head_query(layer, head, step, **more)).link(run)


def evidence_link(run: str, layer: int, head: int, step: int, head_type: str) -> str:
    """The head explorer on one head at ``step`` with ``head_type``'s score in its statistic tab (``panel=statistic``):
    the evidence that the head holds the type from there."""
    return head_link(run, layer, head, step, **evidence_query(head_type))


def evidence_query(head_type: str) -> dict[str, object]:
    """The head explorer's parameters that show why a head holds ``head_type``: an attention type's score in its
    statistic tab; for a multigram or other head (decided by its ablation and tokens in context) the head itself."""
    score = HEAD_TYPE_SCORES.get(head_type)
    return {"stat": score, "panel": EVIDENCE_PANEL} if score is not None else {}


def stage_events(store: Store) -> list[Event]:
    """Each boundary between the primary basis's stages (the first stage's start is none). A boundary of the run
    (basis ``run``) is labelled by what forms in the stage it opens, with the curves' boundaries that support it."""
    primary = primary_basis(store)
    rows = stage_rows(store)
    if rows is None:
        return []
    out = []
    for r in rows.itertuples(index=False):
        if r.stage == 0:
            continue
        if primary == "run":
            out.append(
                Event(
                    step=int(r.start_step),
                    kind="stage boundary",
                    label=f"stage {r.stage + 1} begins: {r.boundary}",
                    detail=f"supported by {r.support}",
                    page="lenses",
                    query=_losses_query(int(r.start_step)),
                )
            )
            continue
        curve = "LLC" if primary == "llc" else "loss"
        out.append(
            Event(
                step=int(r.start_step),
                kind="stage boundary",
                label=f"{r.boundary}: stage {r.stage + 1} ({curve} {r.trend}) begins",
                detail=f"{curve} {r.start_value:.4g} → {r.end_value:.4g} over the stage "
                f"(change {r.change:+.3g} ± {r.change_se:.2g})",
                page="llc" if primary == "llc" else "lenses",
                query=(("panel", "model"),) if primary == "llc" else _losses_query(int(r.start_step)),
            )
        )
    return out


def _losses_query(step: int) -> tuple[tuple[str, object], ...]:
    """The Forward lenses page on its losses tab and ``step`` marked on them (``panel=losses``): a boundary of the
    run is read from curves, and the evidence is those curves at its step."""
    return (("panel", "losses"), ("step", step))


def type_events(store: Store) -> list[Event]:
    """Each head type's first emergence: every head that emerges at the type's earliest step (heads that form at one
    checkpoint are first together), the evidence link on the first of them."""
    out = []
    for s in type_summaries(store) or []:
        if s.first_step is None or s.first_head is None:
            continue
        first = [(layer, head) for layer, head, step in s.emerged if step == s.first_step]
        later = [step for _, _, step in s.emerged if step > s.first_step]
        name = TYPE_LABELS.get(s.type, s.type)
        heads = ", ".join(head_name(layer, head) for layer, head in first)
        label = f"first {name} head{'s' if len(first) > 1 else ''}: {heads}"
        together = f"{len(first)} heads hold" if len(first) > 1 else "holds"
        when = f"at step {min(later):,}" if later and min(later) == max(later) else f"by step {max(later, default=0):,}"
        more = f"; {len(later)} more head{'s' if len(later) > 1 else ''} {when}" if later else ""
        # multigram and other are decided only at the checkpoints with tokens in context
        context = f" ({CONTEXT_STEP} {'they hold' if len(first) > 1 else 'it holds'} it)" if s.type in FUNCTION_TYPES else ""
        layer, head = first[0]
        out.append(
            Event(
                step=s.first_step,
                kind="head type",
                label=label,
                detail=f"{together} the type from step {s.first_step:,}{context} to the end{more}",
                page="head",
                query=_head_query(layer, head, s.first_step, **evidence_query(s.type)),
            )
        )
    return out


def rllc_rises(store: Store, *, top: int = RLLC_RISES) -> list[Event]:
    """The ``top`` largest rises of a head's refined LLC between consecutive estimates, under each distribution the
    store's estimates were taken on (`analysis.store.lenses.llc.llc_data_order`), each event naming its own."""
    if not store.has(LLC):
        return []
    out = []
    held = llc_data_order(store.read(LLC, columns=[]))
    for data in held:
        out += _rllc_rises(store, data, top=top, in_link=len(held) > 1)
    return out


def _rllc_rises(store: Store, data: str, *, top: int, in_link: bool) -> list[Event]:
    """`rllc_rises` under the distribution ``data`` (``in_link``: the Refined LLC page's link names it, as the page
    offers a choice only where the store holds several)."""
    at = {LLC_DATA_COLUMN: data}
    llc, std = store.require(LLC, "llc", at=at), store.require(LLC, "llc_std", at=at)
    have = np.isfinite(llc).all(axis=(1, 2))
    steps = store.steps[have]
    if len(steps) < 2:
        return []
    values, spread = llc[have], std[have]
    rise = values[1:] - values[:-1]  # (T-1, L, H)
    # a negative estimate is not a learning coefficient (analysis.llc.diagnostics.NEGATIVE_NOTE): no rise from or to one
    rise = np.where((values[1:] < 0) | (values[:-1] < 0), -np.inf, rise)
    se = np.sqrt(spread[1:] ** 2 + spread[:-1] ** 2)
    order = np.argsort(rise, axis=None)[::-1][:top]
    out = []
    for flat in order:
        t, layer, head = np.unravel_index(flat, rise.shape)
        if not rise[t, layer, head] > 0:
            break
        a, b = int(steps[t]), int(steps[t + 1])
        out.append(
            Event(
                step=b,
                kind="rLLC rise",
                label=f"{head_name(layer, head)} refined LLC on {data} rises by {rise[t, layer, head]:.3g}",
                detail=f"{values[t, layer, head]:.3g} at step {a:,} → {values[t + 1, layer, head]:.3g} at step {b:,} "
                f"(chains' spread ± {se[t, layer, head]:.2g}; the SGLD loss taken on {data})",
                page="llc",
                query=(("trace", f"L{layer}H{head}"), ("trace_step", b), ("panel", "traces"))
                + ((("data", data),) if in_link else ()),
            )
        )
    return out


def mp_departures(store: Store) -> list[Event]:
    """Per kind of weight, the first checkpoint with `MP_EXTRA_SPIKES` more spikes in a layer than at the first."""
    frame = store.frame(LAYERS, columns=["mp_spikes", "mp_kl"])
    if frame is None or frame.empty:
        return []
    out = []
    for role, rows in frame.groupby("role", sort=False):
        first = int(rows["step"].min())
        base = rows[rows["step"] == first].set_index("layer")["mp_spikes"]
        extra = rows["mp_spikes"].to_numpy() - base.reindex(rows["layer"]).to_numpy()
        hit = rows[extra >= MP_EXTRA_SPIKES].sort_values(["step", "layer"])
        if hit.empty:
            continue
        r = hit.iloc[0]
        step, layer = int(r["step"]), int(r["layer"])
        out.append(
            Event(
                step=step,
                kind="MP departure",
                label=f"{role} leaves its Marchenko-Pastur law (layer {layer})",
                detail=f"{int(r['mp_spikes'])} singular values above the law's upper edge (step {first:,}: "
                f"{int(base.get(layer, 0))}); D_KL from the law {r['mp_kl']:.3g}",
                page="weights",
                query=(("role", role), ("layer", layer), ("step", step)),
            )
        )
    return out


def crossing_events(store: Store) -> list[Event]:
    """Per per-head matrix, the first level crossing of lambda_0..lambda_3."""
    out: list[Event] = []
    for matrix in store.meta.matrices:
        approaches = model_approaches(store, CROSSING_GAP, matrix=matrix)
        if approaches is None:
            return out
        crossings = approaches[approaches["verdict"] == "crossing"].sort_values(["step", "layer", "head"])
        if crossings.empty:
            continue
        r = crossings.iloc[0]
        step, layer, head = int(r["step"]), int(r["layer"]), int(r["head"])
        name = "W_QK" if matrix == "qk" else "W_OV"
        out.append(
            Event(
                step=step,
                kind="level crossing",
                label=f"first level crossing of {name}: {head_name(layer, head)} {r['levels']}",
                detail=f"{len(crossings)} crossings in {crossings[['layer', 'head']].drop_duplicates().shape[0]} heads "
                f"over the run (gap below {100 * CROSSING_GAP:g}%)",
                page="head",
                query=_head_query(
                    layer, head, step, stat="stable_rank", matrix=matrix, gap=int(100 * CROSSING_GAP), panel="leading"
                ),
            )
        )
    return out


def run_events(store: Store) -> list[Event]:
    """Every event of the run, by step then kind."""
    events = stage_events(store) + type_events(store) + rllc_rises(store) + mp_departures(store) + crossing_events(store)
    return sorted(events, key=lambda e: (e.step, KINDS.index(e.kind)))


def key_events(events: list[Event]) -> list[Event]:
    """The first event of each kind other than stage boundaries (which the stages name), in the order their kinds
    first occur in ``events`` (the Overview card's key events)."""
    firsts: dict[str, Event] = {}
    for e in events:
        if e.kind != "stage boundary":
            firsts.setdefault(e.kind, e)
    return list(firsts.values())


def events_frame(events: list[Event], run: str) -> pd.DataFrame:
    """The events as a table: step, kind, event, link, detail (the link before the long detail, so a table that
    cuts its columns shows it)."""
    return pd.DataFrame(
        {
            "step": [e.step for e in events],
            "kind": [e.kind for e in events],
            "event": [e.label for e in events],
            "link": [e.link(run) for e in events],
            "detail": [e.detail for e in events],
        }
    ).astype({"step": "int64"})


def basis_text(basis: str) -> str:
    """How the views and the report name a basis of stages.parquet (``run``: every curve's boundaries merged)."""
    return {"run": "every curve, merged", "llc": "whole-model LLC"}.get(basis, curve_label(basis))


def primary_basis(store: Store) -> str | None:
    """The basis the store's stages are shaded from by default (meta.json ``stages.primary``: ``run``, or in stores
    made before the run's merged boundaries ``llc`` or ``loss``), or None."""
    return (store.meta.stages or {}).get("primary")


def stage_bases(store: Store) -> list[str]:
    """The bases stages.parquet holds stages of, in `STAGE_BASES` order (any other after, sorted); empty without
    the table."""
    frame = store.frame(STAGES)
    if frame is None:
        return []
    have = set(frame["basis"])
    return [b for b in STAGE_BASES if b in have] + sorted(have - set(STAGE_BASES))


def stage_rows(store: Store, *, basis: str | None = None) -> pd.DataFrame | None:
    """The stages of one basis (stages.parquet), by stage.

    Args:
        store: the opened store.
        basis: a basis of `STAGE_BASES`; None: the primary one (`primary_basis`).

    Returns:
        Its rows of stages.parquet in stage order (an empty frame for a basis without stages); None when the store
        has no stages or, asked for the primary basis, names none.
    """
    frame = store.frame(STAGES)
    basis = basis or primary_basis(store)
    if frame is None or basis is None:
        return None
    return frame[frame["basis"] == basis].sort_values("stage").reset_index(drop=True)


_LLC_NOTES = ("negative whole-model", "left out diverged whole-model", "the whole-model llc")  # notes on the LLC's stages
_LISTED_STEPS = re.compile(r"\bsteps \[([0-9, ]*)\]")


def stage_notes(store: Store, basis: str | None) -> list[str]:
    """The notes meta.json ``stages`` records, as a reader of ``basis``'s stages needs them: a note on the LLC's
    stages only where the LLC's are shaded, step lists written out (``steps [0]`` -> ``step 0``)."""
    out = []
    for note in (store.meta.stages or {}).get("notes", []):
        if basis != "llc" and note.lower().startswith(_LLC_NOTES):
            continue
        out.append(_LISTED_STEPS.sub(_steps_text, note))
    return out


def _steps_text(match: re.Match[str]) -> str:
    steps = [int(s) for s in match.group(1).replace(" ", "").split(",") if s]
    return ("step " if len(steps) == 1 else "steps ") + ", ".join(f"{s:,}" for s in steps)


STAGE_COLUMNS = {  # stages.parquet's columns as the stages table names them ({curve}: the basis's curve and unit)
    "stage": "stage",
    "start_step": "from step",
    "end_step": "to step",
    "trend": "trend",
    "boundary": "begins at",
    "start_value": "{curve} at start",
    "end_value": "{curve} at end",
    "end_minus_start": "end − start",
    "change": "fitted change",
    "change_se": "± (1 s.e.)",
    "loss_change": "loss change (nats/token)",
    "support": "supported by (curve: boundary, step)",
    "low_step": "boundary could sit from step",
    "high_step": "boundary could sit to step",
}


def stage_curve(store: Store, basis: str) -> str:
    """The curve whose values a basis's stages report, named with its unit: the run's stages (``run``) take the
    curve meta.json ``stages.run.trend_from`` names (the LLC, or the loss in a run without an LLC)."""
    if basis == "run":
        basis = ((store.meta.stages or {}).get("run") or {}).get("trend_from") or "llc"
    units = {"llc": "whole-model LLC", "loss": "loss (nats/token)", "copy_loss": "copy loss (nats/token)"}
    return units.get(basis, curve_label(basis))


def stages_table(rows: pd.DataFrame, curve: str) -> pd.DataFrame:
    """One basis's stages (`stage_rows`) as the Timeline shows them: numbered from 1, the curve's value at each end
    (``curve``: its name, `stage_curve`), the change from start to end beside the fitted change (the sum of the
    fitted straight stretches, which the stage rule reads), the curves' boundaries that support the stage's, every
    column named in words."""
    table = rows.assign(stage=rows["stage"] + 1, end_minus_start=rows["end_value"] - rows["start_value"])
    table = table[[c for c in STAGE_COLUMNS if c in table.columns]]
    return table.rename(columns={c: name.format(curve=curve) for c, name in STAGE_COLUMNS.items()})
