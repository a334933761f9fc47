"""The lens registry: every lens of the precompute job, declared once.

A lens is a set of store tables computed from checkpoints. Each `Lens` here says, in one
place, what it is called, which tables it writes (`analysis.store.format.TABLES`), how a
run asks for it (``--matrices layers``, ``--lenses attention``, on by default), which
command-line options it takes (``--llc-*``, ``--no-embeddings``), what it needs from a checkpoint,
its ``meta.json`` record (`analysis.store.records`), what a checkpoint of it costs in seconds and
store bytes on the benchmark machine (`precompute.costs`), and where its compute side lives (``computation``: a class implementing
`precompute.context.Computation`, imported only when a run computes the lens).

Everything that used to name lenses one by one iterates over `LENSES` instead: the run
loop (`precompute.run`), the run state and its commits (`precompute.state`), the command
line (`precompute.__main__`, ``headwatch precompute``), ``headwatch info``, ``headwatch
plan`` and the CUDA comparison (tests/integration/test_cuda.py). A lens defined elsewhere joins
with `register_lens` (tests/integration/test_add_lens.py). This module imports neither torch
nor transformers, so ``headwatch info`` reads it with the dashboard's requirements alone.
Adding a lens: docs/precompute.md "Adding a lens".

The per-head matrices (``qk``, ``ov``: ``heads.parquet``) are not a lens: they are what
every store has, computed in the pass over each checkpoint that the lenses join.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from headwatch.analysis.store.format import (
    COMPOSITION,
    EMBEDDINGS,
    ESSENTIAL,
    ESSENTIAL_OUTPUTS,
    FORWARD_TABLES,
    HEAD_EMERGENCE,
    HEAD_TYPES_TABLE,
    LAYERS,
    LLC,
    LLC_CHAINS,
    OVERLAPS,
    SIMILARITY,
    STAGES,
    TABLES,
    ULTRAMETRICITY,
    TableSpec,
)
from headwatch.analysis.store.records import (
    COMPOSITION_RECORD,
    EMBEDDINGS_RECORD,
    ESSENTIAL_RECORD,
    FORWARD_RECORD,
    LLC_RECORD,
    OVERLAPS_RECORD,
    SIMILARITY_RECORD,
    STAGES_RECORD,
    TYPES_RECORD,
    RecordType,
    register_record,
    unregister_record,
)
from headwatch.precompute.costs import Seconds, StoreBytes

AskedBy = Literal["--matrices", "--lenses", "default"]
# What a lens reads from a checkpoint: "tensors" (the weights the fetch reads), "checkpoint" (the
# whole checkpoint folder, loaded with transformers), "store" (the store's own tables), and
# "evaluation" (the store's evaluation sequences, `precompute.evalset`).
Need = Literal["tensors", "checkpoint", "store", "evaluation"]


@dataclass(frozen=True)
class Option:
    """One command-line option of a lens: ``flag`` sets the field ``field`` of the lens's options.

    Attributes:
        flag: the option (``--llc-lr``); it starts with ``--<lens name>-`` (or, for a lens on by default,
            ``--no-<lens name>``; the overlaps keep their ``--overlap-k``).
        field: the attribute of the lens's options it sets (``lr``).
        type: parses the option's text (``float``; ignored for a switch).
        metavar: its placeholder in ``--help``.
        help: what it sets; the default is appended.
        default: its value when not given.
        switch: a flag without a value that sets the field to False (``--no-embeddings``).
        env: the environment variable that gives its default instead (read by `precompute.settings`:
            for a switch, ``0`` turns the field off).
    """

    flag: str
    field: str
    type: Callable[[str], Any]
    metavar: str
    help: str
    default: Any = None
    switch: bool = False
    env: str | None = None


@dataclass(frozen=True)
class Lens:
    """One lens of the precompute job.

    Attributes:
        name: what a run asks for it by (``--lenses attention``, ``--matrices layers``).
        title: how messages and pages name it (``refined LLC``).
        summary: one line on what it computes, for ``--help``, ``headwatch info`` and the docs.
        tables: the store tables it writes, all together.
        asked_by: ``--lenses`` or ``--matrices`` (asked for by name), ``default`` (computed unless
            turned off: ``off``, by its own options ``--overlap-k 0``, ``--no-embeddings``, ``--no-types``).
        computation: ``module:Class`` of its compute side (`precompute.context.Computation`).
        needs: what it reads from a checkpoint.
        record: its ``meta.json`` section, which records how it was made (`analysis.store.records`;
            None: none). A store whose meta has it keeps the lens's tables in every commit, asked for or not.
        options: its command-line options (``--<name>-*``; ``--no-<name>`` for a lens on by default).
        make_options: builds its options object from the options' values by field (raising
            ValueError for a value it refuses); None when it has no options.
        every_checkpoint: whether it has rows for every checkpoint with statistics (False: for
            the checkpoints chosen by its options, such as ``--llc-steps``).
        seconds: what a checkpoint of it took on the benchmark machine, and what that scales with
            (``headwatch plan`` prices it; None: not measured).
        store_bytes: what a checkpoint of it adds to the store (``headwatch plan``; None: not measured).
        off: for a lens computed by default, whether the run's options (`precompute.settings.RunOptions`)
            turn it off.
        min_checkpoints: checkpoints with statistics a store needs before the lens has rows (2 for
            what compares consecutive checkpoints).
        stepwise: whether the run state holds its tables and replaces them a checkpoint at a
            time (`precompute.state.RunState.put`); False for tables with their own bookkeeping
            (the overlaps, kept pair by pair; the embeddings, made from the finished store).
    """

    name: str
    title: str
    summary: str
    tables: tuple[TableSpec, ...]
    asked_by: AskedBy
    computation: str
    needs: tuple[Need, ...] = ()
    record: RecordType | None = None
    options: tuple[Option, ...] = ()
    make_options: Callable[[Mapping[str, Any]], Any] | None = None
    every_checkpoint: bool = True
    seconds: Seconds | None = None
    store_bytes: StoreBytes | None = None
    off: Callable[[Any], bool] | None = None
    min_checkpoints: int = 1
    stepwise: bool = True

    def __post_init__(self) -> None:
        for option in self.options:
            prefixes = (f"--{self.name}-", f"--{self.name.removesuffix('s')}-", f"--no-{self.name}")
            assert option.flag.startswith(prefixes), (self.name, option.flag)

    @property
    def meta_key(self) -> str | None:
        """Its ``meta.json`` section's key (None: it records none)."""
        return self.record.key if self.record is not None else None

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(spec.file for spec in self.tables)

    def in_store(self, path: str | Path) -> bool:
        """Whether the store at ``path`` has every table of the lens."""
        return all((Path(path) / spec.file).is_file() for spec in self.tables)

    def recorded(self, meta: Any) -> bool:
        """Whether ``meta`` (`analysis.store.Meta`) records the lens (its ``meta_key`` section is set)."""
        return self.meta_key is not None and meta.records.get(self.meta_key) is not None

    def asked(self, options: Any) -> bool:
        """Whether a run with ``options`` (`precompute.settings.RunOptions`) computes the lens."""
        if self.asked_by == "--lenses":
            return self.name in options.lenses
        if self.asked_by == "--matrices":
            return self.name in options.matrices
        return not (self.off is not None and self.off(options))

    def default_options(self) -> Any:
        """Its options with the registry's defaults (None when it has none); a run's take the environment's
        defaults too (`precompute.settings.RunOptions.lens_options_for`)."""
        if self.make_options is None:
            return None
        return self.make_options({o.field: o.default for o in self.options})

    def load_computation(self) -> type:
        """The class of its compute side (imports the module, and with it torch)."""
        module, name = self.computation.split(":")
        return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class SamplerSettings:
    """devinterp's SGLD settings for every estimate of a store (``--llc-*``; meta.json ``llc.sampler``).

    The defaults keep the refined-LLC paper's step size 1e-3, n beta 30 and localization 300 (its
    appendix F.2) with 4 chains of 48 burn-in steps and 96 draws: measured against the paper's 4 x 200
    on 12 heads x 3 checkpoints of the reference run (`benchmarks.llc_agreement`, docs/precompute.md),
    the cheapest setting that ranks heads as the long chains do (Spearman 0.94, 0.895 and 1.00 at
    steps 16, 128 and 1536) and without their low bias; the earlier 2 x 8 ranked them with Spearman
    -0.23 at step 16. Burn-in and draws are multiples of the 8 sequences (whole passes).

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
    """

    steps: str | None = None
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    implementation: LlcImplementation = "batched"

    def __post_init__(self) -> None:
        if self.implementation not in LLC_IMPLEMENTATIONS:
            raise ValueError(f"--llc-implementation {self.implementation!r}: expected one of {', '.join(LLC_IMPLEMENTATIONS)}")


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
    )


