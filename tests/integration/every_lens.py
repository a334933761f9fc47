"""A small run with every registered lens, and the table-by-table comparison of two of its stores.

`every_lens_argv` builds the command line from the lenses (`analysis.store.lenses.LENSES`): every lens
asked for by name, every matrix, the default lenses on, each lens's options from `SMALL` (so that the
refined LLC takes seconds); a lens added later joins with its defaults. `lens_files` says which files
the store must then hold, and `compare_stores` compares two stores table by table, column by column:
byte for byte where ``exact`` (one machine, one device), else within the tolerances a GPU's float32
products allow. Used by the registry's byte-identity test (tests/integration/test_lens_registry.py) and
by the CUDA comparison (tests/integration/test_cuda.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from headwatch.analysis.store.format import HEADS, MATRICES
from headwatch.analysis.store.lenses import LENSES

# Each lens's options for a run of seconds: the forward lens's evaluation set and the refined LLC's chains.
EVALUATION = ("--eval-sequences", "4", "--eval-length", "32")
SMALL: dict[str, tuple[str, ...]] = {
    "llc": (
        "--llc-draws",
        "2",
        "--llc-chains",
        "2",
        "--llc-burnin",
        "0",
        "--llc-sequences",
        "4",
        "--llc-batch-size",
        "2",
        "--llc-steps",
        "0,2,16",
    ),
}
# Columns drawn by SGLD: another random stream on another device, so only finite there.
SAMPLED = {
    "llc": {"llc", "llc_std"},
    "llc_chains": {"llc", "first_half", "second_half", "slope", "half_se", "trace"},
}
# Rows read off sampled columns: the stages of the whole-model LLC curve and the run's, whose boundaries and trend
# the LLC's take part in (those of the loss, the copy loss and the counts of heads are compared).
DRAWN_ROWS = {"stages": lambda frame: frame[~frame["basis"].isin(["llc", "run"])].reset_index(drop=True)}


def every_lens_argv(*, llc_steps: str = "0,2,16") -> list[str]:
    """``python -m headwatch.precompute`` options that compute every registered lens (the embeddings when the
    environment lets them: HEADWATCH_EMBEDDINGS)."""
    argv = ["--matrices", ",".join((*MATRICES, *LENSES.matrix_choices))]
    if any("evaluation" in lens.needs for lens in LENSES):
        argv += EVALUATION
    for lens in LENSES:
        if lens.asked_by == "--lenses":
            argv += ["--lenses", lens.name]
        options = list(SMALL.get(lens.name, ()))
        if "--llc-steps" in options:
            options[options.index("--llc-steps") + 1] = llc_steps
        argv += options
    return argv


def lens_files(*, embeddings: bool) -> set[str]:
    """The files a store made with `every_lens_argv` holds: heads.parquet, meta.json and every lens's tables."""
    skipped = set() if embeddings else {"embeddings"}
    return {HEADS.file, "meta.json"} | {spec.file for lens in LENSES for spec in lens.tables if lens.name not in skipped}


def compare_stores(a: Path, b: Path, *, exact: bool) -> list[str]:
    """Compare two stores' tables (every ``*.parquet``) and return their names.

    ``exact``: every file byte for byte. Otherwise column by column, ``b`` against the reference ``a``:
    floats to 1e-3 relative (1e-5 absolute; histogram masses 0.05: an entry may cross a bin edge), lists
    element by element, other columns equal, the SGLD-drawn columns (`SAMPLED`) only finite where the reference's
    are, and the rows
    read off them (`DRAWN_ROWS`) left out.

    Raises:
        AssertionError: naming the table and column that differ.
    """
    tables = sorted(p.name for p in a.glob("*.parquet"))
    assert tables == sorted(p.name for p in b.glob("*.parquet")), (tables, sorted(p.name for p in b.glob("*.parquet")))
    for name in tables:
        if exact:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
        else:
            _compare_table(name.removesuffix(".parquet"), a / name, b / name)
    return tables


def _compare_table(table: str, reference: Path, other: Path) -> None:
    x_all, y_all = pq.read_table(reference).to_pandas(), pq.read_table(other).to_pandas()
    if table in DRAWN_ROWS:
        x_all, y_all = DRAWN_ROWS[table](x_all), DRAWN_ROWS[table](y_all)
    assert list(x_all.columns) == list(y_all.columns) and len(x_all) == len(y_all), table
    for column in x_all.columns:
        x, y = x_all[column], y_all[column]
        if column in SAMPLED.get(table, set()):
            # finite where the reference is (a chain of few draws has no halves: NaN on both devices)
            fx, fy = (np.concatenate([np.asarray(v, np.float64).ravel() for v in c]) if len(c) else np.zeros(0) for c in (x, y))
            assert np.array_equal(np.isfinite(fx), np.isfinite(fy)), (table, column)
            continue
        if len(x) and isinstance(x.iloc[0], (list, np.ndarray)) and any(isinstance(e, str) for v in x for e in v):
            assert [list(v) for v in x] == [list(v) for v in y], f"{table}.{column}"  # decoded tokens: equal
        elif len(x) and isinstance(x.iloc[0], (list, np.ndarray)):
            fx = np.concatenate([np.asarray(v, np.float64) for v in x])
            fy = np.concatenate([np.asarray(v, np.float64) for v in y])
            atol = 0.05 if "hist" in column else 1e-5  # a histogram mass: a few entries across an edge
            np.testing.assert_allclose(fy, fx, rtol=1e-3, atol=atol, err_msg=f"{table}.{column}")
        elif pd.api.types.is_float_dtype(x.dtype):
            np.testing.assert_allclose(y.to_numpy(), x.to_numpy(), rtol=1e-3, atol=1e-5, err_msg=f"{table}.{column}")
        else:
            assert x.tolist() == y.tolist(), f"{table}.{column}"
