"""The refined LLC lens, declared: the refined local learning coefficient of every head and of the whole model
(docs/design-notes.md section 9).

Its tables, its ``meta.json`` record, its options, its cost figures, and the lens itself. analysis/llc/diagnostics.py
holds the diagnostics' rule; `precompute.lenses.llc` computes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa

from headwatch.analysis.store.format import TableSpec, schema_of
from headwatch.analysis.store.lenses.declaration import Lens, Option, Seconds
from headwatch.analysis.store.records import RecordType

# ------------------------------------------------------------------ its tables

# Refined local learning coefficient (docs/design-notes.md section 9; `python -m headwatch.precompute --lenses llc`): devinterp's
# SGLD estimate n beta (E[L_n(w)] - L_n(w*)) restricted to one head's weights, and to the whole model.
# meta.json ``llc`` says with which sampler settings and on which sequences; precompute/lenses/llc.py computes it.
LLC_MODEL = -1  # layer and head of the whole-model row
LLC_WHOLE_MODEL = {"layer": LLC_MODEL, "head": LLC_MODEL}  # the row's key, for `analysis.store.reader.Store.dense`
LLC_DATA_COLUMN = "data"  # the column naming the distribution an estimate's SGLD loss was taken on
LLC_DATA_DOC = (
    "the distribution the SGLD loss was taken on (--llc-data): train, text, repeats, code or a user's file's name; "
    "stores written before the column read as text"
)

# The distributions the SGLD loss can be taken on (``--llc-data``), by name, with what each is. A user's file is
# stored under the name it is given (``NAME=FILE``) or its file name.
LLC_DATA_BUILT_IN: dict[str, str] = {
    "train": "the run's own training distribution: for a run trained here its training batches rebuilt from run.json "
    "through headwatch.training (the windows of its first updates, repeated spans included); for a suite from the "
    "Hub a sample of its training corpus the user passes (train=FILE)",
    "text": "the store's held-out evaluation text (--eval-text; a run trained here: its held-out split)",
    "repeats": "the induction probe's sequences: R random token ids, then the same R again",
    "code": "Python's standard-library sources (the interpreter's own top-level *.py files), as bytes for a byte-level "
    "run, tokenized otherwise",
}
LLC_DATA_NAMES = tuple(LLC_DATA_BUILT_IN)
# How labels and sentences name the distribution an estimate was taken on ("refined LLC on held-out text").
LLC_DATA_WORDS: dict[str, str] = {
    "train": "on the training distribution",
    "text": "on held-out text",
    "repeats": "on the probe's repeated random tokens",
    "code": "on code",
}
DEFAULT_LLC_DATA = "train"  # --llc-data's default, where the run records how it was trained (else text)
STORED_BEFORE_DATA = "text"  # what the estimates of a store written before the data column were taken on


@dataclass(frozen=True)
class LlcDataSpec:
    """One distribution ``--llc-data`` asks for.

    Attributes:
        name: how the store names it (the ``data`` column, meta.json ``llc.data``).
        file: a user's file its sequences come from (UTF-8 text, or a ``.npy`` array of token ids), or None for a
            built-in distribution.
    """

    name: str
    file: str | None = None


def parse_llc_data(value: str | None) -> tuple[LlcDataSpec, ...]:
    """``--llc-data`` (comma-separated: built-in names, ``FILE`` or ``NAME=FILE``) as specs, in order.

    ``train=FILE`` is a sample of the training corpus of a model not trained here; a bare ``FILE`` is named by its
    file name. None gives the default, `DEFAULT_LLC_DATA`.

    Raises:
        ValueError: an empty entry, a name given twice, or a file named like a built-in distribution.
    """
    if value is None:
        return (LlcDataSpec(DEFAULT_LLC_DATA),)
    specs: list[LlcDataSpec] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            raise ValueError(
                f"--llc-data {value!r}: an empty entry; give comma-separated names ({', '.join(LLC_DATA_NAMES)}) or files"
            )
        if "=" in part:
            name, file = (x.strip() for x in part.split("=", 1))
            if not name or not file or name in LLC_DATA_NAMES[1:]:
                raise ValueError(
                    f"--llc-data {part!r}: NAME=FILE needs a name and a file, and only train (a sample of the training "
                    f"corpus) may take a file under a built-in name ({', '.join(LLC_DATA_NAMES[1:])} are made here)"
                )
            specs.append(LlcDataSpec(name, file))
        elif part in LLC_DATA_NAMES:
            specs.append(LlcDataSpec(part))
        else:
            name = part.replace("\\", "/").rsplit("/", 1)[-1]
            specs.append(LlcDataSpec(name, part))
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--llc-data {value!r}: {', '.join(twice)} given twice")
    return tuple(specs)


def default_llc_data(names: Any) -> str:
    """The distribution a reader shows when none is chosen, among ``names`` (a table with a ``data`` column, or
    names): the training distribution when held (the weight-refined LLC), else held-out text, else the first."""
    if isinstance(names, pa.Table):
        names = names[LLC_DATA_COLUMN].unique().to_pylist() if LLC_DATA_COLUMN in names.column_names else []
    held = sorted(set(names))
    for name in (DEFAULT_LLC_DATA, STORED_BEFORE_DATA):
        if name in held:
            return name
    return held[0] if held else STORED_BEFORE_DATA


def llc_data_words(name: str) -> str:
    """How a label names the distribution ``name`` (`LLC_DATA_WORDS`; a user's file: ``on FILE``)."""
    return LLC_DATA_WORDS.get(name, f"on {name}")


def llc_data_order(names: Any) -> list[str]:
    """The distributions among ``names`` (a table with a ``data`` column, or names) in the order readers show them:
    the default first (`default_llc_data`), then the built-in ones in their order, then a user's files by name (none
    for None)."""
    if names is None:
        return []
    if isinstance(names, pa.Table):
        names = names[LLC_DATA_COLUMN].unique().to_pylist() if LLC_DATA_COLUMN in names.column_names else []
    held = set(names)
    if not held:
        return []
    first = default_llc_data(sorted(held))
    return [first] + [n for n in LLC_DATA_NAMES if n in held and n != first] + sorted(held - {first, *LLC_DATA_NAMES})


def data_records(llc: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """meta.json ``llc.data``: per distribution what its sequences are (name, ``tokens_sha256``, sequences, length,
    where they came from, seconds per checkpoint). A store written before distributions were named has only
    ``llc.evaluation`` (held-out text): it reads as one distribution, text, with the record's seconds."""
    if not llc:
        return {}
    if "data" in llc:  # written with distributions named (empty until the first estimate)
        return {name: dict(record) for name, record in (llc["data"] or {}).items()}
    evaluation = llc.get("evaluation")
    if not evaluation:
        return {}
    return {
        STORED_BEFORE_DATA: {
            "description": f"held-out text: {evaluation.get('text', '')}",
            "tokens_sha256": evaluation.get("tokens_sha256"),
            "sequences": evaluation.get("sequences"),
            "seq_len": evaluation.get("seq_len"),
            "seconds": dict(llc.get("seconds") or {}),
        }
    }


LLC_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "data": LLC_DATA_DOC,
    "layer": "layer index, 0-based (int32); -1 on the whole-model row",
    "head": "query-head index within the layer, 0-based (int32); -1 on the whole-model row",
    "llc": "refined LLC n beta (mean SGLD loss - initial loss), averaged over chains: SGLD moves only the head's "
    "Q, K, V rows and output-projection columns (every parameter on the whole-model row)",
    "llc_std": "standard deviation of the per-chain estimates over the chains",
    "init_loss": "loss at the checkpoint's own weights on the sampler's batches, nats per token",
    "params": "number of parameters the sampler moved (int64)",
}
LLC_SCHEMA = schema_of(
    {
        "step": pa.int64(),
        "data": pa.string(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "llc": pa.float64(),
        "llc_std": pa.float64(),
        "init_loss": pa.float64(),
        "params": pa.int64(),
    }
)
LLC = TableSpec(
    name="llc",
    file="llc.parquet",
    row="one row per (step, data, layer, head), plus one whole-model row (layer = head = -1) per step and distribution",
    about="The refined local learning coefficient of every head at a subset of checkpoints (about 8, "
    "log-spaced, unless chosen), and the whole model's LLC beside it, estimated with devinterp's SGLD under the "
    "sampler settings in meta.json `llc`, with the loss taken on the distribution `data` names (meta.json "
    "`llc.data`): on the run's training distribution it is the weight-refined LLC, on any other a data-refined "
    "one. Present when the store was computed with `--lenses llc`.",
    schema=LLC_SCHEMA,
    docs=LLC_COLUMN_DOCS,
    sort=("step", "data", "layer", "head"),
    unit=("step", "data"),
    pick=lambda table: {LLC_DATA_COLUMN: default_llc_data(table)},
)

# Convergence diagnostics of every refined-LLC estimate (analysis/llc/diagnostics.py states the rule that
# flags an estimate from them), one row per chain, written with llc.parquet.
LLC_CHAINS_COLUMN_DOCS: dict[str, str] = {
    "step": "training step of the checkpoint (int64)",
    "data": LLC_DATA_DOC,
    "layer": "layer index, 0-based (int32); -1 on the whole-model rows",
    "head": "query-head index within the layer, 0-based (int32); -1 on the whole-model rows",
    "chain": "chain index, 0-based (int32)",
    "llc": "this chain's estimate n beta (mean sampled loss after the burn-in - initial loss)",
    "first_half": "mean sampled loss over the first half of the passes (blocks of sequences / batch size draws) after the "
    "burn-in, nats per token",
    "second_half": "mean sampled loss over the second half of the passes, nats per token",
    "slope": "least-squares slope of the pass means over the second half, nats per token per draw",
    "half_se": "standard error of second_half - first_half from the spread of the pass means within each half, nats per token",
    "trace": "the sampled loss of every SGLD step, burn-in included, nats per token (float32)",
}
LLC_CHAINS_SCHEMA = schema_of(
    {
        "step": pa.int64(),
        "data": pa.string(),
        "layer": pa.int32(),
        "head": pa.int32(),
        "chain": pa.int32(),
        "llc": pa.float64(),
        "first_half": pa.float64(),
        "second_half": pa.float64(),
        "slope": pa.float64(),
        "half_se": pa.float64(),
        "trace": pa.list_(pa.float32()),
    }
)
LLC_CHAINS = TableSpec(
    name="llc_chains",
    file="llc_chains.parquet",
    row="one row per (step, data, layer, head, chain), the whole-model rows (layer = head = -1) included",
    about="The chains behind every estimate of llc.parquet: each chain's estimate, the mean sampled loss over the "
    "first and second half of its passes over the sampler's sequences, the slope over the second half and the "
    "whole loss trace. The flag "
    "of an estimate (converged, still rising, diverged) follows from them by the rule in "
    "analysis/llc/diagnostics.py. Written with llc.parquet.",
    schema=LLC_CHAINS_SCHEMA,
    docs=LLC_CHAINS_COLUMN_DOCS,
    sort=("step", "data", "layer", "head", "chain"),
    unit=("step", "data"),
    pick=lambda table: {LLC_DATA_COLUMN: default_llc_data(table)},
)

# ------------------------------------------------------------------ its record

LLC_RECORD = RecordType(
    "llc",
    "how llc.parquet was made (sampler settings, evaluation sequences, who sampled and devinterp's version when it did, "
    "restriction, "
    "seconds per step; README 'llc.parquet')",
)

# ------------------------------------------------------------------ its options


@dataclass(frozen=True)
class SamplerSettings:
    """devinterp's SGLD settings for every estimate of a store (``--llc-*``; meta.json ``llc.sampler``).

    The defaults keep the refined-LLC paper's step size 1e-3, n beta 30 and localization 300 (its
    appendix F.2) with 4 chains of 48 burn-in steps and 96 draws: the cheapest setting that ranks heads as
    the paper's 4 x 200 chains do, without their low bias (`benchmarks.llc_agreement`; docs/precompute.md
    gives the comparison). Burn-in and draws are multiples of the 8 sequences (whole passes).

    Attributes:
        lr: SGLD step size epsilon.
        n_beta: n beta, the inverse temperature times the sample size.
        localization: gamma, the pull towards w*.
        chains: independent chains (their spread is ``llc_std``).
        draws: SGLD steps per chain after the burn-in (devinterp's ``num_draws``, one step between draws).
        batch_size: sequences per SGLD step.
        burnin: SGLD steps per chain before the draws (excluded from the estimate).
        seed: devinterp's ``init_seed`` (chain c uses seed + c; the batch order uses seed).
        sequences: how many of the store's evaluation sequences the sampler uses (evenly spaced
            among them); a multiple of ``batch_size``.
    """

    lr: float = 1e-3
    n_beta: float = 30.0
    localization: float = 300.0
    chains: int = 4
    draws: int = 96
    batch_size: int = 1
    burnin: int = 48
    seed: int = 0
    sequences: int = 8

    def __post_init__(self) -> None:
        for name in ("lr", "n_beta", "localization"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--llc-{name.replace('_', '')} {value!r}: expected a positive number")
        for name in ("chains", "draws", "batch_size", "sequences"):
            if getattr(self, name) < 1:
                raise ValueError(f"--llc-{name.replace('_', '-')} {getattr(self, name)!r}: expected a positive integer")
        if self.burnin < 0:
            raise ValueError(f"--llc-burnin {self.burnin!r}: expected 0 or more")
        if self.chains < 2:
            raise ValueError(f"--llc-chains {self.chains}: the spread over chains needs at least 2")
        if self.sequences % self.batch_size:
            raise ValueError(
                f"--llc-sequences {self.sequences} is not a multiple of --llc-batch-size "
                f"{self.batch_size}; every batch must be full"
            )

    @property
    def batches(self) -> int:
        """Batches in one pass over the sampler's sequences (the initial loss averages over them)."""
        return self.sequences // self.batch_size

    @property
    def forward_backward(self) -> int:
        """Forward-backward passes per estimate (the cost): chains x (burn-in + draws)."""
        return self.chains * (self.burnin + self.draws)

    def as_meta(self) -> dict[str, Any]:
        return asdict(self)

    def devinterp_arguments(self) -> dict[str, Any]:
        """The settings as devinterp's ``llc`` and ``sample`` take them (the one place they are mapped)."""
        return {
            "lr": self.lr,
            "n_beta": self.n_beta,
            "localization": self.localization,
            "num_chains": self.chains,
            "num_draws": self.draws,
            "batch_size": self.batch_size,
            "num_burnin_steps": self.burnin,
            "num_init_loss_batches": self.batches,
            "init_seed": self.seed,
        }


# Who samples the refined LLC: the batched sampler (`precompute.lenses.llc_sampler`, every head of a layer
# and its chains in one computation) or devinterp's ``llc``, one estimate at a time (the reference).
LlcImplementation = Literal["batched", "devinterp"]
LLC_IMPLEMENTATIONS: tuple[LlcImplementation, ...] = ("batched", "devinterp")


@dataclass(frozen=True)
class LlcOptions:
    """The refined-LLC lens's options (``--llc-*``).

    Attributes:
        steps: ``all`` or comma-separated steps to estimate (None: about 8, log-spaced,
            `precompute.lenses.llc.default_llc_steps`).
        sampler: devinterp's SGLD settings.
        implementation: ``batched`` (default) or ``devinterp``: the same estimator and settings, sampled
            together or one estimate at a time (meta.json ``llc.implementation``; a store keeps one).
        data: ``--llc-data``, the distributions the SGLD loss is taken on (`parse_llc_data`); None: the run's
            training distribution where its run.json records how it was trained, else held-out text.
    """

    steps: str | None = None
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    implementation: LlcImplementation = "batched"
    data: str | None = None

    def __post_init__(self) -> None:
        if self.implementation not in LLC_IMPLEMENTATIONS:
            raise ValueError(f"--llc-implementation {self.implementation!r}: expected one of {', '.join(LLC_IMPLEMENTATIONS)}")
        parse_llc_data(self.data)

    @property
    def data_specs(self) -> tuple[LlcDataSpec, ...]:
        """The distributions asked for (`parse_llc_data`; the default ``train`` when none was given)."""
        return parse_llc_data(self.data)


def llc_options(values: Mapping[str, Any]) -> LlcOptions:
    """`LlcOptions` from the ``--llc-*`` values by field (absent: the default).

    Raises:
        ValueError: a sampler setting `SamplerSettings` refuses, or an unknown implementation.
    """
    names = {f for f in SamplerSettings.__dataclass_fields__}
    return LlcOptions(
        steps=values.get("steps"),
        sampler=SamplerSettings(**{k: v for k, v in values.items() if k in names}),
        implementation=values.get("implementation") or "batched",
        data=values.get("data"),
    )


_SAMPLER = SamplerSettings()

# ------------------------------------------------------------------ the lens

LLC_LENS = Lens(
    name="llc",
    title="refined LLC",
    summary="the refined local learning coefficient of every head and the whole model (devinterp's SGLD estimator, "
    "every head of a layer sampled together), at --llc-steps, with the loss taken on each distribution of --llc-data",
    tables=(LLC, LLC_CHAINS),
    asked_by="--lenses",
    needs=("checkpoint", "evaluation"),
    record=LLC_RECORD,
    options=(
        Option(
            "--llc-steps",
            "steps",
            str,
            "STEPS",
            "checkpoints to estimate: 'all' or comma-separated steps (default: about 8, log-spaced, first and last included)",
        ),
        Option("--llc-lr", "lr", float, "EPS", "SGLD step size", _SAMPLER.lr),
        Option("--llc-nbeta", "n_beta", float, "NB", "n beta, inverse temperature times sample size", _SAMPLER.n_beta),
        Option("--llc-localization", "localization", float, "GAMMA", "localization strength gamma", _SAMPLER.localization),
        Option("--llc-chains", "chains", int, "C", "chains", _SAMPLER.chains),
        Option("--llc-draws", "draws", int, "D", "draws per chain", _SAMPLER.draws),
        Option("--llc-batch-size", "batch_size", int, "B", "sequences per SGLD step", _SAMPLER.batch_size),
        Option("--llc-burnin", "burnin", int, "S", "burn-in steps per chain, left out of the estimate", _SAMPLER.burnin),
        Option("--llc-seed", "seed", int, "SEED", "sampler seed", _SAMPLER.seed),
        Option(
            "--llc-implementation",
            "implementation",
            str,
            "{batched,devinterp}",
            "who samples: every head of a layer and its chains together, or devinterp one estimate at a time",
            "batched",
        ),
        Option(
            "--llc-sequences",
            "sequences",
            int,
            "S",
            "evaluation sequences the sampler uses, evenly spaced among the N",
            _SAMPLER.sequences,
        ),
        Option(
            "--llc-data",
            "data",
            str,
            "DATA",
            "the distributions the SGLD loss is taken on, comma-separated: train (the run's training distribution; "
            "train=FILE, a sample of it, for a model not trained here), text, repeats, code, FILE or NAME=FILE (UTF-8 "
            "text or a .npy of token ids); each is stored beside the others (default: train where run.json says how "
            "the run was trained, else text)",
        ),
    ),
    make_options=llc_options,
    every_checkpoint=False,
    seconds=Seconds(
        "LLC_SECONDS_PER_CHECKPOINT_160M",
        90643.0,
        "llc",
        'docs/benchmarks.md "The figures headwatch plan prices with", LLC_SECONDS_PER_CHECKPOINT_160M',
    ),
)