@dataclass(frozen=True)
class CompositionOptions:
    """The composition lens's options (``--composition-*``).

    Attributes:
        top: keep only the pairs whose source is among the ``top`` highest-scoring sources of its
            target head for q, k or v (`analysis.weights.composition.strongest_sources`); None keeps every pair.
    """

    top: int | None = None

    def __post_init__(self) -> None:
        if self.top is not None and self.top < 1:
            raise ValueError(f"--composition-top {self.top!r}: expected a positive integer (leave it out to keep every pair)")


def composition_options(values: Mapping[str, Any]) -> CompositionOptions:
    """`CompositionOptions` from the ``--composition-*`` values by field.

    Raises:
        ValueError: a top-k below 1.
    """
    return CompositionOptions(top=values.get("top"))


@dataclass(frozen=True)
class SimilarityOptions:
    """The similarity lens's options (``--similarity-*``).

    Attributes:
        tolerance: the ultrametric test's tolerance: a triangle of heads counts as ultrametric when its
            two largest sides differ by at most this share of its spread (`analysis.weights.ultrametric`).
    """

    tolerance: float = 0.1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tolerance) and 0 <= self.tolerance <= 1):
            raise ValueError(f"--similarity-tolerance {self.tolerance!r}: expected a number from 0 to 1")


