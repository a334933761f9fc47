"""Precompute settings: defaults and environment variables are read here and nowhere else.

`RunOptions` is what the user asked for (the command line, or a caller of
`precompute.job.run.run_precompute`); `resolve_settings` turns it, the source and the
store into the `StoreSettings` a run computes with. The resolved settings are written
into every store's ``meta.json`` under ``settings`` so each figure can be traced
to how it was made.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any, Literal

from headwatch.analysis.stats.crossings import OVERLAP_K

# the store's per-head matrices (the same as families.family.HEAD_MATRICES), from the torch-free store
# format: `headwatch info` reads these defaults with only the dashboard's requirements installed
from headwatch.analysis.store.format import MATRICES as HEAD_MATRICES
from headwatch.analysis.store.lenses import LENSES
from headwatch.analysis.store.lenses.declaration import Option
from headwatch.precompute.evalset import EVAL_LENGTH, EVAL_SEQUENCES

DeviceName = Literal["auto", "cpu", "cuda"]
ExecutorName = Literal["local", "ray"]
LensName = str  # one of `precompute.LENSES.choices`

# Environment variables a Ray task needs as the driver has them: where the Hub is, how to
# reach it (token, offline mode, cache) and the job's own knobs.
FORWARDED_ENV_PREFIXES = ("HF_", "HUGGING_FACE_", "HEADWATCH_")


# What `--matrices` may name: the per-head products (heads.parquet rows, `families.family.HEAD_MATRICES`)
# and the lenses asked for by --matrices (the whole-layer weight matrices). Default: all of them.
MATRIX_CHOICES = (*HEAD_MATRICES, *LENSES.matrix_choices)
DEFAULT_MATRICES = MATRIX_CHOICES


def matrices_option(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``--matrices`` as given (``"qk,ov"`` or a sequence) -> the names, in `MATRIX_CHOICES` order.

    Raises:
        ValueError: an unknown or empty name, or nothing named.
    """
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else [str(n) for n in value]
    unknown = [n for n in names if n not in MATRIX_CHOICES]
    if unknown or not names:
        raise ValueError(
            f"--matrices {','.join(names)!r}: unknown {unknown or 'empty list'}; "
            f"give a comma-separated subset of {','.join(MATRIX_CHOICES)}"
        )
    return tuple(m for m in MATRIX_CHOICES if m in names)


_DEVICES: dict[str, DeviceName] = {"auto": "auto", "cpu": "cpu", "cuda": "cuda"}


def default_device() -> DeviceName:
    """The default of --device: HEADWATCH_DEVICE, else ``auto``."""
    value = os.environ.get("HEADWATCH_DEVICE", "auto")
    if value not in _DEVICES:
        raise ValueError(f"$HEADWATCH_DEVICE={value!r}: expected one of {', '.join(_DEVICES)}")
    return _DEVICES[value]


def option_default(option: Option) -> Any:
    """A lens option's default: its environment variable's value when it names one and it is set (a switch
    is off at ``0``: HEADWATCH_EMBEDDINGS=0 skips the embeddings, which need umap-learn and take tens of
    seconds to compile on first use), else its declared default.

    Raises:
        ValueError: the variable's value does not parse.
    """
    value = os.environ.get(option.env) if option.env else None
    if value is None:
        return option.default
    if option.switch:
        return value != "0"
    try:
        return option.type(value)
    except ValueError:
        raise ValueError(f"${option.env}={value!r}: not a value of {option.flag}") from None


def default_ray_address() -> str | None:
    """The default of --ray-address: RAY_ADDRESS (``auto`` finds a cluster running on this
    machine), else None: start a local cluster."""
    return os.environ.get("RAY_ADDRESS") or None


def forwarded_environment() -> dict[str, str]:
    """The driver's environment variables a Ray task is given (`FORWARDED_ENV_PREFIXES`)."""
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV_PREFIXES)}


def ray_die_once_marker() -> str | None:
    """A test hook, HEADWATCH_RAY_DIE_ONCE=PATH: the first Ray task to find PATH absent creates it
    and kills its own worker process mid-task (so that Ray retries the task)."""
    return os.environ.get("HEADWATCH_RAY_DIE_ONCE") or None


def _env_number(name: str, default: str, kind: type) -> Any:
    value = os.environ.get(name, default)
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"${name}={value!r} is not a {kind.__name__}") from None


