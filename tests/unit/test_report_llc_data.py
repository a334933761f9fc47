"""``headwatch report``'s refined LLC under several distributions (`analysis.findings.llc_data`), on a copy of a shipped
induction store given planted estimates on text and repeats, a planted intact ICL score (icl.parquet) and a planted
ablation table, each reading checked against what was planted.

The planted curves carry noise within their standard errors (alternating wiggles of 0.1 standard error, every
estimate's standard error 1: ``llc_std`` sqrt(3) over the store's 4 chains) beside one clear peak and one clear rise
per head, so a reading that takes every local maximum, or a difference within the noise, is caught; the ICL score
falls by far the most at one step for every head, ablated or not, so a reading of the ablated score alone (not minus
the intact one) is caught too.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwatch.analysis.findings import llc_data
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.ablation import ABLATION
from headwatch.analysis.store.lenses.losses import ICL
from headwatch.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "data" / "induction-d128"
HEADS = [(1, 0), (1, 1), (1, 5), (1, 6)]  # its induction heads at the last checkpoint (head_types.parquet)
# per head, the step index of its curve's one clear peak and of its one clear rise (both distributions)
PEAK = {(1, 0): 10, (1, 1): 40, (1, 5): 15, (1, 6): 5}
RISE = {(1, 0): 30, (1, 1): 20, (1, 5): 35, (1, 6): 45}
SE = 1.0  # every planted estimate's standard error: llc_std / sqrt(chains - 1)
# per head, the estimate on repeats minus the one on text, by step index
OFFSET = {
    (1, 0): lambda t: 5.0 if t >= 25 else 0.5,  # beyond 2 s.e. of the difference (2.83) from index 25 on
    (1, 1): lambda t: 5.0,  # at every step
    (1, 5): lambda t: 5.0 if t == 49 else 0.0,  # at the last only
    (1, 6): lambda t: 1.0,  # above at every step, but within the noise: never beyond
}
BIG_FALL = 22  # the step index where the intact ICL score (and so every ablated one) falls by 1.5 nats
FALL = {(1, 0): 28, (1, 1): 12, (1, 5): 33}  # the ablated-minus-intact score falls by 0.5 nats here
SMALL_FALL = (1, 6), 40  # ... and with L1 H6 ablated by 0.1 nats only (within 2 s.e. of the difference, 0.14)


def planted_curve(head: tuple[int, int], n: int) -> np.ndarray:
    """A head's text estimates: wiggles within the noise, one peak of 10 s.e., a rise of 20 s.e. kept from RISE on."""
    t = np.arange(n)
    return 10.0 + 0.1 * SE * (-1.0) ** t + 10.0 * SE * (t == PEAK.get(head, 12)) + 20.0 * SE * (t >= RISE.get(head, 25))


def plant_llc(store: Path) -> pd.DataFrame:
    """Estimates on text and on repeats (`planted_curve`, repeats = text + OFFSET) for every head; the whole-model
    rows kept as shipped."""
    text = pq.read_table(store / "llc.parquet").to_pandas()
    if "data" in text.columns:  # a store with estimates under several distributions: its text rows, replanted
        text = text[text["data"] == "text"].reset_index(drop=True)
    else:
        text.insert(1, "data", "text")
    steps = sorted(text["step"].unique())
    index = {s: i for i, s in enumerate(steps)}
    heads = text["layer"] >= 0
    text.loc[heads, "llc_std"] = SE * math.sqrt(3)
    curves = {(int(a), int(b)): planted_curve((int(a), int(b)), len(steps)) for a, b in text.loc[heads, ["layer", "head"]].values}
    t = text["step"].map(index).to_numpy()
    text.loc[heads, "llc"] = [
        curves[(int(a), int(b))][i] for a, b, i in zip(text["layer"][heads], text["head"][heads], t[heads], strict=True)
    ]
    repeats = text.copy()
    repeats["data"] = "repeats"
    shift = [OFFSET.get((int(a), int(b)), lambda i: 0.0)(i) for a, b, i in zip(repeats["layer"], repeats["head"], t, strict=True)]
    repeats.loc[heads, "llc"] = repeats.loc[heads, "llc"] + np.asarray(shift)[heads.to_numpy()]
    both = pd.concat([text, repeats]).sort_values(["step", "data", "layer", "head"])
    pq.write_table(pa.Table.from_pandas(both, preserve_index=False), store / "llc.parquet")
    return both


def written_report(store: Path, out: Path) -> str:
    """The report.md that `headwatch report STORE --out OUT` writes (the command run, its exit status checked)."""
    assert main(["report", str(store), "--out", str(out)]) == 0
    return (out / "report.md").read_text()