def similarity_options(values: Mapping[str, Any]) -> SimilarityOptions:
    """`SimilarityOptions` from the ``--similarity-*`` values by field.

    Raises:
        ValueError: a tolerance outside [0, 1].
    """
    return SimilarityOptions(tolerance=values.get("tolerance", SimilarityOptions.tolerance))


@dataclass(frozen=True)
class OverlapsOptions:
    """The overlaps' options (``--overlap-k``).

    Attributes:
        k: leading singular vectors per head whose overlaps are stored (capped at d_head); 0 computes none
            and keeps the store's; None: the store's K, else `analysis.stats.crossings.OVERLAP_K`.
    """

    k: int | None = None


def overlaps_options(values: Mapping[str, Any]) -> OverlapsOptions:
    """`OverlapsOptions` from the ``--overlap-k`` value."""
    return OverlapsOptions(k=values.get("k"))


@dataclass(frozen=True)
class Switch:
    """The options of a lens computed by default whose one option turns it off (``--no-embeddings``).

    Attributes:
        on: whether the run computes it.
    """

    on: bool = True


def switch_options(values: Mapping[str, Any]) -> Switch:
    """`Switch` from the ``--no-<lens>`` value (absent: on)."""
    return Switch(on=bool(values.get("on", True)))


_SAMPLER = SamplerSettings()

