"""``headwatch report STORE --out DIR``: what happened in a run, as a Markdown file with SVG figures beside it.

The Timeline page's content for a paper's appendix: the run's summary, its developmental stages
(stages.parquet, docs/stages.md), its in-context-learning scores (icl.parquet), its head types with their emergence
steps, one card per head that holds a type or whose ablation costs most (`analysis.findings.cards`), and every event
(`analysis.findings.events`) with the dashboard view that shows its evidence. Figures are drawn with
matplotlib (a precompute dependency; Plotly's static export would need kaleido and Chrome) to
``timeline.svg`` (the loss with the stages shaded and the events marked) and, when the store has a
refined LLC, ``llc.svg`` (the whole-model LLC with the chains' standard errors), ``icl.svg`` (the ICL scores) and
``card_L<l>H<h>.svg`` (a carded head's ablation effect over training). Works offline.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from headwatch.analysis.findings.events import KINDS, basis_text, events_frame, primary_basis, run_events, stage_bases, stage_rows
from headwatch.analysis.findings.headline import headline_markdown
from headwatch.analysis.findings.held_types import TYPE_LABELS, type_sentences
from headwatch.analysis.findings.names import head_name
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.store.lenses.attention import EVAL_LOSS
from headwatch.analysis.store.lenses.llc import (
    LLC,
    LLC_DATA_COLUMN,
    LLC_WHOLE_MODEL,
    default_llc_data,
    llc_data_order,
    llc_data_words,
)
from headwatch.analysis.store.lenses.stages import STAGES
from headwatch.analysis.store.lenses.types import FUNCTION_TYPES, HEAD_EMERGENCE
from headwatch.analysis.store.outputs import check_files_folder

REPORT_FILE = "report.md"
TIMELINE_SVG = "timeline.svg"
LLC_SVG = "llc.svg"
ICL_SVG = "icl.svg"
# matplotlib colours of the stage shading and of the event kinds (the dashboard's, as hex).
STAGE_COLOURS = {
    "rising": "#e6550d",
    "falling": "#1f77b4",
    "flat": "#999999",
    "drop": "#2ca02c",
    "plateau": "#999999",
    "rise": "#d62728",
}
EVENT_COLOURS = {
    "stage boundary": "#444444",
    "head type": "#2ca02c",
    "rLLC rise": "#e6550d",
    "MP departure": "#9467bd",
    "level crossing": "#1f77b4",
}
EVENT_MARKERS = {"stage boundary": "|", "head type": "*", "rLLC rise": "^", "MP departure": "D", "level crossing": "x"}


def _x(steps: np.ndarray) -> np.ndarray:
    """Positions on the figures' log time axis: step + 1."""
    return np.asarray(steps, dtype=np.float64) + 1


def _shade(ax, stages: pd.DataFrame | None) -> None:
    if stages is None:
        return
    for r in stages.itertuples(index=False):
        ax.axvspan(r.start_step + 1, r.end_step + 1, color=STAGE_COLOURS.get(r.trend, "#cccccc"), alpha=0.15, lw=0)
        if r.stage > 0:  # the run's neighbouring stages often share a trend: the line shows where one ends
            ax.axvline(r.start_step + 1, color="#666666", lw=0.8, ls=":")
        mid = math.sqrt((r.start_step + 1) * (r.end_step + 1))
        text = f"S{r.stage + 1}" if r.basis == "run" else f"S{r.stage + 1} {r.trend}"
        ax.text(mid, 0.98, text, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8)