@dataclass(frozen=True)
class FetchSettings:
    """How checkpoints are fetched from the Hub; defaults from the environment variables in brackets,
    read when the settings are made.

    Attributes:
        retries: attempts per request before the run stops [HEADWATCH_HUB_RETRIES, 5].
        backoff_s: wait before the first retry, doubling after each [HEADWATCH_HUB_BACKOFF, 1.0].
        timeout_s: seconds without progress before a request counts as failed.
        range_merge_gap: two byte ranges closer than this many bytes are fetched as one
            [HEADWATCH_RANGE_MERGE_GAP, 4 MiB]. Reading through a gap beats a round trip when
            the gap transfers faster than a request's latency (4 MiB at 100 MB/s is ~40 ms).
            The default merges Pythia's interleaved V rows: one range per layer. 0 fetches
            exactly the Q and K rows.
        concurrency: byte ranges fetched in parallel [HEADWATCH_FETCH_CONCURRENCY, 4].
    """

    retries: int = field(default_factory=lambda: _env_number("HEADWATCH_HUB_RETRIES", "5", int))
    backoff_s: float = field(default_factory=lambda: _env_number("HEADWATCH_HUB_BACKOFF", "1.0", float))
    timeout_s: float = 60.0
    range_merge_gap: int = field(default_factory=lambda: _env_number("HEADWATCH_RANGE_MERGE_GAP", str(4 << 20), int))
    concurrency: int = field(default_factory=lambda: _env_number("HEADWATCH_FETCH_CONCURRENCY", "4", int))


@dataclass(frozen=True)
class RayOptions:
    """How checkpoints are computed on a Ray cluster (``--executor ray``).

    Attributes:
        address: the cluster to join (``auto``, ``ray://HOST:10001`` or ``HOST:6379``)
            [RAY_ADDRESS]; None starts a cluster on this machine. A process already
            connected (``ray.init`` called) uses its cluster.
        cpus_per_task: CPUs a task declares and the torch threads it computes with. Default:
            the driver's torch threads, what the local executor computes with; the spectral
            columns depend on the thread count in their last bits, so another value gives a
            store that is not bit-identical to a local run's.
        max_in_flight: most tasks submitted and not yet committed (each result the driver
            holds is one checkpoint's rows and singular vectors). Default: twice the tasks
            the cluster can run at once, at least 2.
        max_retries: attempts after a task's worker process dies, before the run stops.
    """

    address: str | None = field(default_factory=default_ray_address)
    cpus_per_task: int | None = None
    max_in_flight: int | None = None
    max_retries: int = 3


