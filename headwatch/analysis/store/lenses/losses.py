"""The losses lens, declared: the loss at every position of the evaluation sequences and of the induction probe,
and the two in-context-learning scores made from them, per checkpoint with statistics.

Olsson et al. (2022, "In-context learning and induction heads") measure in-context learning as the loss of the
500th token of a 512-token context minus the loss of its 50th, averaged over sequences: how much the loss falls
when the model has seen more of the context. The lens keeps that score on the run's own context of T tokens, with
the two positions scaled to T (`icl_positions`), and a second one on the induction probe (R random tokens repeated
twice, the forward lens's `INDUCTION_SEQUENCES` sequences): the mean loss over the second copy minus over the
first (`probe_positions`), which only copying from the first copy can make negative.

Positions are 0-based: position p is the p-th token of a sequence (0-based), predicted from positions 0..p-1;
position 0 has no loss. Losses are next-token cross-entropies in nats. Standard errors are over sequences: the
sample standard deviation (ddof 1) of the per-sequence values divided by sqrt(number of sequences).

Its tables (position_loss.parquet, icl.parquet), its ``meta.json`` record (``losses``: the positions and sets), and
the lens itself (``--lenses losses``). `precompute.lenses.losses` computes it; ``analysis/attention/losses.py`` holds
the maths.
"""

from __future__ import annotations

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.attention import INDUCTION_SEQUENCES
from headwatch.analysis.store.lenses.declaration import Lens, Seconds
from headwatch.analysis.store.records import RecordType

# The sets of sequences a loss is measured on: the store's evaluation text (N sequences of T tokens) and the
# induction probe (`INDUCTION_SEQUENCES` sequences of 2R tokens, R random tokens repeated twice).
LOSS_SETS = ("text", "probe")

# Olsson et al.'s positions: the 50th and the 500th token (1-based) of a 512-token context.
OLSSON_CONTEXT = 512
OLSSON_EARLY = 50
OLSSON_LATE = 500