def timeline_figure(store: Store, stages: pd.DataFrame | None, events, path: Path) -> None:
    """The loss over training (log step axis) with the stages shaded and the events in lanes below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loss = store.frame(EVAL_LOSS)
    fig, (top, lanes) = plt.subplots(2, 1, figsize=(8, 5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    if loss is not None:
        top.plot(_x(loss["step"]), loss["loss"], color="#222222", lw=1.5, marker=".", ms=3, label="eval loss")
        top.set_ylabel("eval loss (nats/token)")
    else:
        top.text(0.5, 0.5, "no eval loss stored", transform=top.transAxes, ha="center")
    _shade(top, stages)
    _shade(lanes, None)
    kinds = [k for k in KINDS if any(e.kind == k for e in events)]
    for lane, kind in enumerate(reversed(kinds)):
        mine = [e for e in events if e.kind == kind]
        lanes.scatter(
            _x(np.array([e.step for e in mine])), [lane] * len(mine), marker=EVENT_MARKERS[kind], color=EVENT_COLOURS[kind], s=60
        )
    lanes.set_yticks(range(len(kinds)), list(reversed(kinds)))
    lanes.set_ylim(-0.7, max(len(kinds), 1) - 0.3)
    if stages is not None:
        for r in stages.itertuples(index=False):
            lanes.axvspan(r.start_step + 1, r.end_step + 1, color=STAGE_COLOURS.get(r.trend, "#cccccc"), alpha=0.15, lw=0)
    lanes.set_xscale("log")
    lanes.set_xlabel("training step + 1 (log)")
    top.set_title(f"{store.meta.model.id or store.path.name}: loss, stages shaded, events below")
    fig.tight_layout()
    fig.savefig(path, format="svg")
    plt.close(fig)


def llc_figure(store: Store, stages: pd.DataFrame | None, path: Path) -> str | None:
    """The whole-model LLC with one standard error of its chains' mean, under the distribution readers show by
    default (`analysis.store.lenses.llc.default_llc_data`: the training distribution where held, else held-out text),
    named in its title; returns that distribution's name, or None when the store has no refined LLC."""
    if not store.has(LLC):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = default_llc_data(store.read(LLC, columns=[]))  # the training distribution where held, else text
    at: dict[str, int | str] = {**LLC_WHOLE_MODEL, LLC_DATA_COLUMN: data}
    llc = store.require(LLC, "llc", at=at)
    std = store.require(LLC, "llc_std", at=at)
    chains = int(((store.meta.llc or {}).get("sampler") or {}).get("chains") or 2)
    ok = np.isfinite(llc)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.errorbar(
        _x(store.steps[ok]), llc[ok], yerr=std[ok] / math.sqrt(max(chains - 1, 1)), color="#222222", marker="o", ms=4, capsize=3
    )
    _shade(ax, stages)
    ax.set_xscale("log")
    ax.set_xlabel("training step + 1 (log)")
    ax.set_ylabel(f"whole-model LLC {llc_data_words(data)} (n·β·ΔL)")
    ax.set_title(f"whole-model LLC {llc_data_words(data)}, ± 1 standard error over {chains} chains; LLC stages shaded")
    fig.tight_layout()
    fig.savefig(path, format="svg")
    plt.close(fig)
    return data


