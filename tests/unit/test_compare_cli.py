"""``headwatch compare STORE... --out DIR`` (issue 43) on small synthetic stores made here: the Markdown's per-run
table against the store files read with pandas, the SVG figures, the two associations, the scaling section's
words where the sizes are too few; and bad input (one store, stores of different statistics) refused in one line."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.synthetic_store import write_synthetic_store
from headwatch.analysis.across_sizes.joint_clusters import TESTS
from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.types import HEAD_TYPES, HEAD_TYPES_TABLE
from headwatch.cli import main
from tests.app.test_timeline import write_emergence

# name -> (d_model, seed, matrices); two seeds of the middle size
LADDER = {"tiny-d32": (32, 1, ("qk", "ov")), "tiny-d64": (64, 2, ("qk", "ov")), "tiny-d64-seed2": (64, 3, ("qk", "ov"))}
N_LAYERS, N_HEADS = 2, 3
# each run's previous-token heads (layer 0) and induction heads (layer 1) with their emergence steps
EMERGED = {
    "tiny-d32": [(0, 0, "previous_token", 40)],
    "tiny-d64": [(0, 0, "previous_token", 20), (0, 1, "previous_token", 40), (1, 2, "induction", 80)],
    "tiny-d64-seed2": [(0, 1, "previous_token", 10), (1, 0, "induction", 160)],
}


def write_types(path: Path, emerged: list[tuple[int, int, str, int]]) -> None:
    """head_types.parquet (each listed head holds its type from its emergence step on) and head_emergence.parquet."""
    store = open_store(path)
    rows: dict[str, list[object]] = {c: [] for c in HEAD_TYPES_TABLE.schema.names}
    for step in (int(s) for s in store.steps):
        for layer in range(store.n_layers):
            for head in range(store.n_heads):
                for name in HEAD_TYPES:
                    on = any((layer, head, name) == e[:3] and step >= e[3] for e in emerged)
                    values = (step, layer, head, name, 0.5 if on else 0.01, 0.01, 50.0 if on else 1.0, on, on)
                    for c, v in zip(rows, values, strict=True):
                        rows[c].append(v)
    pq.write_table(HEAD_TYPES_TABLE.sorted(pa.table(rows, schema=HEAD_TYPES_TABLE.schema)), path / HEAD_TYPES_TABLE.file)
    write_emergence(path, [(layer, head, name, step, 0.5) for layer, head, name, step in emerged])


def write_ladder(root: Path) -> list[Path]:
    """The LADDER's stores under ``root`` with their head types."""
    paths = []
    for name, (d_model, seed, matrices) in LADDER.items():
        path = root / name
        write_synthetic_store(
            path,
            n_layers=N_LAYERS,
            n_heads=N_HEADS,
            d_head=8,
            d_model=d_model,
            steps=[0, 10, 20, 40, 80, 160, 320],
            tokens_per_step=1000,
            matrices=matrices,
            seed=seed,
            model_id=f"synthetic/{name}",
            overlaps=False,
            duplicate=False,
        )
        write_types(path, EMERGED[name])
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def ladder(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_ladder(tmp_path_factory.mktemp("ladder"))


def test_compare_writes_the_per_run_table_associations_and_figures(ladder: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["compare", *map(str, ladder), "--out", str(out), "--permutations", "99"]) == 0
    text = (out / "compare.md").read_text()
    for name in ("scaling.svg", "clusters.svg"):
        assert ET.parse(out / name).getroot().tag.endswith("svg") and f"]({name})" in text
    for path in ladder:
        meta = json.loads((path / "meta.json").read_text())
        d, inner = meta["model"]["d_model"], meta["model"]["n_heads"] * meta["model"]["d_head"]
        assert not meta["model"]["config"] and "model" not in meta["training"]["config"]  # no d_mlp recorded: 4 d
        params = N_LAYERS * (4 * d * inner + 2 * d * 4 * d)  # q, k, v, o: d x (heads x d_head); the MLP: d x 4d twice
        emergence = pd.read_parquet(path / "head_emergence.parquet")
        first = emergence.groupby("type")["emergence_step"].min()
        prev = f"{int(first['previous_token']):,}"
        induction = f"{int(first['induction']):,}" if "induction" in first else "–"
        n_prev = int((emergence["type"] == "previous_token").sum())
        n_ind = int((emergence["type"] == "induction").sum()) or "–"  # no row of the type: no count
        # run | parameters | layers | heads | d_model | checkpoints | last step | tokens | prev step | prev heads | ind ...
        row = f"| {path.name} | {params:,} | 2 | 6 | {d} | 7 | 320 | 320,000 | {prev} | {n_prev} | {induction} | {n_ind} |"
        assert row in text, row
    # the four tests of each statistic, each corrected by Holm over the four statistics (issue 62)
    for test in TESTS.values():
        assert f"| {test} | D_KL(P(w) \\|\\| Gaussian) (nats) | 2 | 18 | " in text, test
    assert text.count("| 4 statistics |") == 16 and "Holm" in text and "Monte Carlo" in text
    # the three consolidation tables' headers (step, tokens, fraction), then the four tests' rows
    assert text.count("| D_KL(P(w) \\|\\| Gaussian) (nats) | ") == 3 + 4
    # two sizes: no fit, said in words
    assert "first induction emergence, in steps: no fit. 1 model size with this time (1 of 3 runs have no such time)" in text
    assert "N^" not in text.split("## Timescales")[1].split("![")[0].replace("`T ~ N^b`", "")


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("headwatch: error: compare: "), err
    return err


def test_compare_refuses_one_store(ladder: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(capsys, ["compare", str(ladder[0]), "--out", str(tmp_path / "out")])
    assert "at least two stores" in err and not (tmp_path / "out").exists()


def test_compare_refuses_stores_of_different_statistics(
    ladder: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qk_only = tmp_path / "qk-only"
    write_synthetic_store(qk_only, n_layers=2, n_heads=3, d_head=8, d_model=32, n_checkpoints=5, matrices=("qk",), overlaps=False)
    err = _one_line_error(capsys, ["compare", str(ladder[0]), str(qk_only), "--matrix", "ov", "--out", str(tmp_path / "o")])
    assert "qk-only has no ov rows" in err and "same statistics" in err
    frame = pd.read_parquet(qk_only / "heads.parquet").drop(columns=["kl_gauss"])
    frame.to_parquet(qk_only / "heads.parquet")
    err = _one_line_error(capsys, ["compare", str(ladder[0]), str(qk_only), "--out", str(tmp_path / "o")])
    assert "kl_gauss" in err  # the store reader refuses it first
