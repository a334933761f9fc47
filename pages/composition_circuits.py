"""Circuits: how heads wire together over training, from the weights (Q-, K- and V-composition between heads)."""

import functools

import numpy as np
import pandas as pd
import streamlit as st

from analysis.store.format import COMPOSITION, COMPOSITION_KINDS, HEAD_TYPES_TABLE
from dashboard import charts, export, viewstate, widgets
from dashboard.figures import circuits as figs

SCALES = {"random": "× random heads", "score": "raw score (0 to 1)"}
TOP = [3, 5, 8]


def main() -> None:
    st.title("Circuits")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    info = store.meta.composition or {}
    steps = [int(s) for s in store.steps_with(COMPOSITION)]
    if not store.has(COMPOSITION) or not steps:
        st.info(
            "This store has no composition scores (composition.parquet). Add them with `python -m precompute --source "
            f"SOURCE --out {store.path} --lenses composition`: every checkpoint already in the store gets its rows "
            "from the weights (docs/precompute.md, 'Composition scores').",
            icon=":material/hub:",
        )
        return
    if store.n_layers < 2:
        st.info("Composition joins heads of different layers; this model has one layer.")
        return
    n_layers, n_heads = store.n_layers, store.n_heads

    # --- widgets ---
    c_kind, c_scale, c_step = st.columns([2, 2, 4], vertical_alignment="bottom")
    kind = widgets.select(
        "kind", "Composition", list(COMPOSITION_KINDS), "k", kind="radio", fmt=figs.KIND_NAMES.__getitem__, where=c_kind
    )
    baseline = (info.get("baseline") or {}).get(kind)
    scale = widgets.select(
        "scale",
        "Scale",
        list(SCALES) if baseline else ["score"],
        "random" if baseline else "score",
        kind="radio",
        fmt=SCALES.__getitem__,
        where=c_scale,
    )
    step = widgets.select(
        "step",
        "Step (the frame shown and linked; Play runs on from it in the browser)",
        steps,
        steps[-1],
        kind="select_slider",
        fmt=lambda s: f"{s:,}",
        where=c_step,
    )
    c_layer, c_head, c_top = st.columns([1, 1, 2])
    layer = widgets.select("layer", "Head: layer", list(range(n_layers)), n_layers - 1, where=c_layer)
    head = widgets.select("head", "Head", list(range(n_heads)), 0, where=c_head)
    top = widgets.select("top", "Strongest partners shown", TOP, 5, kind="radio", where=c_top)

    # --- data ---
    scores = store.require(COMPOSITION, kind)  # (S, L, H, L, H) over store.steps, NaN without a row
    divisor = float(baseline) if scale == "random" and baseline else 1.0
    unit = f"{figs.KIND_NAMES[kind]} / random-heads mean" if divisor != 1.0 else f"{figs.KIND_NAMES[kind]}, 0 to 1"
    unit_short = "× random" if divisor != 1.0 else "score"
    at = [int(np.searchsorted(store.steps, s)) for s in steps]
    matrix = figs.pair_matrix(scores[at]) / divisor  # (S', N targets, N sources)
    paths = _paths(store, steps)
    top_k = info.get("top")

    # --- panel: the composition matrix, animated over training ---
    st.subheader(f"{figs.KIND_NAMES[kind]} between every pair of heads")
    fig = figs.composition_animation(
        matrix,
        steps=steps,
        start=steps.index(step),
        n_heads=n_heads,
        kind=kind,
        unit=unit,
        paths=paths,
        title=f"{frame.run} · {figs.KIND_NAMES[kind]} ({unit_short})",
    )
    event = charts.chart(
        fig,
        "composition",
        title=f"{frame.run} · {figs.KIND_NAMES[kind]} ({unit_short})",
        filename=export.safe_name(frame.run, "composition", kind, scale, "step", step),
        csv=lambda: _pairs_csv(frame.run, scores[at], steps, kind, divisor),
        select=True,
    )
    charts.follow_play("composition", step)
    what = {
        "q": "||W_QK,B^T W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F)",
        "k": "||W_QK,B W_OV,A||_F / (||W_QK,B||_F ||W_OV,A||_F)",
        "v": "||W_OV,B W_OV,A||_F / (||W_OV,B||_F ||W_OV,A||_F)",
    }[kind]
    ratio = (
        f"divided by {baseline:.4g}, the mean score of independent Gaussian heads of this model's shapes (1 = random)"
        if divisor != 1.0
        else "between 0 and 1"
    )
    ring = (
        " Red squares: a source head that holds the previous-token type and a target that holds the induction type at "
        "that step (head_types.parquet), the pair an induction circuit runs through (K-composition)."
        if paths is not None
        else " (With head types in the store, previous-token → induction pairs are ringed.)"
    )
    kept = (
        f" Only pairs whose source is among the {top_k} strongest of its target for q, k or v were stored; the others are blank."
        if top_k
        else ""
    )
    st.caption(
        f"{figs.KIND_NAMES[kind]} ({figs.KIND_READS[kind]}): {what}, {ratio}, from the raw weights (LayerNorm not "
        f"folded). Rows: target head B; columns: source head A in an earlier layer (blank: same or later layer, "
        f"which cannot compose). Step {step:,} is the frame (and the link): Play runs the following checkpoints in the "
        f"browser; Pause moves the step control to the frame shown. Colours fixed over training. Click a cell to open "
        f"its target head B in the head explorer.{ring}{kept}"
    )
    charts.open_head_on_click(event, store)

    # --- panel: one head's strongest sources and targets over training ---
    st.subheader(f"Layer {layer}, head {head}: its strongest partners over training")
    axis = frame.axis()
    own = layer * n_heads + head
    full = figs.pair_matrix(scores) / divisor  # (S, N targets, N sources) over store.steps
    chance = 1.0 if divisor != 1.0 else baseline
    for role, series, note in (
        ("source", full[:, own, :], "heads in earlier layers whose output this head reads"),
        ("target", full[:, :, own], "heads in later layers that read this head's output"),
    ):
        strongest = _strongest(series, top)
        if not strongest:
            where = "it is in the first layer" if role == "source" else "it is in the last layer"
            st.caption(f"Layer {layer}, head {head} has no {role}s: {where}.")
            continue
        partners = [(i // n_heads, i % n_heads) for i in strongest]
        line_fig = figs.partner_lines(
            axis, series[:, strongest], partners, kind=kind, unit=unit_short, role=role, baseline=chance
        )
        event = charts.chart(
            line_fig,
            f"{role}s",
            title=f"{frame.run} · L{layer} H{head} · strongest {role}s · {figs.KIND_NAMES[kind]} ({unit_short})",
            filename=export.safe_name(frame.run, f"L{layer}H{head}", f"{role}s", kind, scale),
            csv=functools.partial(
                _partners_csv, frame.run, store.steps, series[:, strongest], strongest, n_heads, role, kind, layer, head
            ),
            select=True,
        )
        st.caption(
            f"The {len(strongest)} {note}, ranked by their largest {figs.KIND_NAMES[kind]} with layer {layer}, head "
            f"{head} over training ({unit_short}); the dotted line is independent random heads. A click opens that "
            "head in the head explorer."
        )
        charts.open_head_on_click(event, store)


def _strongest(series: np.ndarray, top: int) -> list[int]:
    """Indices of the ``top`` partners with the largest score at any checkpoint (none without scores)."""
    with np.errstate(all="ignore"):
        peak = np.where(np.isfinite(series), series, -np.inf).max(axis=0)
    order = [int(i) for i in np.argsort(-peak, kind="stable") if np.isfinite(peak[i])]
    return order[:top]


def _paths(store, steps: list[int]) -> list[np.ndarray] | None:
    """Per step, ``(P, 2)`` (source, target) layer-major index pairs: a previous-token head in an earlier layer
    and an induction head, both holding their type at that step; None without head types."""
    types = store.frame(HEAD_TYPES_TABLE, columns=["holds"]) if store.has(HEAD_TYPES_TABLE) else None
    if types is None:
        return None
    held = types[types["holds"]]
    out = []
    for step in steps:
        now = held[held["step"] == step]
        prev = now[now["type"] == "previous_token"]
        ind = now[now["type"] == "induction"]
        pairs = [
            (int(pl) * store.n_heads + int(ph), int(il) * store.n_heads + int(ih))
            for pl, ph in zip(prev["layer"], prev["head"], strict=True)
            for il, ih in zip(ind["layer"], ind["head"], strict=True)
            if pl < il
        ]
        out.append(np.array(pairs, dtype=np.int64).reshape(-1, 2))
    return out


def _pairs_csv(run: str, scores: np.ndarray, steps: list[int], kind: str, divisor: float) -> pd.DataFrame:
    """Every stored pair at every shown step as tidy rows."""
    idx = np.argwhere(np.isfinite(scores))
    step_i, la, ha, lb, hb = idx.T
    values = scores[tuple(idx.T)]
    return pd.DataFrame(
        {
            "run": run,
            "composition": kind,
            "step": np.asarray(steps, dtype=np.int64)[step_i],
            "layer_a": la,
            "head_a": ha,
            "layer_b": lb,
            "head_b": hb,
            "score": values,
            "times_random": values / divisor if divisor != 1.0 else np.nan,
        }
    )


def _partners_csv(run, steps, values, partners, n_heads, role, kind, layer, head) -> pd.DataFrame:
    s, p = values.shape
    return pd.DataFrame(
        {
            "run": run,
            "head": f"L{layer} H{head}",
            "composition": kind,
            "role": role,
            "partner_layer": np.tile(np.asarray(partners) // n_heads, s),
            "partner_head": np.tile(np.asarray(partners) % n_heads, s),
            "step": np.repeat(np.asarray(steps, dtype=np.int64), p),
            "value": values.reshape(-1),
        }
    )


main()
