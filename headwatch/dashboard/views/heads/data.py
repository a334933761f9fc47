"""What the Heads view computes before it draws: the table's rows (their head-type and refined-LLC columns, the
heads picked, their order, each row's link to the head explorer) and the close approaches' links and tally.

Pure (no streamlit). The rows themselves are `dashboard.tables.heads_table`'s; the widgets' values come as one
`Options` record, which `views.heads.page` reads from its widgets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.findings.events import EVIDENCE_PANEL
from headwatch.analysis.findings.held_types import HeadTypes
from headwatch.analysis.store import ForwardInfo
from headwatch.analysis.store.format import HEAD_TYPES
from headwatch.dashboard.data import default_steps, uniform_attention
from headwatch.dashboard.labels import PER_HEAD_STATS

SORTS = ["rank", "value", "change", "over reference", "emerged", "approaches", "crossings", "repulsions", "flag", "layer"]
OPEN_STEPS = 8  # the most steps a row opens the head explorer at


@dataclass(frozen=True)
class Options:
    """The table's widgets: what it shows (``stat``, ``k``, ``step``, ``since``, ``matrix``), which heads
    (``layers``, ``types``), in which order (``sort``, ``desc``) and the close-approach threshold (``gap``, None
    without overlaps). ``kinds``: the store's head types (None without them)."""

    stat: str
    k: int | None
    step: int
    since: int
    matrix: str | None
    layers: list[int]
    picked_types: list[str]
    sort: str
    desc: bool
    gap_pct: int | None
    kinds: HeadTypes | None


def head_link(
    run: str | None, layer: int, head: int, stat: str, k: int | None, steps: list[int], matrix: str | None = None
) -> str:
    """A relative link to the head explorer showing this head, on its tab of the statistic against the layer (opens in
    the same app)."""
    query = [("run", run or ""), ("layer", layer), ("head", head), ("stat", stat)] + ([("k", k)] if k is not None else [])
    query += [("matrix", matrix)] if matrix is not None else []
    query += [("step", s) for s in steps]
    query += [("panel", EVIDENCE_PANEL)]
    return "head?" + "&".join(f"{key}={value}" for key, value in query)


def uniform_baseline(info: ForwardInfo | None, stat: str) -> float | None:
    """What uniform causal attention scores on the forward statistic ``stat`` over the store's evaluation sequences
    (`dashboard.data.uniform_attention`); None for another statistic or a store without forward lenses."""
    if stat not in PER_HEAD_STATS or info is None:
        return None
    return uniform_attention(info.seq_len, info.induction_repeat).get(stat)


def with_llc_columns(table: pd.DataFrame, spread: np.ndarray, flags: np.ndarray | None, *, at: int) -> pd.DataFrame:
    """The refined LLC's table with the ``± chains`` and ``flag`` columns of its estimates at step index ``at``.

    Args:
        table: `dashboard.tables.heads_table` of the refined LLC (layer-major rows, its ``value`` the estimate).
        spread: ``(S, n_layers, n_heads)`` the estimates' standard deviation over the sampler's chains.
        flags: ``(S, n_layers, n_heads)`` every estimate's flag (`analysis.llc_diagnostics.store_flags`' heads), or
            None when the store has no chain diagnostics (``"no diagnostics"``).

    Returns:
        A copy of ``table``: a row without an estimate flagged ``"no estimate"``, a negative one's flag followed by
        ``"; negative"``.
    """
    out = table.copy()
    out["± chains"] = spread[at].ravel()  # (n_layers * n_heads,), layer-major as the rows
    out["flag"] = flags[at].ravel() if flags is not None else "no diagnostics"
    out.loc[out["value"].isna(), "flag"] = "no estimate"
    out.loc[out["value"] < 0, "flag"] = out["flag"] + "; negative"
    return out


