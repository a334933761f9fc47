"""Is the refined-LLC sampler in a sensible regime? The SGLD loss trace of a few estimates, paired by batch.

For a store with ``llc.parquet``, reruns devinterp's sampler (`devinterp.slt.sampling.sample`) with the
store's settings on a few (checkpoint, head) pairs, keeping its samples, and prints per SGLD step the
loss rise L_b(w_t) - L_b(w*) on that step's own batch (w* the checkpoint; L_b(w*) computed here with
the model on the ids devinterp recorded), averaged over chains: a sound sampler rises and levels off,
a step size too large shows it climbing without bound or diverging. It also recomputes the estimate
by hand, n beta (mean of devinterp's per-token losses - its init loss), and compares it with the
store's row (the same seeds give the same draws).

    python -m benchmarks.llc_regime --store data/shakespeare-pythia-6x8 --source runs/shakespeare-pythia-6x8 \
        --steps 16,1536 --heads 0.0,5.7,model
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from headwatch.analysis.store import Meta, open_store, read_table
from headwatch.analysis.store.lenses.llc import LLC, SamplerSettings
from headwatch.precompute.lenses.attention import load_model
from headwatch.precompute.lenses.llc import head_masks


def stored_llc(meta: Meta, store_path: Path) -> dict[str, Any]:
    """The store's refined-LLC record (``meta.json``); a store without refined LLCs is refused."""
    if meta.llc is None:
        raise SystemExit(f"{store_path} has no refined LLCs: pick a store made with --lenses llc")
    return meta.llc


def stored_llc_table(store_path: Path) -> pd.DataFrame:
    """The store's ``llc.parquet`` as a frame; a store without it is refused."""
    table = read_table(store_path, LLC)
    if table is None:
        raise SystemExit(f"{store_path} has no {LLC.file}: pick a store made with --lenses llc")
    return table.to_pandas()


def sampler_tokens(store_path: Path, source: Path, sampler: SamplerSettings) -> np.ndarray:
    """The store's sampler sequences, rebuilt as the stage built them (and checked against meta.json)."""
    from benchmarks import llc_batched

    stored_llc(open_store(store_path).meta, store_path)  # a store without refined LLCs: said in one line
    return llc_batched.sampler_tokens(store_path, source, sampler)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=Path("data/shakespeare-pythia-6x8"))
    p.add_argument("--source", type=Path, default=Path("runs/shakespeare-pythia-6x8"))
    p.add_argument("--steps", default="16,1536")
    p.add_argument("--heads", default="0.0,5.7,model", help="layer.head pairs, or model")
    p.add_argument("--draws", type=int, default=None, help="a longer chain than the store's (no comparison then)")
    args = p.parse_args()
    from datasets import Dataset
    from devinterp.slt.llc import compute_llc
    from devinterp.slt.lm_loss import compute_per_token_loss
    from devinterp.slt.sampling import sample

    llc = stored_llc(open_store(args.store).meta, args.store)
    sampler = SamplerSettings(**llc["sampler"])
    if args.draws:
        sampler = SamplerSettings(**{**sampler.as_meta(), "draws": args.draws})
    tokens = sampler_tokens(args.store, args.source, SamplerSettings(**llc["sampler"]))
    table = stored_llc_table(args.store)
    dataset = Dataset.from_dict({"input_ids": tokens}).with_format("torch")
    for step in (int(s) for s in args.steps.split(",")):
        model = load_model(args.source / f"step{step}", device="cpu", attn_implementation="sdpa")
        for which in args.heads.split(","):
            layer, head = (-1, -1) if which == "model" else (int(v) for v in which.split("."))
            masks = None if layer < 0 else head_masks(model, layer, head)
            with tempfile.TemporaryDirectory(prefix="llc-regime-") as tmp:
                tree = sample(
                    model,
                    dataset,
                    {},
                    param_masks=masks,
                    **sampler.devinterp_arguments(),
                    device="cpu",
                    output_path=Path(tmp) / "s.zarr",
                )
                ds = tree.dataset
                losses = ds.sampling_loss_micro.values.astype(np.float64)  # (chains, steps, batch, T-1)
                ids = torch.from_numpy(ds.sampling_input_ids_micro.values)  # (chains, steps, batch, T)
                init = float(ds.init_loss.values.mean())
                with torch.no_grad():
                    at_star = np.stack(
                        [
                            [compute_per_token_loss(model, ids[c, t]).double().mean().item() for t in range(ids.shape[1])]
                            for c in range(ids.shape[0])
                        ]
                    )  # (chains, steps)
                rise = losses.mean(axis=(2, 3)) - at_star  # (chains, steps), paired by batch
                by_hand = sampler.n_beta * (losses.mean() - init)
                devinterp_llc = float(compute_llc(tree).llc_mean)
            row = table[(table["step"] == step) & (table["layer"] == layer) & (table["head"] == head)]
            stored = float(row["llc"].iloc[0]) if len(row) and not args.draws else float("nan")
            name = "whole model" if layer < 0 else f"L{layer} H{head}"
            print(
                f"step {step}, {name}: n beta (mean loss - init) by hand {by_hand:.4f}, devinterp {devinterp_llc:.4f}, "
                f"store {stored:.4f}; paired rise per SGLD step (mean over chains): "
                + " ".join(f"{v:+.4f}" for v in rise.mean(axis=0)),
                flush=True,
            )
        del model
    return 0


if __name__ == "__main__":
    sys.exit(main())