LAYERS_LENS = Lens(
    name="layers",
    title="layer matrices",
    summary="every 2-D weight of every block (attention QKV, output, MLP in, gate, out) against its "
    "Marchenko-Pastur law, with weightwatcher's alpha",
    tables=(LAYERS,),
    asked_by="--matrices",
    computation="headwatch.precompute.lenses.layers:LayersComputation",
    needs=("tensors",),
    seconds=Seconds(
        "LAYERS_SECONDS_1_4B",
        88.6,
        "layers",
        'all 96 block matrices, wall, machine idle; docs/benchmarks.md "Whole-layer matrices, one Pythia-1.4B-shaped '
        'checkpoint", bold row',
    ),
    store_bytes=StoreBytes(
        "layers.parquet",
        3536.7,
        "layers",
        "layer",
        "data/shakespeare-pythia-6x8 (GPU-trained, floats byte-stream-split, 2026-11-27): 912,457 B / (43 x 6) layers",
    ),
)
ATTENTION_LENS = Lens(
    name="attention",
    title="forward lens",
    summary="per checkpoint: loss, attention entropy/span/sink/prev-token/induction, layer divergence",
    tables=FORWARD_TABLES,
    asked_by="--lenses",
    computation="headwatch.precompute.lenses.forward:AttentionComputation",
    needs=("checkpoint", "evaluation"),
    record=FORWARD_RECORD,
    seconds=Seconds(
        "FORWARD_SECONDS_160M",
        19.37,
        "forward",
        "wall, 2 threads, machine otherwise idle, mean of 2 runs (2026-11-29; 113.6 on 2026-11-23 under a load of 11 "
        'to 18); docs/benchmarks.md "Performance: the forward-pass lens, seconds per checkpoint", Pythia-160M-shaped row',
    ),
)
LLC_LENS = Lens(
    name="llc",
    title="refined LLC",
    summary="the refined local learning coefficient of every head and the whole model (devinterp's SGLD estimator, "
    "every head of a layer sampled together), at --llc-steps",
    tables=(LLC, LLC_CHAINS),
    asked_by="--lenses",
    computation="headwatch.precompute.lenses.llc:LlcComputation",
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
    ),
    make_options=llc_options,
    every_checkpoint=False,
    seconds=Seconds(
        "LLC_SECONDS_PER_CHECKPOINT_160M",
        90643.0,
        "llc",
        "CPU-seconds per estimated checkpoint at one thread, the batched sampler under the default 4 x (48 + 96) "
        "steps: every head (88,065, implied from a first- and a last-layer head) plus the whole model (2,578, "
        'extrapolated from 2 and 6 steps); docs/benchmarks.md "Performance: the refined LLC, seconds per estimate", '
        "the Pythia-160M shape at the default sampler",
    ),
)
OVERLAPS_LENS = Lens(
    name="overlaps",
    title="singular-vector overlaps",
    summary="the overlaps of each head's K leading singular vectors between consecutive checkpoints, "
    "for the level-crossing view (--overlap-k)",
    tables=(OVERLAPS,),
    asked_by="default",
    computation="headwatch.precompute.lenses.overlaps:OverlapsComputation",
    needs=("tensors",),
    record=OVERLAPS_RECORD,
    store_bytes=StoreBytes(
        "overlaps.parquet",
        478.7,
        "head_matrices",
        "head and matrix",
        "data/shakespeare-pythia-6x8 (GPU-trained, floats byte-stream-split, 2026-11-27): 1,929,913 B / "
        "(42 pairs x 48 x 2) head-matrices, K = 8",
    ),
    options=(
        Option(
            "--overlap-k",
            "k",
            int,
            "K",
            "leading singular vectors per head whose overlaps between consecutive checkpoints are stored, for the "
            "level-crossing view (default: the store's K, else 8; capped at d_head; 0: compute none and keep what "
            "the store has)",
        ),
    ),
    make_options=overlaps_options,
    off=lambda options: options.lens_options_for("overlaps").k == 0,
    min_checkpoints=2,
    stepwise=False,
)
EMBEDDINGS_LENS = Lens(
    name="embeddings",
    title="trajectory-map embeddings",
    summary="UMAP maps of the heads' trajectories, made from the store after a run (--no-embeddings: none)",
    tables=(EMBEDDINGS,),
    asked_by="default",
    computation="headwatch.precompute.lenses.embeddings:EmbeddingsComputation",
    needs=("store",),
    record=EMBEDDINGS_RECORD,
    options=(
        Option(
            "--no-embeddings",
            "on",
            bool,
            "",
            "skip the trajectory-map embeddings",
            True,
            switch=True,
            env="HEADWATCH_EMBEDDINGS",
        ),
    ),
    make_options=switch_options,
    off=lambda options: not options.lens_options_for("embeddings").on,
    stepwise=False,
)

