"""What the Heads view computes before it draws: the table's rows (every head's value, change, rank and value against
its reference, `heads_table`; their head-type and refined-LLC columns, the heads picked, their order, each row's link
to the head explorer), what the "÷" column divides by (`reference_note`), the table as its CSV holds it, and the close
approaches' counts per head, links and tally.

Pure (no streamlit); the widgets' values come as one `Options` record, which `views.heads.page` reads from its
widgets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.findings.ablation import AblationEffect
from headwatch.analysis.findings.events import EVIDENCE_PANEL
from headwatch.analysis.findings.held_types import HeadTypes
from headwatch.analysis.rmt.references import REFERENCE_DRAWS, SCALED, Reference
from headwatch.analysis.store import ForwardInfo
from headwatch.analysis.store.lenses.types import HEAD_TYPES
from headwatch.dashboard.data import default_steps, uniform_attention
from headwatch.dashboard.labels import FORWARD_STATS, LAMBDA, LLC_STAT, PER_HEAD_STATS
from headwatch.dashboard.tables import REFERENCE_FACTORS

SORTS = [
    "rank",
    "value",
    "change",
    "over reference",
    "emerged",
    "probe ablation",
    "text ablation",
    "approaches",
    "crossings",
    "repulsions",
    "flag",
    "layer",
]
DOES_PANEL = "does"  # the head explorer's tab of what a head does (its URL ``panel``)
# The ablation columns (`with_ablation`): column -> ablation.parquet's measure
ABLATION_COLUMNS = {"probe ablation": "probe_increase", "text ablation": "text_increase"}
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
    run: str | None,
    layer: int,
    head: int,
    stat: str,
    k: int | None,
    steps: list[int],
    matrix: str | None = None,
    panel: str = EVIDENCE_PANEL,
) -> str:
    """A relative link to the head explorer showing this head, on its tab of the statistic against the layer, or on
    ``panel`` (opens in the same app)."""
    query = [("run", run or ""), ("layer", layer), ("head", head), ("stat", stat)] + ([("k", k)] if k is not None else [])
    query += [("matrix", matrix)] if matrix is not None else []
    query += [("step", s) for s in steps]
    query += [("panel", panel)]
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
        flags: ``(S, n_layers, n_heads)`` every estimate's flag (`analysis.llc.diagnostics.store_flags`' heads), or
            None when the store has no chain diagnostics (``"no diagnostics"``).

    Returns:
        A copy of ``table``: a row without an estimate flagged ``"no estimate"``, a negative one ``"negative"`` (its
        flag under the rule, `analysis.llc.diagnostics.flag`; so also in a store without chain diagnostics, as the
        sign needs no chains), never ``"converged"``.
    """
    out = table.copy()
    out["± chains"] = spread[at].ravel()  # (n_layers * n_heads,), layer-major as the rows
    out["flag"] = flags[at].ravel() if flags is not None else "no diagnostics"
    out.loc[out["value"].isna(), "flag"] = "no estimate"
    out.loc[out["value"] < 0, "flag"] = "negative"
    return out


def with_ablation(table: pd.DataFrame, effect: AblationEffect, *, at: int) -> pd.DataFrame:
    """``table`` (layer-major rows, one per head) with each head's ablation effect at step index ``at``: the loss
    increase on the probe's second copy and on the text when the head is ablated (``probe ablation``, ``text
    ablation``, nats) and their standard errors over sequences (``± probe``, ``± text``), after its ``rank`` (so
    that they show without scrolling); NaN at a step without ablations."""
    out = table.copy()
    where = list(out.columns).index("rank") + 1 if "rank" in out.columns else len(out.columns)
    for column, measure in ABLATION_COLUMNS.items():
        out.insert(where, column, np.asarray(effect.value[measure][at], dtype=np.float64).ravel())  # (n_layers * n_heads,)
        out.insert(where + 1, f"± {column.split()[0]}", np.asarray(effect.se[measure][at], dtype=np.float64).ravel())
        where += 2
    return out


def with_llc_data_columns(table: pd.DataFrame, by_data: dict[str, np.ndarray], *, at: int) -> pd.DataFrame:
    """The refined LLC's table with one column per other distribution its loss was taken on (``on repeats``, ...):
    each head's estimate under it at step index ``at`` (``by_data``: name -> ``(S, n_layers, n_heads)``, NaN where
    that distribution has no estimate)."""
    return table.assign(**{f"on {name}": values[at].ravel() for name, values in by_data.items()})


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


def open_panel(opts: Options) -> str:
    """The head explorer's tab a row opens: what the head does when the table is sorted by an ablation column, else
    the statistic against its layer."""
    return DOES_PANEL if opts.sort in ABLATION_COLUMNS else EVIDENCE_PANEL