def llc_flags_section(store: Store) -> list[str]:
    """Whether the refined LLCs can be trusted, as Markdown: every flag of `analysis.llc.diagnostics` with its count
    over the run's estimates under the distribution it judges (`default_llc_data`) and what it means, the negative
    estimates named (never counted as converged) with what they mean and what to change; then each other distribution's
    flag counts in a line. Empty for a store without llc.parquet."""
    from headwatch.analysis.findings.llc_flags import flag_totals, flag_totals_text
    from headwatch.analysis.llc.diagnostics import FLAG_NOTES, FLAGS, NEGATIVE_NOTE, store_flags

    if not store.has(LLC):
        return []
    data = default_llc_data(store.read(LLC, columns=[]))  # the distribution store_flags judges by default
    lines = [f"## Can the refined LLCs be trusted? (the refined LLC {llc_data_words(data)})", ""]
    values = store.require(LLC, "llc", at={LLC_DATA_COLUMN: data})
    estimated = np.isfinite(store.require(LLC, "llc", at={**LLC_WHOLE_MODEL, LLC_DATA_COLUMN: data}))
    negative = np.argwhere(values < 0)  # (n, 3): step index, layer, head
    named = ", ".join(f"{head_name(layer, head)} at step {int(store.steps[t]):,}" for t, layer, head in negative[:12])
    named += f" and {len(negative) - 12} more" if len(negative) > 12 else ""
    flags = store_flags(store, data=data)
    if flags is None:
        lines.append(
            "This store has no chain diagnostics (llc_chains.parquet): rerun the precompute job with the same "
            f"`--lenses llc` options to add them. {len(negative)} head estimates are negative"
            + (f" ({named}): {NEGATIVE_NOTE}." if len(negative) else ".")
        )
        return [*lines, ""]
    heads, model = flags[0][estimated], flags[1][estimated]
    counts = flag_totals(heads, model)
    lines += [
        "Every estimate judged from its chains' loss traces by the rule of `analysis/llc/diagnostics.py` (the Refined "
        "LLC page's diagnostics): " + flag_totals_text(heads, model),
        "",
        _table(pd.DataFrame({"flag": FLAGS, "estimates": [counts[f] for f in FLAGS], "meaning": [FLAG_NOTES[f] for f in FLAGS]})),
        "",
    ]
    if len(negative):
        lines += [f"Negative head estimates: {named}.", ""]
    others = []
    for other in llc_data_order(store.read(LLC, columns=[])):
        judged = store_flags(store, data=other) if other != data else None
        if judged is not None:
            held = np.isfinite(store.require(LLC, "llc", at={**LLC_WHOLE_MODEL, LLC_DATA_COLUMN: other}))
            totals = flag_totals_text(judged[0][held], judged[1][held], explain=False)
            others.append(f"- The refined LLC {llc_data_words(other)}: {totals}")
    if others:
        lines += ["The estimates under the store's other distributions, judged by the same rule:", "", *others, ""]
    return lines


def _errors_plot(ax, steps: np.ndarray, value: np.ndarray, se: np.ndarray, *, colour: str, label: str) -> None:
    """A curve with markers and a band of ± 1 standard error, on the figures' log time axis (step + 1)."""
    ok = np.isfinite(value)
    x = _x(steps[ok])
    ax.plot(x, value[ok], color=colour, lw=1.5, marker=".", ms=3, label=label)
    band = np.where(np.isfinite(se[ok]), se[ok], 0.0)
    ax.fill_between(x, value[ok] - band, value[ok] + band, color=colour, alpha=0.2, lw=0)


def icl_section(store: Store, stages: pd.DataFrame | None, out: Path) -> list[str]:
    """The run's two in-context-learning scores as Markdown (what each compares, where each falls most sharply beside
    the stage boundary at which induction heads form: `analysis.findings.icl`) and ``icl.svg`` (both with their
    standard-error bands, the stages shaded, the falls and the boundary marked); a store without icl.parquet gets the
    command that adds it."""
    from headwatch.analysis.findings.ablation import ICL_LABELS, icl_scores, missing_icl_text
    from headwatch.analysis.findings.icl import NOISE_SE, fall_sentence, run_induction_boundary, sharpest_fall

    lines = ["## In-context learning", ""]
    scores = icl_scores(store)
    if scores is None:
        return [*lines, missing_icl_text(store.path), ""]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    boundary = run_induction_boundary(store, stages)
    colours = {"text": "#1f77b4", "probe": "#d62728"}
    fig, ax = plt.subplots(figsize=(8, 3.4))
    sentences = []
    for name in ("text", "probe"):
        fall = sharpest_fall(scores.steps, scores.score[name], scores.se[name])
        _errors_plot(ax, scores.steps, scores.score[name], scores.se[name], colour=colours[name], label=ICL_LABELS[name])
        if fall is not None:
            ax.axvspan(fall.start + 1, fall.end + 1, color=colours[name], alpha=0.15, lw=0)
        sentences.append(fall_sentence(ICL_LABELS[name], fall, boundary))
    if boundary is not None:
        ax.axvline(boundary.step + 1, color="#2ca02c", ls=":", lw=1.5, label="induction heads form")
    _shade(ax, stages)
    ax.axhline(0, color="#999999", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("training step + 1 (log)")
    ax.set_ylabel("late minus early loss (nats)")
    ax.set_title(f"in-context-learning scores, ± 1 s.e. over sequences; sharpest falls beyond {NOISE_SE:g} s.e. shaded")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out / ICL_SVG, format="svg")
    plt.close(fig)
    return [
        *lines,
        "Olsson et al.'s in-context-learning score is the loss at the 500th token minus at the 50th (negative when the "
        f"context helps). Text: {scores.positions['text']}. Probe: {scores.positions['probe']}. Each with its standard "
        "error over sequences; the sharpest fall is the steepest drop between consecutive checkpoints per unit of "
        f"log10(1 + step) among the drops larger than {NOISE_SE:g} standard errors of the difference; the induction "
        "boundary is the stage boundary led by a rise in induction scores nearest the first induction head's emergence "
        "(docs/views/timeline.md).",
        "",
        *(f"- {s}" for s in sentences),
        "",
        f"![The in-context-learning scores over training]({ICL_SVG})",
        "",
    ]


