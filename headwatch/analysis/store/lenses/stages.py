"""The stages lens, declared: the run's developmental stages (docs/stages.md).

Its tables, its ``meta.json`` record, and the lens itself. analysis/stages/curve.py and analysis/stages/run.py hold the
rule; `precompute.lenses.stages` makes them.
"""

from __future__ import annotations

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens
from headwatch.analysis.store.records import RecordType

# ------------------------------------------------------------------ its tables

# Developmental stages (analysis/stages/curve.py states the rule for one curve, analysis/stages/run.py how the curves' boundaries
# merge into the run's and are named, docs/stages.md explains it; the `stages` lens, made from llc.parquet,
# eval_loss.parquet and the head types after a run or on an existing store): each curve cut where its trend or its
# rate changes by more than k standard errors, and the run cut at the merged boundaries of all of them. meta.json
# ``stages`` records the rule, its parameters, the noise levels it used and which basis the dashboard shades
# (``primary``).
STAGE_BASES = ("run", "llc", "loss", "copy_loss", "heads_previous_token", "heads_induction", "heads_sink")
STAGES_COLUMN_DOCS: dict[str, str] = {
    "basis": "which curve the stages were read from: run (the run's own, between the merged boundaries of every "
    "curve), llc (the whole-model LLC, llc.parquet), loss or copy_loss (eval_loss.parquet's loss and probe_copy_loss), "
    "heads_<type> (the number of heads holding the type, head_types.parquet) (string)",
    "stage": "0-based position of the stage among its basis's stages (int32)",
    "start_step": "checkpoint that begins the stage (int64; a boundary belongs to both stages it separates)",
    "end_step": "checkpoint that ends the stage (int64)",
    "trend": "llc and heads_<type>: rising, falling or flat; loss and copy_loss: drop, plateau or rise; run: the "
    "trend of the LLC (or, without it, the loss) over the stage (string)",
    "boundary": "what begins the stage: start of training; on a curve, the kind of boundary (LLC peak, LLC "
    "accelerates, LLC slows, loss drop begins, copy loss drop speeds up, ...); on run, what forms in the stage it "
    "opens (induction heads form (L1 H0, ...); no event coincides) (string)",
    "start_value": "the basis curve at start_step (LLC, loss or copy loss in nats per token, number of heads; run: "
    "the LLC's, or the loss's, interpolated on log10(1 + step))",
    "end_value": "the basis curve at end_step",
    "change": "fitted change of the basis curve across the stage (sum of its straight stretches in log10(1 + step)); "
    "run: end_value - start_value",
    "change_se": "standard error of change, from the chains' pooled spread (llc) or the curve's noise (the others); NaN for run",
    "loss_change": "eval loss at end_step minus at start_step, nats per token (NaN without eval_loss.parquet)",
    "support": "run: the curves' boundaries merged into the boundary that begins the stage, as kind (step); ... "
    "(empty for the first stage and for every other basis) (string)",
    "low_step": "the uncertainty of the boundary that begins the stage: the first checkpoint where its cut could sit "
    "with chi2 at most 1 above its best place (profile likelihood, analysis.stages.curve.boundary_evidence); run: that "
    "of the boundary kept from the merged group; -1 for the first stage and in stores made before it (int64)",
    "high_step": "the last such checkpoint (int64; -1 as low_step)",
    "evidence": "the boundary's likelihood ratio, chi2 of one line across it minus chi2 of the two lines cut at it "
    "(run: that of the boundary kept from the merged group, the largest of the group); NaN for the first stage and in "
    "stores made before it",
}
STAGES_SCHEMA = schema_of(
    {"basis": pa.string(), "stage": pa.int32(), "start_step": pa.int64(), "end_step": pa.int64()}
    | {"trend": pa.string(), "boundary": pa.string()}
    | {c: pa.float64() for c in ("start_value", "end_value", "change", "change_se", "loss_change")}
    | {"support": pa.string(), "low_step": pa.int64(), "high_step": pa.int64(), "evidence": pa.float64()}
)
STAGES = TableSpec(
    name="stages",
    file="stages.parquet",
    row="one row per (basis, stage)",
    about="Developmental stages of the run. Each curve (the whole-model LLC, the loss, the probe's copy loss, the "
    "number of heads holding each type) is cut where its trend or its rate changes by more than k standard errors "
    "(a peak, a trough, a start or stop, an acceleration or a slowing); boundaries of several curves within a few "
    "checkpoints are one boundary of the run (basis run), supported by those curves and named after the heads that "
    "form in the stage it opens. Made from llc.parquet, eval_loss.parquet and the head types by the `stages` lens; "
    "the rule and its parameters are in meta.json `stages`.",
    schema=STAGES_SCHEMA,
    docs=STAGES_COLUMN_DOCS,
    sort=("basis", "stage"),
)

# ------------------------------------------------------------------ its record

STAGES_RECORD = RecordType("stages", "how stages.parquet was made (rule, its parameters, the noise levels, primary)")

# ------------------------------------------------------------------ the lens

STAGES_LENS = Lens(
    name="stages",
    title="developmental stages",
    summary="stages where the whole-model LLC, the loss, the probe's copy loss or a count of typed heads changes its "
    "trend or its rate, merged into the run's boundaries and named by the heads that form; made from the store "
    "after a run (docs/stages.md)",
    tables=(STAGES,),
    asked_by="default",
    needs=("store",),
    record=STAGES_RECORD,
    stepwise=False,
)