def section_of(text: str, heading: str) -> str:
    """The report's section opened by ``heading``, up to the next top-level section."""
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def plant_icl(store: Path) -> np.ndarray:
    """icl.parquet (both sets) and ablation.parquet: the intact probe score falls 1.5 nats at BIG_FALL; with head g
    ablated it is the intact score + 0.6, falling 0.5 nats more at FALL[g] (0.1 for SMALL_FALL), with wiggles of
    0.01; every standard error 0.05. Returns the store's steps."""
    steps = open_store(store).steps
    t = np.arange(len(steps))
    intact = -0.2 - 1.5 * (t >= BIG_FALL)
    icl = pd.DataFrame(
        [(int(s), name, 5.0, 5.0 + v, v, 0.05) for s, v in zip(steps, intact, strict=True) for name in ("probe", "text")],
        columns=ICL.schema.names,
    )
    pq.write_table(pa.Table.from_pandas(icl, schema=ICL.schema, preserve_index=False), store / "icl.parquet")
    rows = []
    for i, step in enumerate(steps):
        for layer in range(2):
            for head in range(8):
                drop = FALL.get((layer, head))
                size = 0.5
                if (layer, head) == SMALL_FALL[0]:
                    drop, size = SMALL_FALL[1], 0.1
                delta = 0.6 + 0.01 * (-1.0) ** i - (size if drop is not None and i >= drop else 0.0)
                rows.append((int(step), layer, head, "mean", 0.0, 0.01, 0.0, 0.01, 0.0, 0.05, intact[i] + delta, 0.05))
    frame = pd.DataFrame(rows, columns=ABLATION.schema.names)
    pq.write_table(pa.Table.from_pandas(frame, schema=ABLATION.schema, preserve_index=False), store / "ablation.parquet")
    return np.asarray(steps)


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    """A copy of induction-d128 without the ICL scores and the ablations (planted by `plant_icl` where a test needs
    them), its induction heads at the last checkpoint `HEADS` (head_types.parquet read with pandas)."""
    path = tmp_path / "induction-d128"
    shutil.copytree(SHIPPED, path)
    for table in (ABLATION, ICL):
        (path / table.file).unlink(missing_ok=True)
    types = pd.read_parquet(path / "head_types.parquet")
    last = types[(types["step"] == types["step"].max()) & types["holds"] & (types["type"] == "induction")]
    assert sorted(zip(last["layer"], last["head"], strict=True)) == HEADS
    return path


def test_repeats_over_text_counts_only_differences_beyond_two_standard_errors(store: Path) -> None:
    both = plant_llc(store)
    steps = sorted(both["step"].unique())
    # L1 H1's text estimate at the first step made negative: no learning coefficient, so repeats cannot exceed it there
    first = (both["data"] == "text") & (both["layer"] == 1) & (both["head"] == 1) & (both["step"] == steps[0])
    both.loc[first, "llc"] = -3.0
    pq.write_table(pa.Table.from_pandas(both, preserve_index=False), store / "llc.parquet")
    rows = llc_data.repeats_over_text(open_store(store))
    assert rows is not None and [r.head for r in rows] == HEADS
    want_from = {(1, 0): steps[25], (1, 1): steps[1], (1, 5): steps[49], (1, 6): None}
    for r in rows:
        above = [OFFSET[r.head](i) > 2 * math.sqrt(2) * SE and not (r.head == (1, 1) and i == 0) for i in range(len(steps))]
        assert list(r.above) == above and r.from_step == want_from[r.head]
        own = both[(both["layer"] == r.head[0]) & (both["head"] == r.head[1]) & (both["step"] == steps[-1])]
        last = own.set_index("data")["llc"]
        assert r.last_ratio == pytest.approx(last["repeats"] / last["text"])


def test_peaks_and_rises_clear_the_noise() -> None:
    """The rule on small curves, against a plain reading of it: a wiggle within the noise is no peak; a peak needs a
    fall beyond 2 s.e. on both sides before the curve passes above it; the sharpest rise is the largest one beyond."""
    steps = np.arange(8) * 10
    se = np.ones(8)
    noisy = np.array([0.0, 0.3, 0.0, 0.3, 0.0, 0.3, 0.0, 0.3])  # local maxima at 10, 30, 50 within the noise
    assert llc_data.peaks(steps, noisy, se) == [] and llc_data.sharpest_change(steps, noisy, se, sign=1) is None
    # 3.0 falls to 0.0 on the left (3 > 2.83) but only to 2.0 on the right before passing above it at 5.0: no peak
    shoulder = np.array([0.0, 3.0, 2.0, 5.0, 0.0, 0.0, 0.0, 0.0])
    assert llc_data.peaks(steps, shoulder, se) == [30]
    assert llc_data.sharpest_change(steps, shoulder, se, sign=1) == 10  # rises 3.0 (at 10) and 3.0 (at 30): the first
    assert llc_data.sharpest_change(steps, shoulder, se, sign=-1) == 40
    assert llc_data.peaks(steps, shoulder, se * 2) == []  # every difference within 2 s.e. of 2 each