def icl_positions(seq_len: int) -> tuple[int, int]:
    """The text ICL score's (early, late) positions, 0-based, for a context of ``seq_len`` tokens.

    Olsson et al.'s 50th and 500th token (1-based) of 512 scaled to T: the k-th token becomes the
    round(k T / 512)-th (halves rounded up), 0-based position round(k T / 512) - 1, kept within 1..T-1.
    T = 512 gives Olsson's 49 and 499; T = 64 gives 5 and 62 (the 6th and the 63rd token).

    Raises:
        ValueError: ``seq_len`` < 3 (no two distinct positions with a loss).
    """
    if seq_len < 3:
        raise ValueError(f"a context of {seq_len} tokens has no two distinct positions with a loss; use T >= 3")

    def scaled(k: int) -> int:
        return min(max((2 * k * seq_len + OLSSON_CONTEXT) // (2 * OLSSON_CONTEXT) - 1, 1), seq_len - 1)

    early, late = scaled(OLSSON_EARLY), scaled(OLSSON_LATE)
    if late <= early:
        early, late = 1, seq_len - 1
    return early, late


def probe_positions(repeat: int) -> tuple[range, range]:
    """The probe's (first copy, second copy) positions, 0-based, that the probe ICL score and the ablation's
    probe loss average over, for R = ``repeat`` random tokens repeated twice.

    First copy: 1..R-1 (position 0 has no loss). Second copy: R+1..2R-1, each predicted from a predecessor in the
    second copy whose first occurrence shows what follows it (position R, the second copy's first token, follows
    the end of the first copy and cannot be predicted by copying). R - 1 tokens each; the second copy's are the
    forward lens's ``probe_copy_loss`` tokens.
    """
    return range(1, repeat), range(repeat + 1, 2 * repeat)


# ------------------------------------------------------------------ its tables

POSITION_LOSS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "set": "which sequences: text (the store's N evaluation sequences of T tokens) or probe (the induction probe's "
    "sequences of R random tokens repeated twice, 2R tokens) (string)",
    "position": "0-based position p of the predicted token, 1..T-1 (text) or 1..2R-1 (probe); on the probe, "
    "p >= R is the second copy (int32)",
    "loss_mean": "next-token cross-entropy of the token at p predicted from positions 0..p-1, mean over the set's "
    "sequences, nats (float32)",
    "loss_sem": "its standard error over sequences, sample std (ddof 1) / sqrt(sequences), nats (float32)",
}
POSITION_LOSS_SCHEMA = schema_of(
    {"step": pa.int64(), "set": pa.string(), "position": pa.int32(), "loss_mean": pa.float32(), "loss_sem": pa.float32()}
)
POSITION_LOSS = TableSpec(
    name="position_loss",
    file="position_loss.parquet",
    row="one row per (step, set, position)",
    about="The loss at every position of the evaluation text and of the induction probe, mean and standard error "
    "over sequences, at every checkpoint with statistics: how the loss falls along the context (in-context "
    "learning) and on the probe's second copy (copying). Present when the store was computed with "
    "`--lenses losses`.",
    schema=POSITION_LOSS_SCHEMA,
    docs=POSITION_LOSS_COLUMN_DOCS,
    sort=("step", "set", "position"),
)

ICL_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "set": "text: Olsson et al.'s score scaled to the context, loss at the late position minus at the early one "
    "(meta.json `losses` early/late; T = 64: positions 62 and 5, 0-based); probe: mean loss over the second copy "
    "(positions R+1..2R-1) minus over the first (1..R-1) (string)",
    "early_loss": "text: mean loss at the early position; probe: mean loss over the first copy's positions, nats (float64)",
    "late_loss": "text: mean loss at the late position; probe: mean loss over the second copy's positions, nats (float64)",
    "score": "late_loss - early_loss, nats (negative: the loss falls with context; float64)",
    "score_sem": "standard error of score over sequences (of the per-sequence differences), nats (float64)",
}
ICL_SCHEMA = schema_of(
    {"step": pa.int64(), "set": pa.string()} | {c: pa.float64() for c in ("early_loss", "late_loss", "score", "score_sem")}
)
ICL = TableSpec(
    name="icl",
    file="icl.parquet",
    row="one row per (step, set)",
    about="The in-context-learning scores at every checkpoint with statistics: on the evaluation text, Olsson et "
    "al.'s late-minus-early token loss with the positions scaled to the run's context; on the induction probe, "
    "the second copy's loss minus the first's. Each with its standard error over sequences. Written with "
    "position_loss.parquet.",
    schema=ICL_SCHEMA,
    docs=ICL_COLUMN_DOCS,
    sort=("step", "set"),
)
LOSSES_TABLES = (POSITION_LOSS, ICL)

# ------------------------------------------------------------------ its record

LOSSES_RECORD = RecordType(
    "losses",
    "how position_loss.parquet and icl.parquet were made (the text ICL score's early and late positions, the "
    "probe's first- and second-copy positions, T and R, the dtype)",
)

# ------------------------------------------------------------------ the lens

LOSSES_LENS = Lens(
    name="losses",
    title="losses by position",
    summary="per checkpoint: the loss at every position of the evaluation text and the induction probe, and the "
    "in-context-learning scores (text: late minus early token; probe: second copy minus first)",
    tables=LOSSES_TABLES,
    asked_by="--lenses",
    needs=("checkpoint", "evaluation"),
    record=LOSSES_RECORD,
    seconds=Seconds(
        "FORWARD_SECONDS_160M",
        19.37,
        "forward",
        'docs/benchmarks.md "The figures headwatch plan prices with", FORWARD_SECONDS_160M',
        sequences=lambda evaluation: evaluation + INDUCTION_SEQUENCES,  # the evaluation sequences and the probe
    ),
)
