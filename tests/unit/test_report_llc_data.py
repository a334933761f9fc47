"""``headwatch report``'s refined LLC under several distributions (`analysis.findings.llc_data`), on a copy of a shipped
induction store given planted estimates on repeats and a planted ablation table, each checked against a plain loop."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwatch.analysis.findings import llc_data
from headwatch.analysis.store import open_store
from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses import TABLES
from headwatch.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "data" / "induction-d128"
HEADS = [(1, 0), (1, 1), (1, 5), (1, 6)]  # its induction heads at the last checkpoint (head_types.parquet)
# i59a's ablation table, as much of it as the finding reads (its declaration: analysis.store.lenses.ablation)
ABLATION = TableSpec(
    name="ablation",
    file="ablation.parquet",
    row="one row per (step, layer, head)",
    about="planted",
    schema=schema_of({"step": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "icl_probe": pa.float64()}),
    docs={"step": "", "layer": "", "head": "", "icl_probe": ""},
    sort=("step", "layer", "head"),
)


def plant_repeats(store: Path) -> pd.DataFrame:
    """Estimates on repeats beside the store's (text): every head's text estimate times 0.5 before the middle
    estimated step and 2 from it on, except L1 H5, twice its text estimate only at the last step."""
    text = pq.read_table(store / "llc.parquet").to_pandas()
    text.insert(1, "data", "text")
    steps = sorted(text["step"].unique())
    middle = steps[len(steps) // 2]
    repeats = text.copy()
    repeats["data"] = "repeats"
    factor = np.where(repeats["step"] >= middle, 2.0, 0.5)
    l1h5 = (repeats["layer"] == 1) & (repeats["head"] == 5)
    factor = np.where(l1h5, np.where(repeats["step"] == steps[-1], 2.0, 0.5), factor)
    repeats["llc"] = repeats["llc"] * factor
    both = pd.concat([text, repeats]).sort_values(["step", "data", "layer", "head"])
    pq.write_table(pa.Table.from_pandas(both, preserve_index=False), store / "llc.parquet")
    return both


def plant_ablation(store: Path, falls: dict[tuple[int, int], int]) -> pd.DataFrame:
    """ICL scores with each head ablated: a slow drift, with a fall of 1 nat at ``falls[head]``'s step."""
    steps = open_store(store).steps
    rows = []
    for t, step in enumerate(steps):
        for layer in range(2):
            for head in range(8):
                fall = falls.get((layer, head))
                score = -0.001 * t - (1.0 if fall is not None and step >= fall else 0.0)
                rows.append((int(step), layer, head, score))
    frame = pd.DataFrame(rows, columns=["step", "layer", "head", "icl_probe"])
    pq.write_table(pa.Table.from_pandas(frame, schema=ABLATION.schema, preserve_index=False), store / "ablation.parquet")
    return frame


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    path = tmp_path / "induction-d128"
    shutil.copytree(SHIPPED, path)
    return path


def test_repeats_over_text_from_which_step(store: Path) -> None:
    both = plant_repeats(store)
    rows = llc_data.repeats_over_text(open_store(store))
    assert rows is not None and [r.head for r in rows] == HEADS
    for r in rows:
        own = both[(both["layer"] == r.head[0]) & (both["head"] == r.head[1])]
        rep = own[own["data"] == "repeats"].set_index("step")["llc"]
        txt = own[own["data"] == "text"].set_index("step")["llc"]
        steps = sorted(rep.index)
        above = [bool(rep[s] > txt[s]) for s in steps]
        want = None  # the first step from which every later one is above (a plain loop)
        for i in range(len(steps)):
            if all(above[i:]):
                want = steps[i]
                break
        assert r.from_step == want and list(r.above) == above
        assert r.last_ratio == pytest.approx(rep[steps[-1]] / txt[steps[-1]])


def test_critical_points_against_the_ablated_icl_score(store: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    both = plant_repeats(store)
    steps = [int(s) for s in open_store(store).steps]
    falls = {(1, 0): steps[20], (1, 1): steps[30], (1, 5): steps[10], (1, 6): steps[40]}
    assert llc_data.critical_against_ablation(open_store(store)) is None  # no ablation table declared here
    monkeypatch.setitem(TABLES, "ablation", ABLATION)
    assert llc_data.critical_against_ablation(open_store(store)) is None  # declared, but the store lacks it
    plant_ablation(store, falls)
    rows = llc_data.critical_against_ablation(open_store(store))
    assert rows is not None
    assert {(r.head, r.other, r.data) for r in rows} == {(h, g, "text") for h in HEADS for g in HEADS if g != h} | {
        (h, g, "repeats") for h in HEADS for g in HEADS if g != h
    }
    for r in rows:
        assert r.fall == falls[r.other]
        curve = both[(both["data"] == r.data) & (both["layer"] == r.head[0]) & (both["head"] == r.head[1])]
        curve = curve.sort_values("step")
        s, v = curve["step"].to_list(), curve["llc"].to_list()
        peaks = [s[i] for i in range(1, len(v) - 1) if v[i] > v[i - 1] and v[i] > v[i + 1]]
        jumps = [v[i] - v[i - 1] for i in range(1, len(v))]
        rise = s[1 + jumps.index(max(jumps))]
        assert r.peaks == peaks and r.rise == rise
        points = sorted(set(peaks) | {rise})
        dist = {p: abs(steps.index(p) - steps.index(r.fall)) for p in points}
        best = min(dist.values())
        assert r.nearest == (min(p for p in points if dist[p] == best), best)
    # the report says both, in words
    assert main(["report", str(store), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    section = text.split("## The refined LLC under each distribution", 1)[1].split("\n## ", 1)[0]
    assert "The SGLD loss was taken on: text, repeats" in section
    assert "L1 H5: its estimate on repeats exceeds its estimate on text at 1 of" in section
    assert f"the ICL score with L1 H6 ablated falls most at step {falls[(1, 6)]:,}" in section


def test_a_shipped_store_says_it_holds_text_only_and_lacks_the_ablation_table(store: Path, tmp_path: Path) -> None:
    assert main(["report", str(store), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    section = text.split("## The refined LLC under each distribution", 1)[1].split("\n## ", 1)[0]
    assert "The SGLD loss was taken on: text only; `--lenses llc --llc-data train,repeats,code` adds the others" in section
    assert "no refined LLCs on both repeats and text" in section
    assert "This store has no ablation table with the ICL score" in section