def test_critical_points_against_the_ablated_minus_intact_icl_score(store: Path, tmp_path: Path) -> None:
    plant_llc(store)
    assert llc_data.critical_against_ablation(open_store(store)) is None  # no ablation table, no ICL scores
    steps = plant_icl(store)
    rows = llc_data.critical_against_ablation(open_store(store))
    assert rows is not None
    assert {(r.head, r.other, r.data) for r in rows} == {
        (h, g, d) for h in HEADS for g in HEADS if g != h for d in ("text", "repeats")
    }
    for r in rows:
        assert r.compared == len(steps)
        assert r.peaks == [int(steps[PEAK[r.head]])] and r.rise == int(steps[RISE[r.head]])
        want = FALL.get(r.other)  # None for L1 H6, whose fall is within the noise; never BIG_FALL
        assert r.fall == (None if want is None else int(steps[want]))
        if want is None:
            assert r.nearest is None
            continue
        dist = {PEAK[r.head]: abs(PEAK[r.head] - want), RISE[r.head]: abs(RISE[r.head] - want)}
        best = min(dist.values())
        near = min(i for i in dist if dist[i] == best)
        assert r.nearest == (int(steps[near]), best)
    # the report says both: one line per ablated head, then the curves as a table
    text = written_report(store, tmp_path / "out")
    section = section_of(text, "## The refined LLC under each distribution")
    assert "The SGLD loss was taken on: text, repeats" in section
    assert "### Critical points of each data-refined curve against the ICL score with one other induction head ablated" in section
    assert "more than 2 standard errors" in section
    assert "L1 H5: its refined LLC on the probe's repeated random tokens exceeds its refined LLC on held-out text" in section
    assert "With L1 H6 ablated, the probe ICL score minus the intact score never falls beyond the noise" in section
    fall = int(steps[FALL[(1, 1)]])
    assert f"With L1 H1 ablated, the probe ICL score minus the intact score falls most at step {fall:,}" in section
    assert "other induction heads ablated" not in section
    # the curves as one table: a row per (head, distribution), a column per ablated head whose score falls
    table = [line for line in section.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    with_fall = sorted(g for g in HEADS if FALL.get(g) is not None)
    assert header == ["head", "refined LLC", "peaks", "sharpest rise"] + [
        f"nearest to the fall with L{g[0]} H{g[1]} ablated" for g in with_fall
    ]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert len(body) == len(HEADS) * 2  # text and repeats
    for cells in body:
        head = next(h for h in HEADS if cells[0] == f"L{h[0]} H{h[1]}")
        assert cells[2] == f"{int(steps[PEAK[head]]):,}" and cells[3] == f"{int(steps[RISE[head]]):,}"
        for g, cell in zip(with_fall, cells[4:], strict=True):
            if g == head:
                assert cell == "–"
                continue
            dist = {PEAK[head]: abs(PEAK[head] - FALL[g]), RISE[head]: abs(RISE[head] - FALL[g])}
            near = min(i for i in dist if dist[i] == min(dist.values()))
            k = dist[near]
            assert cell == f"{int(steps[near]):,} ({k} checkpoint{'' if k == 1 else 's'} away)", (cells, g)
    # an ablation table without rows (the lens not yet run at any checkpoint): said, not read as "never falls"
    pq.write_table(ABLATION.schema.empty_table(), store / "ablation.parquet")
    rows = llc_data.critical_against_ablation(open_store(store))
    assert rows is not None and all(r.compared == 0 and r.fall is None for r in rows)
    said = llc_data.ablation_lines(rows, steps)
    assert len(said) == len(HEADS)
    assert all("ablated, no fall to read" in line and "(both scores at 0 of" in line for line in said), said[0]
    assert not any(k.startswith("nearest") for row in llc_data.critical_table(rows) for k in row)  # no fall, no column


# a shipped store made before the distributions were named and the ablation lens: the GPU-built induction-d512
TEXT_ONLY = REPO / "data" / "induction-d512"


def test_a_shipped_store_says_it_holds_text_only_and_lacks_the_ablation_table(tmp_path: Path) -> None:
    assert "data" not in pq.read_schema(TEXT_ONLY / "llc.parquet").names and not (TEXT_ONLY / ABLATION.file).exists()
    text = written_report(TEXT_ONLY, tmp_path / "out")
    section = section_of(text, "## The refined LLC under each distribution")
    assert "The SGLD loss was taken on: text only; `--lenses llc --llc-data train,repeats,code` adds the others" in section
    assert "no refined LLCs on both repeats and text" in section
    assert "This store lacks the ICL score under single-head ablation" in section
    # the whole-model figure and the flags name the distribution the shipped estimates were taken on
    assert "![The whole-model LLC on held-out text with its chains' standard error](llc.svg)" in text
    assert "## Can the refined LLCs be trusted? (the refined LLC on held-out text)" in text
    assert "whole-model LLC on held-out text" in (tmp_path / "out" / "llc.svg").read_text()


def test_llc_data_imports_the_ablation_declaration() -> None:
    """The finding reads the ablation lens's own declaration, not a table looked up by name."""
    assert llc_data.ABLATION is ABLATION
    assert "TABLES" not in (REPO / "headwatch" / "analysis" / "findings" / "llc_data.py").read_text()


def test_a_negative_last_ratio_is_said_to_be_no_learning_coefficient() -> None:
    row = llc_data.RepeatsOverText((1, 0), np.array([0, 8]), np.array([False, False]), None, -0.1)
    (line,) = llc_data.repeats_sentences([row])
    assert "repeats / text = -0.1 (one of the two estimates is negative there: no learning coefficient" in line
    (plain,) = llc_data.repeats_sentences([llc_data.RepeatsOverText((1, 0), np.array([0]), np.array([True]), 0, 2.0)])
    assert plain.endswith("repeats / text = 2.")


def test_the_shipped_induction_d128_report_reads_its_four_distributions(tmp_path: Path) -> None:
    """induction-d128 holds the refined LLC under the training distribution, text, repeats and code: the report names
    the four, judges the training one's estimates, and gives each induction head's last repeats / text ratio as
    llc.parquet holds it (read with pandas), its induction heads those head_types.parquet says hold at the end."""
    llc = pd.read_parquet(SHIPPED / "llc.parquet")
    assert set(llc["data"]) == {"train", "text", "repeats", "code"}
    text = written_report(SHIPPED, tmp_path / "out")
    assert "## Can the refined LLCs be trusted? (the refined LLC on the training distribution)" in text
    section = section_of(text, "## The refined LLC under each distribution")
    assert "The SGLD loss was taken on: train, text, repeats, code" in section
    types = pd.read_parquet(SHIPPED / "head_types.parquet")
    held = types[(types["step"] == types["step"].max()) & types["holds"] & (types["type"] == "induction")]
    assert len(held)
    for layer, head in zip(held["layer"], held["head"], strict=True):
        own = llc[(llc["layer"] == layer) & (llc["head"] == head)].pivot(index="step", columns="data", values="llc")
        both = own[["repeats", "text"]].dropna()
        ratio = both["repeats"].iloc[-1] / both["text"].iloc[-1]
        line = next(x for x in section.splitlines() if x.startswith(f"- L{layer} H{head}: its refined LLC on the probe"))
        assert line.endswith(f"at the last, repeats / text = {ratio:.3g}."), line


def test_the_report_counts_the_negative_estimates_under_every_other_distribution(tmp_path: Path) -> None:
    """induction-d128's trust section judges its training distribution's estimates and then gives, per other
    distribution, how many of its estimates there are and how many are negative, as llc.parquet holds them (counted
    with pandas): a reader sees that repeats and code hold many negative estimates before reading their curves."""
    llc = pd.read_parquet(SHIPPED / "llc.parquet")
    text = written_report(SHIPPED, tmp_path / "out")
    section = section_of(text, "## Can the refined LLCs be trusted?")
    words = {"text": "on held-out text", "repeats": "on the probe's repeated random tokens", "code": "on code"}
    for data, said in words.items():
        rows = llc[llc["data"] == data]
        line = next(x for x in section.splitlines() if x.startswith(f"- The refined LLC {said}: "))
        assert f"{len(rows):,} estimates" in line, line
        negative = int((rows["llc"] < 0).sum())
        assert (f"{negative:,} negative" in line) == (negative > 0), line
    assert not any(x.startswith("- The refined LLC on the training distribution") for x in section.splitlines())
