"""What happened in a run, as events on one time axis: for the Timeline page, the Overview's card and
``headwatch report``. Pure: reads a `Store`, returns plain records; no streamlit.

Each event is one checkpoint and one link to the view that shows its evidence (`Event.page` and
`Event.query`, the other pages' URL parameters):

- **stage boundary** (stages.parquet, the primary basis of meta.json ``stages``): the Refined LLC page
  (LLC stages) or the Forward lenses page at that step (loss stages);
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
  `analysis.stats.crossings` at `CROSSING_GAP`), the head explorer at that head and step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.store import Store
from analysis.store.format import HEAD_EMERGENCE, HEAD_TYPE_SCORES, HEAD_TYPES, LAYERS, LLC, STAGES
from dashboard.tables import model_approaches

RLLC_RISES = 5  # the largest per-head rises of the refined LLC shown
MP_EXTRA_SPIKES = 2  # spikes above the MP edge beyond the first checkpoint's that make a departure
CROSSING_GAP = 0.1  # the relative gap of singular values below which levels approach (the Heads table's default)
KINDS = ("stage boundary", "head type", "rLLC rise", "MP departure", "level crossing")
TYPE_TEXT = {"previous_token": "previous-token", "induction": "induction", "sink": "sink"}


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

        from dashboard.urlstate import encode

        parts = [("run", run), *self.query]
        return self.page + "?" + "&".join(f"{quote(k)}={quote(encode(v), safe='')}" for k, v in parts)


@dataclass(frozen=True)
class TypeSummary:
    """Per head type: how many heads hold it at the end, the first to emerge, and the best score reached."""

    type: str
    holding: int
    first_step: int | None
    first_head: tuple[int, int] | None
    peak_score: float
    peak_head: tuple[int, int]
    emerged: list[tuple[int, int, int]]  # (layer, head, emergence_step), by step


def type_summaries(store: Store) -> list[TypeSummary] | None:
    """Each head type's summary from head_emergence.parquet (None: the store has no head types)."""
    frame = store.frame(HEAD_EMERGENCE)
    if frame is None:
        return None
    out = []
    for kind in HEAD_TYPES:
        rows = frame[frame["type"] == kind]
        if rows.empty:
            continue
        held = rows[rows["emergence_step"].notna()].sort_values(["emergence_step", "layer", "head"])
        peak = rows.loc[rows["peak_score"].idxmax()]
        first = held.iloc[0] if len(held) else None
        out.append(
            TypeSummary(
                type=kind,
                holding=len(held),
                first_step=None if first is None else int(first["emergence_step"]),
                first_head=None if first is None else (int(first["layer"]), int(first["head"])),
                peak_score=float(peak["peak_score"]),
                peak_head=(int(peak["layer"]), int(peak["head"])),
                emerged=[(int(r.layer), int(r.head), int(r.emergence_step)) for r in held.itertuples(index=False)],
            )
        )
    return out


def _head_query(layer: int, head: int, step: int, **more: object) -> tuple[tuple[str, object], ...]:
    return (("layer", layer), ("head", head), *more.items(), ("step", step))


def head_link(run: str, layer: int, head: int, step: int, **more: object) -> str:
    """A relative link to the head explorer at one head and step (``head?run=...&layer=2&head=3&stat=...&step=64``)."""
    return Event(step, "head type", "", "", "head", _head_query(layer, head, step, **more)).link(run)


def stage_events(store: Store) -> list[Event]:
    frame = store.frame(STAGES)
    primary = (store.meta.stages or {}).get("primary")
    if frame is None or primary is None:
        return []
    rows = frame[frame["basis"] == primary].sort_values("stage")
    out = []
    for r in rows.itertuples(index=False):
        if r.stage == 0:
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
                query=() if primary == "llc" else (("step", int(r.start_step)),),
            )
        )
    return out