COMPOSITION_LENS = Lens(
    name="composition",
    title="composition scores",
    summary="Q-, K- and V-composition of every pair of heads in different layers, from the weights, "
    "against random heads of the same shapes (--composition-top)",
    tables=(COMPOSITION,),
    asked_by="--lenses",
    computation="headwatch.precompute.lenses.composition:CompositionComputation",
    needs=("tensors",),
    record=COMPOSITION_RECORD,
    options=(
        Option(
            "--composition-top",
            "top",
            int,
            "K",
            "keep only pairs whose source is among the K strongest of its target head for q, k or v "
            "(default: every pair; Pythia-1.4B has 70,656 per checkpoint)",
        ),
    ),
    make_options=composition_options,
    seconds=Seconds(
        "COMPOSITION_SECONDS_1_4B",
        532.6,
        "head_pairs",
        "every cross-layer pair of a Pythia-1.4B-shaped checkpoint's heads, float64, wall, machine shared; "
        'docs/benchmarks.md "Composition scores, one Pythia-1.4B-shaped checkpoint", bold row (run 2)',
    ),
    store_bytes=StoreBytes(
        "composition.parquet",
        13.64,
        "head_pairs",
        "pair of heads (every pair)",
        "one Pythia-1.4B-shaped checkpoint's 70,656 rows (every pair) in 963,766 B (zstd); docs/benchmarks.md "
        '"Composition scores, one Pythia-1.4B-shaped checkpoint". Written before float columns were '
        "byte-stream-split (2026-11-27), which cut the shipped stores' composition.parquet to 0.57 of its size: "
        "an upper bound",
    ),
)
SIMILARITY_LENS = Lens(
    name="similarity",
    title="head similarity",
    summary="how alike every pair of heads is, independently of the residual basis (W_QK and W_OV cosines, "
    "principal angles), and how ultrametric each layer's heads are, against random heads",
    tables=(SIMILARITY, ULTRAMETRICITY),
    asked_by="--lenses",
    computation="headwatch.precompute.lenses.similarity:SimilarityComputation",
    needs=("tensors",),
    record=SIMILARITY_RECORD,
    options=(
        Option(
            "--similarity-tolerance",
            "tolerance",
            float,
            "TOL",
            "a triangle of heads is ultrametric when its two largest sides differ by at most TOL of its spread",
            SimilarityOptions.tolerance,
        ),
    ),
    make_options=similarity_options,
    seconds=Seconds(
        "SIMILARITY_SECONDS_1_4B",
        873.3,
        "all_head_pairs",
        "every unordered pair of a Pythia-1.4B-shaped checkpoint's 384 heads, W_QK and W_OV, float64, wall, machine "
        'shared; docs/benchmarks.md "Head similarity, one Pythia-1.4B-shaped checkpoint"',
    ),
    store_bytes=StoreBytes(
        "similarity.parquet and ultrametricity.parquet",
        30.55,
        "all_head_pairs",
        "unordered pair of heads",
        "one Pythia-1.4B-shaped checkpoint's 73,536 pairs in 2,243,497 B plus 144 ultrametricity rows in 3,189 B "
        '(zstd); docs/benchmarks.md "Head similarity". Written before float columns were byte-stream-split '
        "(2026-11-27), which cut the shipped stores' similarity.parquet to 0.60 of its size: an upper bound",
    ),
)

STAGES_LENS = Lens(
    name="stages",
    title="developmental stages",
    summary="stages where the whole-model LLC, the loss, the probe's copy loss or a count of typed heads changes its "
    "trend or its rate, merged into the run's boundaries and named by the heads that form; made from the store "
    "after a run (docs/stages.md)",
    tables=(STAGES,),
    asked_by="default",
    computation="headwatch.precompute.lenses.stages:StagesComputation",
    needs=("store",),
    record=STAGES_RECORD,
    stepwise=False,
)

ESSENTIAL_LENS = Lens(
    name="essential",
    title="essential dynamics",
    summary="per checkpoint, the log-probabilities of a fixed sample of sequences, positions and tokens; their "
    "trajectory in its leading principal components over checkpoints, with its cusps (docs/stages.md)",
    tables=(ESSENTIAL_OUTPUTS, ESSENTIAL),
    asked_by="--lenses",
    computation="headwatch.precompute.lenses.essential:EssentialComputation",
    needs=("checkpoint", "evaluation"),
    record=ESSENTIAL_RECORD,
    seconds=Seconds(
        "ESSENTIAL_SECONDS_160M",
        3.37,
        "essential",
        "wall, 2 threads, machine otherwise idle, mean of 2 runs (2026-11-29; 36.5 on 2026-11-26 under a load of about "
        '10); docs/benchmarks.md "Essential dynamics, one Pythia-160M-shaped checkpoint"',
    ),
    store_bytes=StoreBytes(
        "essential_outputs.parquet",
        24137.3,
        "checkpoint",
        "checkpoint",
        "the fixed sample's 8,192 float32 log-probabilities (2 kinds x 4 sequences x 8 positions x 128 tokens; a "
        "vocabulary under 128 tokens keeps fewer), byte-stream-split and zstd: 1,206,863 B for the 50 checkpoints "
        "of induction-d128 (built on a GPU by scripts/device-runs.sh, 2026-11-27)",
    ),
)

