"""What declaring a lens takes: `Lens`, its command-line `Option`, and the cost figures `Seconds` and `StoreBytes`.

A lens is a set of store tables computed from checkpoints. Its declaration (one module of
`analysis.store.lenses`) says what it is called, which tables it writes, how a run asks for it, which
command-line options it takes, what it needs from a checkpoint, its ``meta.json`` record, and what a
checkpoint of it costs (``headwatch plan`` scales the figures with `precompute.costs.time_scale`). Its compute
side is a class of the job (`precompute.job.context.Computation`) whose ``lens`` is the declaration. Everything
here is plain data: no torch, no transformers, no job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from headwatch.analysis.store.format import TableSpec
from headwatch.analysis.store.records import RecordType

AskedBy = Literal["--matrices", "--lenses", "default"]
# What a lens reads from a checkpoint: "tensors" (the weights the fetch reads), "checkpoint" (the
# whole checkpoint folder, loaded with transformers), "store" (the store's own tables), and
# "evaluation" (the store's evaluation sequences, `precompute.evalset`).
Need = Literal["tensors", "checkpoint", "store", "evaluation"]

# What a checkpoint's seconds scale with, from the model measured at: "heads" is layers x heads x d_model^2,
# "layers" layers x d_model^2 (both from Pythia-1.4B); "parameters" the model's parameters (from the
# Pythia-160M shape); "head_pairs" cross-layer head pairs x d_head^2 x d_model (the composition scores'
# products); "all_head_pairs" every unordered pair of heads x d_head^2 x d_model (the similarity's products).
# "llc" the refined LLC's multiply-adds per checkpoint under the run's sampler and sequence length, divided by the
# CPU's efficiency at the model's width (`precompute.costs.llc_work`; from the Pythia-160M shape at the default
# sampler and 256 tokens); "forward" the forward passes' multiply-adds over the sequences the lens evaluates
# (`Seconds.sequences`) of --eval-length tokens, likewise divided (`precompute.costs.forward_work`; from the
# Pythia-160M shape at 32 evaluation sequences of 256 tokens); "ablation" the ablation lens's multiply-adds, every
# head a lane over the evaluation and probe sequences, likewise divided (`precompute.costs.ablation_macs`; from the
# Pythia-160M shape at 32 + 8 sequences of 256 tokens).
TimeScale = Literal["heads", "layers", "parameters", "head_pairs", "all_head_pairs", "llc", "forward", "ablation"]
# What a checkpoint's store bytes are counted in: per-head rows of each per-head matrix, layers, cross-layer
# (ordered) pairs of heads, unordered pairs of heads, or the checkpoint itself (a lens whose rows do not grow
# with the model, such as the essential-dynamics lens's fixed sample).
SizeScale = Literal["head_matrices", "layers", "head_pairs", "all_head_pairs", "checkpoint"]


@dataclass(frozen=True)
class Seconds:
    """Seconds one checkpoint takes, as measured (docs/benchmarks.md "The figures headwatch plan prices with").

    Attributes:
        name: how ``headwatch plan`` and ``headwatch info`` cite it (``COMPOSITION_SECONDS_1_4B``).
        seconds: the figure.
        scale: what it scales with, from the model measured at.
        measured: the section of docs/benchmarks.md that holds the measurement and its command.
        sequences: for ``scale="forward"``, the sequences the lens runs forward given --eval-sequences.
    """

    name: str
    seconds: float
    scale: TimeScale
    measured: str
    sequences: Callable[[int], int] | None = None

    def __post_init__(self) -> None:
        assert (self.scale == "forward") == (self.sequences is not None), (self.name, self.scale)


@dataclass(frozen=True)
class StoreBytes:
    """Store bytes one checkpoint adds to some tables, as measured.

    Attributes:
        tables: the tables it counts.
        bytes: bytes per unit.
        per: the unit.
        unit: the unit in words, as ``headwatch plan`` prints it (``pair of heads (every pair)``).
        measured: the section of docs/benchmarks.md that holds the measurement.
    """

    tables: tuple[TableSpec, ...]
    bytes: float
    per: SizeScale
    unit: str
    measured: str

    @property
    def files(self) -> str:
        """The files it counts, in words (``similarity.parquet and ultrametricity.parquet``)."""
        return " and ".join(spec.file for spec in self.tables)

    def describe(self) -> str:
        return f"{self.files} {self.bytes} B per {self.unit}"


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
    """One lens, declared.

    Attributes:
        name: what a run asks for it by (``--lenses attention``, ``--matrices layers``).
        title: how messages and pages name it (``refined LLC``).
        summary: one line on what it computes, for ``--help``, ``headwatch info`` and the docs.
        tables: the store tables it writes, all together.
        asked_by: ``--lenses`` or ``--matrices`` (asked for by name), ``default`` (computed unless
            turned off: ``off``, by its own options ``--overlap-k 0``, ``--no-embeddings``, ``--no-types``).
        needs: what it reads from a checkpoint.
        record: its ``meta.json`` section, which records how it was made (None: none). A store whose meta
            has it keeps the lens's tables in every commit, asked for or not.
        options: its command-line options (``--<name>-*``; ``--no-<name>`` for a lens on by default).
        make_options: builds its options object from the options' values by field (raising
            ValueError for a value it refuses); None when it has no options.
        every_checkpoint: whether it has rows for every checkpoint with statistics (False: for
            the checkpoints chosen by its options, such as ``--llc-steps``).
        seconds: what a checkpoint of it takes, and what that scales with (``headwatch plan`` prices it;
            None: not measured).
        store_bytes: what a checkpoint of it adds to the store (``headwatch plan``; None: not measured).
        off: for a lens computed by default, whether the run's options (`precompute.settings.RunOptions`)
            turn it off.
        min_checkpoints: checkpoints with statistics a store needs before the lens has rows (2 for
            what compares consecutive checkpoints).
        stepwise: whether the run state holds its tables and replaces them a checkpoint at a
            time (`precompute.job.state.RunState.put`); False for tables with their own bookkeeping
            (the overlaps, kept pair by pair; the embeddings, made from the finished store).
    """

    name: str
    title: str
    summary: str
    tables: tuple[TableSpec, ...]
    asked_by: AskedBy
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
        """Its options with the declared defaults (None when it has none); a run's take the environment's
        defaults too (`precompute.settings.RunOptions.lens_options_for`)."""
        if self.make_options is None:
            return None
        return self.make_options({o.field: o.default for o in self.options})


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


_Options = TypeVar("_Options")


def options_of(cls: type[_Options]) -> Callable[[Mapping[str, Any]], _Options]:
    """A lens's ``make_options`` for an options dataclass whose fields its options set: ``cls`` from the values by
    field (a field absent: its default), refusing what ``cls`` refuses (`ValueError`)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]  # cls is a dataclass, as every lens's options are

    def make(values: Mapping[str, Any]) -> _Options:
        return cls(**{k: v for k, v in values.items() if k in names})

    return make