def with_links(table: pd.DataFrame, opts: Options, *, run: str | None, steps: list[int]) -> pd.DataFrame:
    """``table`` with its ``open`` column: each row's `head_link`, at ``steps``, with the table's statistic, on the tab
    `open_panel` names."""
    links = [
        head_link(run, int(r.layer), int(r.head), opts.stat, opts.k, steps, opts.matrix, open_panel(opts))
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


def reference_note(
    stat: str,
    reference: Reference | None,
    *,
    matrix: str | None,
    d_model: int,
    d_head: int,
    has_step0: bool,
    uniform: float | None = None,
) -> str:
    """What the Heads table's "÷" column divides by, or why it has none, in one or two sentences.

    Args:
        stat: the statistic (a store column name, or ``lambda``).
        reference: its Gaussian-factor reference for ``matrix`` (`reference_of`), or None.
        matrix: ``qk`` or ``ov``; None for a per-head statistic (forward lenses, refined LLC).
        d_model, d_head: the run's shape.
        has_step0: whether the run has step 0 (the init scale of statistics with units is read there).
        uniform: for a forward statistic, what uniform causal attention scores (`dashboard.data.uniform_attention`).
    """
    if stat in FORWARD_STATS:
        if uniform is None:
            return "Forward statistics have no random-head reference (they measure the heads on text)."
        return (
            f"Forward statistics have no random-head reference (they measure the heads on text); "
            f'"÷ uniform" divides by what uniform causal attention on the same sequences scores: {uniform:.4g}.'
        )
    if stat == LLC_STAT:
        return "The refined LLC has no random-head reference (it measures the loss landscape, not the weights alone)."
    factors = REFERENCE_FACTORS.get(matrix or "qk", "the two factors")
    if reference is not None:
        return (
            f"Random heads (Gaussian {factors} of this run's d_model {d_model}, d_head {d_head} and the init "
            f"scale of its step-0 heads; {REFERENCE_DRAWS} seeded draws): mean {reference.mean:.4g}, 5-95% band "
            f"[{reference.lo:.4g}, {reference.hi:.4g}]."
        )
    if (stat in SCALED or stat == LAMBDA) and not has_step0:
        return (
            f"No random-head reference: this statistic has units, and the run has no step 0 to read the init "
            f"scale of {factors} from."
        )
    return "This statistic has no random-head reference (none is computed for it)."


def approach_counts(approaches: pd.DataFrame | None, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """``(n_layers, n_heads)`` counts of approaches, crossings and repulsions per head (rows of
    `analysis.findings.approaches.model_approaches`)."""
    out = {name: np.zeros((n_layers, n_heads), dtype=np.int64) for name in ("approaches", "crossings", "repulsions")}
    if approaches is None:
        return out
    for layer, head, kind in approaches[["layer", "head", "verdict"]].itertuples(index=False):
        out["approaches"][layer, head] += 1
        if kind == "crossing":
            out["crossings"][layer, head] += 1
        elif kind == "repulsion":
            out["repulsions"][layer, head] += 1
    return out


def heads_table(
    values: np.ndarray,
    *,
    at: int,
    since: int,
    reference: Reference | None,
    counts: dict[str, np.ndarray] | None,
    matrix: str | None = "qk",
    baseline: float | None = None,
) -> pd.DataFrame:
    """One row per head: its value at checkpoint index ``at``, the change since index ``since``, rank, vs reference.

    Args:
        values: ``(S, n_layers, n_heads)`` the statistic.
        at, since: checkpoint indices into ``values``.
        reference: the Gaussian-factor reference of the statistic, or None.
        counts: `approach_counts`, or None (no overlaps, or a statistic that is not of a matrix: the columns
            are left out).
        matrix: the matrix kind of the rows; None for a per-head statistic (no ``matrix`` column).
        baseline: without a reference, a value to divide by instead (uniform attention's, for a forward
            statistic); no band column then.

    Columns: layer, head, matrix, value, change, rank (1 = largest value; ties share the lowest rank),
    over reference (value / the reference mean, or / ``baseline``), in 5-95% band, and the approach counts.
    """
    _, n_layers, n_heads = values.shape
    v = np.asarray(values[at], dtype=np.float64).ravel()
    table = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(n_layers), n_heads),
            "head": np.tile(np.arange(n_heads), n_layers),
            **({"matrix": matrix} if matrix is not None else {}),
            "value": v,
            "change": v - np.asarray(values[since], dtype=np.float64).ravel(),
            "rank": pd.Series(-v).rank(method="min", na_option="bottom").astype("int64").to_numpy(),
        }
    )
    if reference is not None and np.isfinite(reference.mean):
        table["over reference"] = v / reference.mean if reference.mean != 0 else np.nan
        table["in 5-95% band"] = (v >= reference.lo) & (v <= reference.hi)
    elif baseline is not None and np.isfinite(baseline) and baseline != 0:
        table["over reference"] = v / baseline
    if counts is not None:
        for name, c in counts.items():
            table[name] = c.ravel()
    return table


def screen_table(table: pd.DataFrame, config: dict, *, run: str, stat: str, k, matrix, step: int, since: int) -> pd.DataFrame:
    """The table as the CSV holds it: every column named as the screen names it (``r_s``, ``÷ random head``), the link
    column left out, then what the rows are of (run, statistic, its k only for λ_k, matrix, step, since)."""
    out = table.drop(columns=["open"]).rename(
        columns={c: cfg["label"] for c, cfg in config.items() if c in table.columns and cfg.get("label")}
    )
    what = {"run": run, "statistic": stat, **({"k": k} if k is not None else {}), "matrix": matrix or "", "step": step}
    return out.assign(**what, since=since)