def emerged_steps(kinds: HeadTypes, picked: list[str]) -> pd.arrays.IntegerArray:
    """Per head, layer-major, the step from which it holds one of the ``picked`` types (all types when none is
    picked) to the end of training, the earliest among them; missing (``<NA>``) for a head that holds none at the
    end."""
    earliest = kinds.earliest(picked or HEAD_TYPES)  # (heads,), -1: none held at the end
    return pd.arrays.IntegerArray(np.where(earliest >= 0, earliest, 0).astype(np.int64), earliest < 0)


def with_types(table: pd.DataFrame, kinds: HeadTypes, *, at: int, picked: list[str]) -> pd.DataFrame:
    """``table`` (layer-major rows) with the ``type`` (the types each head holds at step index ``at``,
    `analysis.findings.held_types.HeadTypes.held_at`) and ``emerged`` (`emerged_steps` of the picked types) columns."""
    return table.assign(type=kinds.held_at(at), emerged=emerged_steps(kinds, picked))


def shown_rows(table: pd.DataFrame, opts: Options, *, at: int) -> pd.DataFrame:
    """The rows the table shows: with the head types' columns at step index ``at`` when the store has them, only the
    heads of the chosen layers holding one of the picked types (none chosen: all), in the chosen order (then by layer
    and head; missing values last), numbered from 0."""
    if opts.kinds is not None:
        table = with_types(table, opts.kinds, at=at, picked=opts.picked_types)
        if opts.picked_types:
            table = table[table["type"].map(lambda held: bool(set(held.split(", ")) & set(opts.picked_types)))]
    if opts.layers:
        table = table[table["layer"].isin(opts.layers)]
    if opts.sort in table.columns:
        table = table.sort_values(
            [opts.sort, "layer", "head"], ascending=[not opts.desc, True, True], kind="stable", na_position="last"
        )
    return table.reset_index(drop=True)


def open_steps(steps: np.ndarray, step: int) -> list[int]:
    """The steps a row opens the head explorer at: its default steps (`dashboard.data.default_steps`) and ``step``,
    the last `OPEN_STEPS` of them."""
    return sorted(set(default_steps(steps)) | {step})[-OPEN_STEPS:]


def with_links(table: pd.DataFrame, opts: Options, *, run: str | None, steps: list[int]) -> pd.DataFrame:
    """``table`` with its ``open`` column: each row's `head_link`, at ``steps``, with the table's statistic."""
    links = [
        head_link(run, int(r.layer), int(r.head), opts.stat, opts.k, steps, opts.matrix)
        for r in table[["layer", "head"]].itertuples(index=False)
    ]
    return table.assign(open=links)


def with_approach_links(
    approaches: pd.DataFrame, opts: Options, *, run: str | None, steps: list[int], gap_pct: int
) -> pd.DataFrame:
    """The close approaches (`analysis.findings.approaches.model_approaches`' rows) with their ``open`` column: each
    a `head_link` to its head at the first, the closest and the last of ``steps``, with the gap."""
    links = [
        head_link(run, int(r.layer), int(r.head), opts.stat, opts.k, sorted({steps[0], int(r.step), steps[-1]}), opts.matrix)
        + f"&gap={gap_pct}"
        for r in approaches[["layer", "head", "step"]].itertuples(index=False)
    ]
    return approaches.assign(open=links)


def approaches_sentence(approaches: pd.DataFrame, *, n_heads: int, gap_pct: int) -> str:
    """How many approaches there are in how many of the model's ``n_heads`` heads at the gap, and of each verdict
    (markdown)."""
    verdicts = approaches["verdict"].value_counts()
    n_heads_with = approaches[["layer", "head"]].drop_duplicates().shape[0]
    return (
        f"**{len(approaches)} approaches in {n_heads_with} of {n_heads} heads** at "
        f"{gap_pct}%: {int(verdicts.get('crossing', 0))} crossings, {int(verdicts.get('repulsion', 0))} repulsions, "
        f"{int(verdicts.get('unresolved', 0))} unresolved."
    )