def type_events(store: Store) -> list[Event]:
    out = []
    for s in type_summaries(store) or []:
        if s.first_step is None or s.first_head is None:
            continue
        layer, head = s.first_head
        others = f"; {s.holding - 1} more head(s) later" if s.holding > 1 else ""
        out.append(
            Event(
                step=s.first_step,
                kind="head type",
                label=f"first {TYPE_TEXT.get(s.type, s.type)} head: L{layer}H{head}",
                detail=f"holds the type from step {s.first_step:,} to the end{others}",
                page="head",
                query=_head_query(layer, head, s.first_step, stat=HEAD_TYPE_SCORES[s.type]),
            )
        )
    return out


def rllc_rises(store: Store, *, top: int = RLLC_RISES) -> list[Event]:
    """The ``top`` largest rises of a head's refined LLC between consecutive estimates."""
    if not store.has(LLC):
        return []
    llc, std = store.require(LLC, "llc"), store.require(LLC, "llc_std")
    have = np.isfinite(llc).all(axis=(1, 2))
    steps = store.steps[have]
    if len(steps) < 2:
        return []
    values, spread = llc[have], std[have]
    rise = values[1:] - values[:-1]  # (T-1, L, H)
    # a negative estimate is not a learning coefficient (analysis.llc_diagnostics.NEGATIVE_NOTE): no rise from or to one
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
                label=f"L{layer}H{head} refined LLC rises by {rise[t, layer, head]:.3g}",
                detail=f"{values[t, layer, head]:.3g} at step {a:,} → {values[t + 1, layer, head]:.3g} at step {b:,} "
                f"(chains' spread ± {se[t, layer, head]:.2g})",
                page="llc",
                query=(("trace", f"L{layer}H{head}"), ("trace_step", b)),
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
                label=f"first level crossing of {name}: L{layer}H{head} {r['levels']}",
                detail=f"{len(crossings)} crossings in {crossings[['layer', 'head']].drop_duplicates().shape[0]} heads "
                f"over the run (gap below {100 * CROSSING_GAP:g}%)",
                page="head",
                query=_head_query(layer, head, step, stat="stable_rank", matrix=matrix, gap=int(100 * CROSSING_GAP)),
            )
        )
    return out


def run_events(store: Store) -> list[Event]:
    """Every event of the run, by step then kind."""
    events = stage_events(store) + type_events(store) + rllc_rises(store) + mp_departures(store) + crossing_events(store)
    return sorted(events, key=lambda e: (e.step, KINDS.index(e.kind)))


def events_frame(events: list[Event], run: str) -> pd.DataFrame:
    """The events as a table: step, kind, event, detail, link."""
    return pd.DataFrame(
        {
            "step": [e.step for e in events],
            "kind": [e.kind for e in events],
            "event": [e.label for e in events],
            "detail": [e.detail for e in events],
            "link": [e.link(run) for e in events],
        }
    ).astype({"step": "int64"})


def stage_rows(store: Store) -> pd.DataFrame | None:
    """The primary basis's stages (stages.parquet), or None."""
    frame = store.frame(STAGES)
    primary = (store.meta.stages or {}).get("primary")
    if frame is None or primary is None:
        return None
    return frame[frame["basis"] == primary].sort_values("stage").reset_index(drop=True)


def type_sentences(store: Store) -> list[str]:
    """One sentence per head type: who holds it from when, or that no head reaches its threshold."""
    summaries = type_summaries(store)
    if summaries is None:
        return ["This store has no head types (head_emergence.parquet): run the types lens on it."]
    recorded = (store.meta.types or {}).get("types") or {}
    thresholds = {name: r.get("threshold") for name, r in recorded.items() if isinstance(r, dict)}
    out = []
    for s in summaries:
        name = TYPE_TEXT.get(s.type, s.type)
        at = f" (threshold {thresholds[s.type]:.3g})" if isinstance(thresholds.get(s.type), int | float) else ""
        if not s.emerged:
            out.append(
                f"No head reaches the {name} threshold{at}: the highest {name} score is {s.peak_score:.3g} "
                f"(L{s.peak_head[0]}H{s.peak_head[1]})."
            )
            continue
        heads = ", ".join(f"L{layer}H{head} from step {step:,}" for layer, head, step in s.emerged[:12])
        more = f" and {len(s.emerged) - 12} more" if len(s.emerged) > 12 else ""
        out.append(f"{len(s.emerged)} {name} head(s){at}: {heads}{more}.")
    return out
