"""A small fixture writer: the losses lens's and the ablation lens's tables (icl.parquet, position_loss.parquet,
ablation.parquet, head_contexts.parquet) filled with planted values, for the dashboard's and the report's tests.

No model is run: every value is a closed form of the step's index ``t`` (0..S-1 over the store's checkpoints with
statistics), the layer and the head, written down here so that a test can compute what a panel must show by hand.

- ICL scores (nats): text ``-0.05 t`` (se 0.01); probe `PROBE_ICL` by index (se 0.02), falling 1.8 nats from index
  `PROBE_FALL` - 1 to `PROBE_FALL`.
- Ablation (nats, se 0.01 each): probe increase ``0.01 (layer n_heads + head) t / (S - 1)``, but `PROBE_HEAD`'s
  ``3 t / (S - 1)``; text increase ``0.002 (layer n_heads + head) + 0.001 t``, but `TEXT_HEAD`'s ``0.5 + 0.001 t``;
  the ICL scores with a head ablated are the intact scores plus its probe (text) increase.
- Tokens in context at the last checkpoint and at the middle one (`context_steps`): 20 per head, rank r = 1..20 with
  loss increase ``2 - 0.05 r`` (intact loss 1.0); `PROBE_HEAD`'s all on the probe's second copy, every other head's on
  the text; each window is `WINDOW` tokens ``t0 .. t6`` then the target ``X<r>``, and the head's attention from the
  query puts ``0.7`` on the window's token at position 2 and 0.05 on each of the six others (0 on the target).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwatch.analysis.store import open_store
from headwatch.analysis.store.lenses.ablation import ABLATION, HEAD_CONTEXTS
from headwatch.analysis.store.lenses.losses import ICL, POSITION_LOSS
from headwatch.analysis.store.lenses.types import CONTEXT_NGRAMS, FUNCTION_TYPES, HEAD_EMERGENCE, HEAD_TYPES_TABLE
from headwatch.precompute.store.writer import commit_store

PROBE_HEAD = (1, 2)  # the head whose ablation costs the probe most
TEXT_HEAD = (0, 3)  # the head whose ablation costs the text most
PROBE_FALL = 7  # the probe ICL score falls most between index PROBE_FALL - 1 and PROBE_FALL
WINDOW = 8  # tokens in a context's window, the target included
ATTENDED = 2  # the window position the head attends to most


def probe_icl(n: int) -> np.ndarray:
    """The planted probe ICL score at each of ``n`` checkpoints: 0, then -0.05 per checkpoint up to `PROBE_FALL` - 1,
    a fall of 1.8 nats to `PROBE_FALL`, then -0.01 per checkpoint."""
    t = np.arange(n, dtype=np.float64)
    return np.where(t < PROBE_FALL, -0.05 * t, -0.05 * (PROBE_FALL - 1) - 1.8 - 0.01 * (t - PROBE_FALL))


def planted_probe_increase(t: int, layer: int, head: int, *, n_steps: int, n_heads: int) -> float:
    scale = t / max(n_steps - 1, 1)
    return 3.0 * scale if (layer, head) == PROBE_HEAD else 0.01 * (layer * n_heads + head) * scale


def planted_text_increase(t: int, layer: int, head: int, *, n_heads: int) -> float:
    return (0.5 if (layer, head) == TEXT_HEAD else 0.002 * (layer * n_heads + head)) + 0.001 * t


def context_steps(steps: list[int]) -> list[int]:
    """The checkpoints with tokens in context: the middle one and the last."""
    return sorted({steps[len(steps) // 2], steps[-1]})


def add_planted_ablation(path: str | Path, *, contexts: bool = True) -> Path:
    """Give the store at ``path`` the four tables with the planted values above, and meta.json ``losses`` and
    ``ablation`` records; ``contexts=False`` leaves head_contexts.parquet empty of rows."""
    path = Path(path)
    store = open_store(path)
    steps = list(store.meta.done_steps)
    n, n_layers, n_heads = len(steps), store.n_layers, store.n_heads
    forward = store.meta.forward
    seq_len = int(forward.seq_len) if forward is not None else 64
    repeat = int(forward.induction_repeat) if forward is not None else 32
    text_icl = -0.05 * np.arange(n, dtype=np.float64)
    probe = probe_icl(n)

    icl_rows: dict[str, list] = {"step": [], "set": [], "early_loss": [], "late_loss": [], "score": [], "score_sem": []}
    for t, step in enumerate(steps):
        for name, score, se in (("probe", probe[t], 0.02), ("text", text_icl[t], 0.01)):
            icl_rows["step"].append(step)
            icl_rows["set"].append(name)
            icl_rows["early_loss"].append(3.0)
            icl_rows["late_loss"].append(3.0 + score)
            icl_rows["score"].append(float(score))
            icl_rows["score_sem"].append(se)
    icl = pa.table({c: pa.array(v, ICL.schema.field(c).type) for c, v in icl_rows.items()}, schema=ICL.schema)

    pos_rows: dict[str, list] = {"step": [], "set": [], "position": [], "loss_mean": [], "loss_sem": []}
    for step in steps:
        for name, length in (("probe", 2 * repeat), ("text", seq_len)):
            for p in range(1, length):
                pos_rows["step"].append(step)
                pos_rows["set"].append(name)
                pos_rows["position"].append(p)
                pos_rows["loss_mean"].append(3.0 - 0.01 * p)
                pos_rows["loss_sem"].append(0.01)
    position = pa.table(
        {c: pa.array(v, POSITION_LOSS.schema.field(c).type) for c, v in pos_rows.items()}, schema=POSITION_LOSS.schema
    )

    ab: dict[str, list] = {name: [] for name in ABLATION.schema.names}
    for t, step in enumerate(steps):
        for layer in range(n_layers):
            for head in range(n_heads):
                p_inc = planted_probe_increase(t, layer, head, n_steps=n, n_heads=n_heads)
                t_inc = planted_text_increase(t, layer, head, n_heads=n_heads)
                row = dict(
                    step=step,
                    layer=layer,
                    head=head,
                    method="mean",
                    text_increase=t_inc,
                    text_increase_sem=0.01,
                    probe_increase=p_inc,
                    probe_increase_sem=0.01,
                    icl_text=float(text_icl[t]) + t_inc,
                    icl_text_sem=0.01,
                    icl_probe=float(probe[t]) + p_inc,
                    icl_probe_sem=0.02,
                )
                for c, v in row.items():
                    ab[c].append(v)
    ablation = pa.table({c: pa.array(v, ABLATION.schema.field(c).type) for c, v in ab.items()}, schema=ABLATION.schema)

    ctx: dict[str, list] = {name: [] for name in HEAD_CONTEXTS.schema.names}
    attention = [0.05] * (WINDOW - 1) + [0.0]
    attention[ATTENDED] = 0.7
    for step in context_steps(steps) if contexts else []:
        for layer in range(n_layers):
            for head in range(n_heads):
                on_probe = (layer, head) == PROBE_HEAD
                for rank in range(1, 21):
                    position_ = (repeat + 1 + rank) if on_probe else (10 + rank)
                    row = dict(
                        step=step,
                        layer=layer,
                        head=head,
                        rank=rank,
                        set="probe" if on_probe else "text",
                        sequence=rank % 8,
                        position=position_,
                        second_copy=on_probe,
                        start=position_ - WINDOW + 1,
                        target=f"X{rank}",
                        tokens=[f"t{i}" for i in range(WINDOW - 1)] + [f"X{rank}"],
                        attention=list(attention),
                        loss_increase=2.0 - 0.05 * rank,
                        base_loss=1.0,
                    )
                    for c, v in row.items():
                        ctx[c].append(v)
    contexts_table = pa.table(
        {c: pa.array(v, HEAD_CONTEXTS.schema.field(c).type) for c, v in ctx.items()}, schema=HEAD_CONTEXTS.schema
    )
    meta = store.meta.with_record(
        "losses",
        {
            "seq_len": seq_len,
            "induction_repeat": repeat,
            "early": 5,
            "late": seq_len - 2,
            "probe_first": [1, repeat - 1],
            "probe_second": [repeat + 1, 2 * repeat - 1],
            "planted": True,
        },
    ).with_record("ablation", {"method": "mean", "context_steps": context_steps(steps), "planted": True})
    tables = {
        ICL.name: ICL.sorted(icl),
        POSITION_LOSS.name: POSITION_LOSS.sorted(position),
        ABLATION.name: ABLATION.sorted(ablation),
        HEAD_CONTEXTS.name: HEAD_CONTEXTS.sorted(contexts_table),
    }
    # A store that had the ablation lens already holds multigram and other heads decided from its own ablations, which
    # the planted tables replace: they are dropped (the attention types stay), as in a store the types lens has not
    # read the ablations of.
    if (store.meta.types or {}).get("function"):
        for spec in (HEAD_TYPES_TABLE, HEAD_EMERGENCE):
            table = store.read(spec)
            if table is not None:
                tables[spec.name] = table.filter(pc.invert(pc.is_in(table["type"], pa.array(sorted(FUNCTION_TYPES)))))
        tables[CONTEXT_NGRAMS.name] = CONTEXT_NGRAMS.schema.empty_table()
        meta = meta.with_record("types", {k: v for k, v in store.meta.types.items() if k != "function"})
    commit_store(path, meta, tables)
    return path


def induction_boundary_step(path: str | Path) -> int:
    """The stage boundary the ICL sentences place the fall beside, read from the store's own tables with pandas
    (docs/views/timeline.md's rule): of the run's boundaries whose name leads with a rise in induction scores, the
    nearest to the first induction head's emergence (the earlier of two as near)."""
    import pandas as pd

    path = Path(path)
    stages = pd.read_parquet(path / "stages.parquet")
    run = stages[(stages["basis"] == "run") & (stages["stage"] > 0)]
    candidates = [
        int(s) for s, b in zip(run["start_step"], run["boundary"], strict=True) if str(b).startswith("induction scores rise")
    ]
    emergence = pd.read_parquet(path / "head_emergence.parquet")
    first = int(emergence[(emergence["type"] == "induction") & emergence["emergence_step"].notna()]["emergence_step"].min())
    return min(candidates, key=lambda s: (abs(s - first), s))
