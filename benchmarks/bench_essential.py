"""The essential-dynamics lens on a Pythia-160M shape: seconds per checkpoint and bytes per checkpoint.

``python -m benchmarks.bench_essential`` (``PYTHONPATH=.`` from the repository root) saves a GPT-NeoX of Pythia-160M's
shape (12 layers x 12 heads, d_model 768, MLP 3072, vocabulary 50,304) with random weights as float32 safetensors,
builds the lens's sample from random evaluation ids (32 x 256, the forward lens's default sizes; the lens reads the
first 4 sequences and 4 induction-probe sequences, 8 positions each, 128 tokens), and times the stage as the lens
runs it on one checkpoint (`precompute.lenses.essential.essential_work`: load with transformers, two forward passes,
log-softmax, the kept values), after one untimed run. Bytes: ``essential_outputs.parquet`` and ``essential.parquet``
written (zstd, as the store's writer does) for ``--checkpoints`` copies of the outputs with small perturbations
(their PCA included), divided by the number of checkpoints. Prints the figures for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from benchmarks.shapes import pythia_160m_config


def main() -> int:
    from transformers import GPTNeoXForCausalLM

    from headwatch.analysis.store.lenses.essential import ESSENTIAL, ESSENTIAL_OUTPUTS
    from headwatch.precompute.evalset import make_eval_set
    from headwatch.precompute.lenses.essential import EssentialJob, essential_work, make_sample, output_rows, trajectory_rows
    from headwatch.precompute.sources.local import LocalSource
    from headwatch.precompute.sources.revisions import CheckpointRef

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument(
        "--checkpoints", type=int, default=154, help="checkpoints of the store whose bytes are measured (Pythia's 154)"
    )
    args = p.parse_args()
    config = pythia_160m_config()
    with tempfile.TemporaryDirectory(prefix="bench-essential-") as tmp:
        root = Path(tmp)
        torch.manual_seed(0)
        GPTNeoXForCausalLM(config).save_pretrained(root / "run" / "step0")
        ids = np.random.default_rng(0).integers(0, 50304, size=32 * 256 * 2)
        es = make_eval_set(ids, n=32, t=256, vocab_size=50304, text="random ids", text_sha256="", tokenizer="none")
        sample = make_sample(es, 50304)
        job = EssentialJob(sample, device=args.device)
        src = LocalSource(root / "run")
        ref = CheckpointRef(0, "step0", 0)
        name = (
            torch.cuda.get_device_name()
            if args.device == "cuda"
            else f"CPU, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"
        )
        print(
            f"device {name}, torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}; "
            f"{sample.values:,} values per checkpoint"
        )
        essential_work(src, ref, job)  # untimed
        for r in range(args.repeats):
            cpu0, start = time.process_time(), time.perf_counter()
            rows = essential_work(src, ref, job)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
            print(f"run {r}: {wall:.2f} s wall, {cpu:.2f} s CPU per checkpoint")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(f"peak resident memory {peak:.2f} GiB")
        values = np.asarray(rows[ESSENTIAL_OUTPUTS.name]["logprobs"][0].as_py(), dtype=np.float32)
        rng = np.random.default_rng(1)
        outputs = values + np.cumsum(rng.normal(0, 0.01, size=(args.checkpoints, len(values))), axis=0).astype(np.float32)
        steps = np.arange(args.checkpoints, dtype=np.int64) * 1000
        table = pa.concat_tables([output_rows(int(s), o)[ESSENTIAL_OUTPUTS.name] for s, o in zip(steps, outputs, strict=True)])
        pca, _, _ = trajectory_rows(steps, outputs.astype(np.float64))
        for spec, t in ((ESSENTIAL_OUTPUTS, table), (ESSENTIAL, pca)):
            path = root / spec.file
            pq.write_table(t, path, compression="zstd")  # as the store's writer does (precompute/store/writer.py)
            size = path.stat().st_size
            print(
                f"{spec.file}: {size:,} bytes for {args.checkpoints} checkpoints, {size / args.checkpoints:,.0f} per checkpoint"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