def cards_section(store: Store, stages: pd.DataFrame | None, out: Path) -> list[str]:
    """One card per head that holds a type at the end or whose ablation costs the probe or the text most
    (`analysis.findings.cards.card_heads`, which says why), as Markdown with its ablation effect over training as
    ``card_L<l>H<h>.svg`` (probe and text loss increase, ± 1 standard error, the stages shaded)."""
    from headwatch.analysis.findings.ablation import probe_check, probe_check_lines
    from headwatch.analysis.findings.cards import card_heads, card_markdown, head_card
    from headwatch.analysis.llc.diagnostics import store_flags

    lines = [
        "## Head cards",
        "",
        "What the store knows of each head that holds a type at the last checkpoint, or whose ablation raises the "
        "loss on the probe or on the text most at the last checkpoint with ablations (each card says why it is here): "
        "its types and emergence steps, its ablation effect (the loss increase when its output is replaced by its mean "
        "over the evaluation tokens, nats, ± 1 standard error over sequences), its tokens in context (the targets whose "
        "loss rises most when it is ablated, in their context), its refined LLC and flag, its strongest composition "
        "partners.",
        "",
    ]
    check = probe_check(store)
    if check is not None:
        lines += [
            "**The probe's costliest head** (does the loss on the probe's second copy need the run's induction heads "
            "most, and do they serve second-copy tokens?):",
            "",
            *(f"- {line}" for line in probe_check_lines(check)),
            "",
        ]
    picked = card_heads(store)
    if not picked:
        return [*lines, "No head holds a type and the store has no ablations: no cards.", ""]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flags = store_flags(store) if store.has(LLC) else None
    for layer, head, why in picked:
        card = head_card(store, layer, head, why=why, flags=flags)
        lines += card_markdown(card, run=store.path.name, store_path=str(store.path))
        if card.probe is None or card.text is None:
            continue
        name = f"card_L{layer}H{head}.svg"
        fig, ax = plt.subplots(figsize=(8, 2.6))
        for series, colour, label in ((card.probe, "#d62728", "probe (second copy)"), (card.text, "#1f77b4", "text")):
            _errors_plot(ax, series.steps, series.value, series.se, colour=colour, label=label)
        _shade(ax, stages)
        ax.axhline(0, color="#999999", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("training step + 1 (log)")
        ax.set_ylabel("loss increase (nats)")
        ax.set_title(f"{card.name}: loss increase when {card.method}-ablated, ± 1 s.e.")
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        fig.savefig(out / name, format="svg")
        plt.close(fig)
        lines += [f"![{card.name}: loss increase when ablated, over training]({name})", ""]
    return lines


def llc_data_section(store: Store) -> list[str]:
    """The refined LLC under several distributions, as Markdown (`analysis.findings.llc_data`): which distributions the
    store's estimates were taken on; per induction head, whether its estimate on repeats exceeds its estimate on text
    beyond 2 standard errors of the difference and from which step; where its data-refined curve's critical points
    (beyond the noise) fall against the fall of the ICL score with one other induction head ablated minus the intact
    score: one line per ablated head, then a table of the curves (or that the store lacks the tables). Empty without
    llc.parquet."""
    from headwatch.analysis.findings.llc_data import (
        SE_MULTIPLE,
        ablation_lines,
        critical_against_ablation,
        critical_table,
        repeats_over_text,
        repeats_sentences,
    )

    if not store.has(LLC):
        return []
    held = llc_data_order(store.read(LLC, columns=[]))
    critical = critical_against_ablation(store)
    k = f"{SE_MULTIPLE:g}"
    lines = [
        "## The refined LLC under each distribution",
        "",
        f"The SGLD loss was taken on: {', '.join(held)}"
        + (
            " (on the run's training distribution the refined LLC is the weight-refined one; on any other, data-refined)."
            if len(held) > 1
            else f" only; `--lenses llc --llc-data train,repeats,code` adds the others beside {held[0]}."
        ),
        "",
        "### Induction heads: on repeats against on text",
        "",
        f"An estimate on repeats exceeds the one on text where their difference is more than {k} standard errors of "
        "it (each estimate's standard error is its chains': their sample standard deviation / sqrt(chains)) and "
        "neither is negative (a negative estimate is no learning coefficient).",
        "",
        *(f"- {line}" for line in repeats_sentences(repeats_over_text(store))),
        "",
        "### Critical points of each data-refined curve against the ICL score with one other induction head ablated",
        "",
        f"A peak is an estimate above both neighbours from which the curve falls by more than {k} standard errors of "
        "the difference on each side; the sharpest rise is the largest increase between consecutive estimates among "
        f"those beyond {k} standard errors. Each is set against the sharpest fall (beyond {k} standard errors) of the "
        "probe ICL score with one other induction head ablated minus the intact score (ablation.parquet `icl_probe` "
        "minus icl.parquet's probe score, so the score's general fall as induction forms cancels): first where that "
        "score falls with each induction head ablated, then each other head's curve against it.",
        "",
        *ablation_lines(critical, store.steps),
        "",
    ]
    table = critical_table(critical)
    if table:
        lines += [
            "Each induction head's data-refined curve: its peaks, its sharpest rise and, per ablated head whose score "
            "falls beyond the noise, the curve's critical point nearest that fall (– in the head's own column).",
            "",
            _table(pd.DataFrame(table)),
            "",
        ]
    return lines


def _plain(markdown: str) -> str:
    """Markdown with its links as their text (the headline's links are the dashboard's, which a report cannot open)."""
    return re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", markdown)


def _table(frame: pd.DataFrame) -> str:
    """A Markdown table (pipes in cells escaped)."""
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def _uncertainty(row) -> str:
    """Where a stage's opening boundary could sit (stages.parquet ``low_step``..``high_step``), in words."""
    low, high = int(row.low_step), int(row.high_step)
    if int(row.stage) == 0 or low < 0:
        return "–"
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def _stage_table(stages: pd.DataFrame, basis: str) -> str:
    if basis == "run":
        return _table(
            pd.DataFrame(
                {
                    "stage": [f"S{s + 1}" for s in stages["stage"]],
                    "steps": [f"{a:,}–{b:,}" for a, b in zip(stages["start_step"], stages["end_step"], strict=True)],
                    "begins with: what changes across it": stages["boundary"],
                    "boundary could sit at (steps)": [_uncertainty(r) for r in stages.itertuples(index=False)],
                    "supported by (curve boundary, step)": [s or "–" for s in stages["support"]],
                    "loss change (nats/token)": [f"{v:+.3f}" if np.isfinite(v) else "–" for v in stages["loss_change"]],
                }
            )
        )
    curve = basis_text(basis)
    shown = pd.DataFrame(
        {
            "stage": [f"S{s + 1}" for s in stages["stage"]],
            "steps": [f"{a:,}–{b:,}" for a, b in zip(stages["start_step"], stages["end_step"], strict=True)],
            "trend": stages["trend"],
            "begins with": stages["boundary"],
            f"{curve} change ± s.e.": [f"{c:+.3g} ± {s:.2g}" for c, s in zip(stages["change"], stages["change_se"], strict=True)],
            "loss change (nats/token)": [f"{v:+.3f}" if np.isfinite(v) else "–" for v in stages["loss_change"]],
        }
    )
    return _table(shown)


def association_section(store: Store, others: list[Store], *, named: bool = False) -> list[str]:
    """The study's open question as Markdown: do the trajectory clusters of each weight statistic (and the refined
    LLC) correspond to the head types at the end of training? AMI, permutation p with its Monte Carlo error, Holm's
    correction over the run's statistics and the decision per statistic and run (`analysis.findings.association`,
    as the Timeline and the Trajectory map judge them), and whether an association replicates in this run's
    replicates, named, in the words the pages use.

    Args:
        others: the replicates asked: those the user named (``named``: ``--replicate``, asked whatever their recorded
            recipe, which the section states), else the stores found beside this one with its recipe and another
            seed (`analysis.findings.replicates.is_replicate`).
    """
    from headwatch.analysis.findings.association import asked_of, judged_run, replication_text, run_text, study_pairs
    from headwatch.analysis.findings.replicates import is_replicate, relation_text, replicate_hint
    from headwatch.analysis.trajectories.significance import MONTE_CARLO_LEVEL, SIGNIFICANCE
    from headwatch.analysis.trajectories.type_association import ASSOCIATION_PAIRS, PERMUTATIONS, end_types

    runs = [s for s in [store, *others] if end_types(s) is not None]
    lines = ["## Do the trajectory clusters correspond to head types?", ""]
    if store not in runs:
        return [
            *lines,
            f"This store has no head types (head_types.parquet): add them with "
            f"`python -m headwatch.precompute.lenses.types {store.path}`.",
            "",
        ]
    judged = {s.path.name: judged_run(s) for s in runs}  # each run's p-values, Holm over its statistics
    rows = []
    for pair in ASSOCIATION_PAIRS:
        for s in runs:
            t = judged[s.path.name].get(pair)
            if t is None:
                continue
            a, over, within = t.association, t.over, t.within
            rows.append(
                {
                    "statistic": _pair_name(pair),
                    "run": s.path.name,
                    "types at step": f"{t.step:,}",
                    "clusters (k)": a.clusters,
                    "AMI": "-" if not a.testable else f"{a.ami:.3f}",
                    "p (over heads)": "-" if not a.testable else f"{a.p_value:.4f}",
                    "p (within layers)": "-" if not a.testable else f"{a.p_within_layers:.4f}",
                    "Monte Carlo s.e. (over heads, within layers)": "-" if not a.testable else f"{over.se:.4f}, {within.se:.4f}",
                    "p, Holm (over heads, within layers)": "-"
                    if not a.testable
                    else f"{over.adjusted:.4f}, {within.adjusted:.4f}",
                    "Holm over": "-" if not a.testable else f"{over.family} statistics",
                    "answer": a.reason or f"{over.words}; within layers: {within.words}",
                }
            )
    lines += [
        "The training-dynamics study leaves open whether its clusters of head trajectories are functional head "
        "types. Each row clusters the heads' trajectories of one statistic (per-head z-scored, k-means from "
        "deterministic starts, k in 2..6 by silhouette) and compares the clusters with the heads' types at the last "
        f"checkpoint (adjusted mutual information; p from {PERMUTATIONS:,} random reassignments of the types to the "
        "heads, and within layers only, each with its Monte Carlo standard error; each run's p corrected by Holm's "
        "method over the statistics tested in it, the answer read from the adjusted p's "
        f"{MONTE_CARLO_LEVEL:.0%} Monte Carlo interval: associated below {SIGNIFICANCE}, undecided where the "
        "interval holds it; an association replicates where it is associated over heads in this run and in every "
        "replicate; method: docs/views/trajectories.md).",
        "",
        _table(pd.DataFrame(rows)),
        "",
    ]
    name = store.path.name
    asked = asked_of(judged, name, [s.path.name for s in runs[1:]], {p: _pair_name(p) for p in study_pairs(store)})
    answer = f"**Answer.** {run_text(asked, run=f'`{name}`')} "
    replicates = runs[1:]
    if replicates:
        how = "named with `--replicate`" if named else f"found beside it in `{store.path.parent}`"
        about = (
            f"{how}, {relation_text(store, replicates[0])}"
            if len(replicates) == 1
            else how + ": " + "; ".join(f"`{s.path.name}`, {relation_text(store, s)}" for s in replicates)
        )
        if any(not is_replicate(store, s) for s in replicates):
            about += "; a run named is asked whatever its recorded recipe"
        answer += replication_text(asked, replicates=[s.path.name for s in replicates], run=f"`{name}`", about=about)
        no_types = [s.path.name for s in others if s not in runs]
        if no_types:
            answer += f" Named but without head types, so not asked: {', '.join(no_types)}."
    else:
        lonely = [s.path.name for s in others]
        answer += (
            f"The replicates named ({', '.join(lonely)}) have no head types, so whether these associations replicate "
            "is not asked."
            if lonely
            else replication_text(
                asked,
                replicates=[],
                hint=replicate_hint(store, name, where=f"among the stores beside it in `{store.path.parent}`"),
            )
        )
    return [*lines, answer, ""]


def _pair_name(pair: tuple[str, str]) -> str:
    """How the report names a (statistic, matrix) pair: ``std of W_QK``; the refined LLC, of no matrix, ``llc``."""
    stat, matrix = pair
    return stat if stat == "llc" else f"{stat} of W_{matrix.upper()}"


def sibling_replicates(store: Store) -> list[Store]:
    """The stores beside ``store`` (in its parent folder) that are its replicates: trained with its recipe and another
    seed (`analysis.findings.replicates.is_replicate`); a folder that does not open as a store is passed over."""
    from headwatch.analysis.errors import StoreError
    from headwatch.analysis.findings.replicates import is_replicate
    from headwatch.analysis.store.format import META_FILE

    found = []
    for path in sorted(p for p in store.path.parent.iterdir() if p.is_dir() and (p / META_FILE).is_file()):
        if path.resolve() == store.path.resolve():
            continue
        try:
            other = open_store(path)
        except StoreError:
            continue
        if is_replicate(store, other):
            found.append(other)
    return found


def write_report(store_path: str | Path, out: str | Path, *, replicate: Sequence[str | Path] | None = None) -> Path:
    """Write ``report.md`` and its SVG figures into ``out`` (created if missing); ``replicate``: other runs' stores
    (the same recipe, another seed) in which the clusters-versus-types association is asked again. Without it, the
    stores beside this one that meta.json says are its replicates (`sibling_replicates`) are asked; named ones are
    asked instead, whatever their recorded recipe.

    Returns:
        The Markdown file's path.

    Raises:
        StoreError: ``out`` is a file or a store (`analysis.store.outputs.check_files_folder`; nothing is written
            then), or the store cannot be opened or a table read.
    """
    check_files_folder(out, what="report.md and its figures")
    store = open_store(store_path)
    others = [open_store(p) for p in replicate or []]  # every store opened before anything is written
    named = bool(others)
    if not named:
        others = sibling_replicates(store)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run = store.path.name
    recorded = store.meta.stages or {}
    primary = primary_basis(store)
    events = run_events(store)
    timeline_figure(store, stage_rows(store), events, out / TIMELINE_SVG)
    llc_data = llc_figure(store, stage_rows(store, basis="llc"), out / LLC_SVG)

    m = store.meta.model
    steps = store.steps
    lines = [
        f"# What happened in run `{run}`",
        "",
        f"Model **{m.id or '?'}** ({m.family}): {m.n_layers} layers × {m.n_heads} heads, d_model {m.d_model}, "
        f"d_head {m.d_head}; {len(steps)} checkpoints with statistics, steps {int(steps[0]):,} to {int(steps[-1]):,}. "
        f"Made by `headwatch report` from the store at `{store.path}`.",
        "",
        "## Which heads formed when",
        "",
        *(f"- {_plain(line)}" for line in headline_markdown(store, run)),
        "",
        "## Stages",
        "",
    ]
    if not store.has(STAGES):
        lines.append(
            "This store has no stages (stages.parquet): add them with `python -m headwatch.precompute.lenses.stages STORE`."
        )
    else:
        parameters = recorded.get("parameters", {})
        llc_on = (recorded.get("llc") or {}).get("distribution") if (recorded.get("llc") or {}).get("present") else None
        what = {
            "run": "every curve's boundaries merged (the whole-model LLC, the loss, the probe's copy loss, the number of "
            "heads of each type)",
            "llc": "the whole-model LLC's critical points",
            "loss": "the loss's plateaus and drops",
        }
        lines.append(
            f"Read from {what.get(primary or '', 'no curve')} (docs/stages.md): a curve's boundary is where its trend or "
            f"its rate changes by more than {parameters.get('k', 3):g} standard errors, on a log10(1 + step) axis"
            + (
                f"; boundaries of several curves within {parameters.get('merge', 2)} checkpoint(s) are one boundary of the "
                "run, at its best-supported member's step, named by the heads whose scores change most in the stage it "
                "opens; a boundary could sit at the checkpoints where its cut raises chi2 by at most 1 over its best "
                "place (profile likelihood)" + (f"; the LLC is estimated on {llc_on}" if llc_on else "") + "."
                if primary == "run"
                else "."
            )
        )
        for note in recorded.get("notes", []):
            lines.append(f"Note: {note}.")
        for basis in stage_bases(store):
            rows = stage_rows(store, basis=basis)
            if rows is None or rows.empty:
                continue
            title = "The run's stages" if basis == "run" else f"Stages of the {basis_text(basis)}"
            lines += ["", f"### {title}" + (" (shaded)" if basis == primary else ""), "", _stage_table(rows, basis)]
    lines += ["", f"![The loss with the stages shaded and the run's events]({TIMELINE_SVG})", ""]
    if llc_data is not None:
        lines += [f"![The whole-model LLC {llc_data_words(llc_data)} with its chains' standard error]({LLC_SVG})", ""]
    lines += llc_flags_section(store)
    lines += icl_section(store, stage_rows(store), out)

    lines += llc_data_section(store)
    lines += ["## Head types", ""]
    lines += [f"- {s}" for s in type_sentences(store)]
    emergence = store.frame(HEAD_EMERGENCE)
    if emergence is not None:
        held = emergence[emergence["emergence_step"].notna()].sort_values(["emergence_step", "layer", "head"])
        if len(held):
            lines += [
                "",
                _table(
                    pd.DataFrame(
                        {
                            "head": [head_name(a, b) for a, b in zip(held["layer"], held["head"], strict=True)],
                            "type": [TYPE_LABELS.get(t, t) for t in held["type"]],
                            "emergence step": [f"{int(s):,}" for s in held["emergence_step"]],
                            "peak score": [f"{v:.3g}" for v in held["peak_score"]],
                            "final score": [f"{v:.3g}" for v in held["final_score"]],
                        }
                    )
                ),
            ]
            if held["type"].isin(FUNCTION_TYPES).any():
                lines += [
                    "",
                    "A multigram or other head's scores are its mean-ablation loss increase on the evaluation text "
                    "(nats per token) at the checkpoints with tokens in context, and their emergence step is the first "
                    "checkpoint with tokens in context at which the head holds the type (they are decided nowhere "
                    "else); the others' scores are attention shares.",
                ]
    lines += ["", *cards_section(store, stage_rows(store), out)]
    lines += association_section(store, others, named=named)
    lines += ["## Events", ""]
    if events:
        frame = events_frame(events, run)
        frame["view"] = [f"`{link}`" for link in frame.pop("link")]
        lines += [
            "Each event with the dashboard view that shows its evidence (a path of the dashboard's URL, "
            "`headwatch serve` on the store).",
            "",
            _table(frame.assign(step=[f"{s:,}" for s in frame["step"]])),
        ]
    else:
        lines.append("No events.")
    path = out / REPORT_FILE
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(store: str, out: str, replicate: list[str] | None = None) -> int:
    """The ``headwatch report`` subcommand: the exit status."""
    path = write_report(store, out, replicate=replicate)
    print(f"wrote {path} with {TIMELINE_SVG}" + (f" and {LLC_SVG}" if (path.parent / LLC_SVG).is_file() else ""))
    return 0