TYPES_LENS = Lens(
    name="types",
    title="head types",
    summary="previous-token, induction and sink heads at every checkpoint and when each emerged, from the forward "
    "lens's scores against uniform attention; made from the store after a run with --lenses attention (--no-types: none)",
    tables=(HEAD_TYPES_TABLE, HEAD_EMERGENCE),
    asked_by="default",
    computation="headwatch.precompute.lenses.types:TypesComputation",
    needs=("store",),
    record=TYPES_RECORD,
    options=(
        Option(
            "--no-types",
            "on",
            bool,
            "",
            "with --lenses attention: skip the head types (previous-token, induction, sink) made from its scores",
            True,
            switch=True,
        ),
    ),
    make_options=switch_options,
    off=lambda options: not options.lens_options_for("types").on or "attention" not in options.lenses,
    stepwise=False,
)

# Every lens, in the order a run fills them after its pass over the checkpoints (the head types after the
# forward rows they are made from).
LENSES: tuple[Lens, ...] = (
    ATTENTION_LENS,
    LLC_LENS,
    OVERLAPS_LENS,
    LAYERS_LENS,
    COMPOSITION_LENS,
    SIMILARITY_LENS,
    TYPES_LENS,
    EMBEDDINGS_LENS,
    ESSENTIAL_LENS,
    STAGES_LENS,
)
BY_NAME: dict[str, Lens] = {lens.name: lens for lens in LENSES}
# The lenses whose tables the run state replaces a checkpoint at a time.
STEPWISE: tuple[Lens, ...] = tuple(lens for lens in LENSES if lens.stepwise)
# What --lenses may name, and the lenses --matrices may name beside the per-head matrices.
LENS_CHOICES: tuple[str, ...] = tuple(lens.name for lens in LENSES if lens.asked_by == "--lenses")
MATRIX_LENSES: tuple[str, ...] = tuple(lens.name for lens in LENSES if lens.asked_by == "--matrices")


def _index(lenses: tuple[Lens, ...]) -> None:
    """Set `LENSES` and the views derived from it."""
    global LENSES, BY_NAME, STEPWISE, LENS_CHOICES
    LENSES = lenses
    BY_NAME = {lens.name: lens for lens in lenses}
    STEPWISE = tuple(lens for lens in lenses if lens.stepwise)
    LENS_CHOICES = tuple(lens.name for lens in lenses if lens.asked_by == "--lenses")


def register_lens(lens: Lens) -> None:
    """Add a lens defined outside this module (a test's, a plugin's) after the others: its tables join the
    store format (`analysis.store.format.TABLES`) and its record type the ``meta.json`` records
    (`analysis.store.records.RECORDS`), so the run loop, the command line (parsed after this call), the
    reader, ``headwatch info`` and ``headwatch plan`` take it as they take the lenses declared here.
    Undo it with `unregister_lens`.

    Raises:
        ValueError: a lens or table of that name exists, or it is asked for by ``--matrices`` (whose choices
            are fixed when `precompute.settings` is imported).
    """
    if lens.name in BY_NAME or any(spec.name in TABLES for spec in lens.tables):
        raise ValueError(f"lens {lens.name!r}: a lens or table of that name is registered already")
    if lens.asked_by == "--matrices":
        raise ValueError(f"lens {lens.name!r}: a lens added at run time is asked for by --lenses or by default")
    if lens.record is not None:
        register_record(lens.record)
    for spec in lens.tables:
        TABLES[spec.name] = spec
    _index((*LENSES, lens))


def unregister_lens(name: str) -> None:
    """Remove a lens added by `register_lens`, its tables and its record type."""
    lens = BY_NAME[name]
    assert lens not in BUILT_IN, f"{name!r} is declared in precompute.registry; it cannot be removed"
    for spec in lens.tables:
        TABLES.pop(spec.name, None)
    if lens.meta_key is not None:
        unregister_record(lens.meta_key)
    _index(tuple(other for other in LENSES if other.name != name))


BUILT_IN: tuple[Lens, ...] = LENSES