@dataclass(frozen=True)
class StoreSettings:
    """How a store is computed. Everything here lands in meta.json."""

    source: str
    device: str  # resolved: "cpu" or "cuda"
    dtype: str = "float32"  # dense product and element-wise statistics
    spectrum_dtype: str = "float64"  # QR core and its SVD
    chunk_elements: int = 2**26  # dense entries per work buffer
    tokens_per_step: int | None = None
    source_kind: Literal["local", "hub"] = "local"
    revisions: tuple[str, ...] | None = None  # --revisions, as given
    every: int | None = None  # --every
    fetch: FetchSettings | None = None  # Hub sources only
    overlap_k: int = OVERLAP_K  # leading singular vectors per head for the overlaps (0: none); capped at d_head
    matrices: tuple[str, ...] = DEFAULT_MATRICES  # --matrices, plus the per-head matrices the store already had
    lenses: tuple[str, ...] = ()  # forward-pass lenses (--lenses); what they ran on is meta.json ``forward``

    @property
    def layers(self) -> bool:
        """Whether the run computes the whole-layer matrices (``layers.parquet``)."""
        return "layers" in self.matrices

    def as_meta(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def head_matrices(self) -> tuple[str, ...]:
        """The per-head products this run computes (``qk``, ``ov``): heads.parquet rows of every checkpoint."""
        return tuple(m for m in self.matrices if m in HEAD_MATRICES)


@dataclass(frozen=True)
class RunOptions:
    """What a precompute run is asked to do (the command line's options).

    Attributes:
        device: ``auto``, ``cpu`` or ``cuda`` [HEADWATCH_DEVICE, auto].
        model_id: name recorded in meta.json (default: the folder name or repo id).
        tokens_per_step: tokens per optimizer step, for ``tokens`` (default: ``run.json``'s value
            for a run trained here, the source's own default (Pythia: 2,097,152), else unknown).
        revisions: only these checkpoints, comma-separated (named ones the source lacks fail as ``missing``).
        every: only steps that are multiples of this.
        matrices: what to compute (`MATRIX_CHOICES`; ``--matrices``): ``qk`` and ``ov`` per head,
            ``layers`` the whole-layer weight matrices. The per-head matrices a store already has are
            computed as well, so that every checkpoint has rows for each.
        progress: a progress bar on stderr.
        fetch: Hub fetch settings (default: from the environment).
        token: Hub token (default: the logged-in user's, if any).
        executor: where each checkpoint is computed: ``local`` (here, one fetched ahead) or
            ``ray`` (a task per checkpoint on a Ray cluster; the stores are identical).
        ray: the Ray executor's options.
        lenses: lenses to compute by name (`precompute.LENSES.choices`: ``attention`` per
            checkpoint; ``llc``, the refined LLC of every head at chosen checkpoints); default none.
        eval_text: the lenses' evaluation text, a UTF-8 file (default: the held-out split of a run
            trained here).
        eval_sequences, eval_length: N sequences of T tokens (defaults 32 x 256).
        lens_options: each lens's options by lens name, as its options object (``{"llc": LlcOptions(...)}``) or
            as values by field (``{"embeddings": {"on": False}}``, ``{"overlaps": {"k": 0}}``); what is not
            given takes its default (`lens_options_for`). The lenses on by default have options too:
            ``overlaps`` (``k``, ``--overlap-k``), ``embeddings`` and ``types`` (``on``, ``--no-embeddings``
            [HEADWATCH_EMBEDDINGS], ``--no-types``).
        follow: the source may still be training (`precompute.follow`): only its complete checkpoints are
            read. Not recorded: a followed run's store is the store of a run over the finished folder.
    """

    device: DeviceName = field(default_factory=default_device)
    model_id: str | None = None
    tokens_per_step: int | None = None
    revisions: str | None = None
    every: int | None = None
    matrices: tuple[str, ...] = DEFAULT_MATRICES
    progress: bool = True
    fetch: FetchSettings = field(default_factory=FetchSettings)
    token: str | bool | None = None
    executor: ExecutorName = "local"
    ray: RayOptions = field(default_factory=RayOptions)
    lenses: tuple[LensName, ...] = ()
    eval_text: str | None = None
    eval_sequences: int = EVAL_SEQUENCES
    eval_length: int = EVAL_LENGTH
    lens_options: Mapping[str, Any] = field(default_factory=dict)
    follow: bool = False

    def lens_options_for(self, name: str) -> Any:
        """The options of the lens ``name``: as given in `lens_options` (an options object, or values by field
        completed with the defaults), else its defaults (`option_default`).

        Raises:
            ValueError: a value the lens refuses.
        """
        lens = LENSES.by_name[name]
        given = self.lens_options.get(name)
        if given is not None and not isinstance(given, Mapping):
            return given
        if lens.make_options is None:
            return None
        return lens.make_options({o.field: option_default(o) for o in lens.options} | dict(given or {}))


def resolve_settings(
    options: RunOptions,
    *,
    source: str,
    source_kind: Literal["local", "hub"],
    fetch: FetchSettings | None,
    device: str,
    d_head: int,
    run_tokens_per_step: int | None,
    source_tokens_per_step: int | None,
    stored_overlap_k: int,
    revisions: tuple[str, ...] | None,
    stored_matrices: tuple[str, ...] = (),
) -> StoreSettings:
    """The settings of a run, from its options and what the source and the store say.

    Args:
        options: what was asked.
        source, source_kind: the source's name and kind, as recorded.
        fetch: the network settings the source uses (None for sources that fetch nothing).
        device: the resolved device (``cpu`` or ``cuda``).
        d_head: the model's head width (caps K).
        run_tokens_per_step: what the run's ``run.json`` says (a run trained here), else None.
        source_tokens_per_step: the source's own default (Pythia: 2,097,152), else None.
        stored_overlap_k: K of the store's overlaps (0 when it has none).
        revisions: the requested revisions as parsed (None: all).
        stored_matrices: the per-head matrices the store has rows for (empty for a new store).

    Raises:
        ValueError: ``options.matrices`` names an unknown matrix, or no per-head matrix for a store
            that has none yet (heads.parquet needs qk or ov).
    """
    asked_k = options.lens_options_for("overlaps").k
    k = asked_k if asked_k is not None else (stored_overlap_k or OVERLAP_K)
    matrices = matrices_option(tuple(options.matrices) + tuple(m for m in stored_matrices if m in HEAD_MATRICES))
    if not any(m in HEAD_MATRICES for m in matrices):
        raise ValueError(
            f"--matrices {','.join(options.matrices)}: a store needs a per-head matrix ({' or '.join(HEAD_MATRICES)}); add one"
        )
    return StoreSettings(
        source=source,
        device=device,
        tokens_per_step=options.tokens_per_step or run_tokens_per_step or source_tokens_per_step,
        source_kind=source_kind,
        revisions=revisions,
        every=options.every,
        fetch=fetch,
        overlap_k=min(max(k, 0), d_head),
        matrices=matrices,
        lenses=tuple(options.lenses),
    )


def software_versions() -> dict[str, str]:
    """Versions of the libraries that shape the numbers, for meta.json."""
    out = {"python": platform.python_version()}
    for name in ("torch", "numpy", "safetensors", "pyarrow", "transformers", "huggingface_hub", "devinterp"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out
