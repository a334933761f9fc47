"""``headwatch plan SOURCE``: what a precompute run would do, said before it runs.

The checkpoints come from the job's own source interface (`precompute.sources.resolve.open_source`,
`CheckpointSource.list`, `precompute.sources.revisions.select`), so a plan lists what a run would
take. Bytes: for a local folder, the tensors the run reads (`tensors_to_read`, sizes from the
safetensors headers) and the weight files it hashes; for a Hub model, the tensors' sizes from the
config's geometry (the job fetches only their byte ranges). Time and store size: the recorded
benchmark figures of `precompute.costs` and of each lens's declaration, scaled to this model as printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from headwatch.units import human_bytes

EXIT_OK, EXIT_USAGE, EXIT_NETWORK = 0, 2, 3
# bytes per element of a config's torch_dtype / dtype
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``plan``'s options: the ones of ``python -m headwatch.precompute`` that change what a run does."""
    from headwatch.analysis.store.lenses import LENSES
    from headwatch.precompute.settings import DEFAULT_MATRICES, MATRIX_CHOICES

    p.add_argument("source", metavar="SOURCE", help="a folder of step<N>/ checkpoint folders, or a Hub model id")
    p.add_argument(
        "--matrices",
        default=",".join(DEFAULT_MATRICES),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(MATRIX_CHOICES)} (default: all)",
    )
    p.add_argument(
        "--lenses",
        choices=LENSES.choices,
        action="append",
        default=None,
        help=f"{' and/or '.join(LENSES.choices)}; repeat",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--revisions", default=None, help="only these checkpoints, comma-separated (step0,step1000)")
    which.add_argument("--every", type=int, default=None, metavar="N", help="only steps that are multiples of N")
    p.add_argument("--out", default=None, metavar="STORE", help="the store the run would write or resume")
    # the options that change what a lens costs: the evaluation length (the forward lenses' and the sampler's
    # sequences), the refined LLC's checkpoints and sampler, and every other lens's options, as the job takes them
    from headwatch.precompute import evalset
    from headwatch.precompute.__main__ import add_lens_options

    evalset.add_arguments(p, when="with --lenses: ")
    add_lens_options(p)


@dataclass(frozen=True)
class CheckpointBytes:
    """What one checkpoint costs to read: ``tensors`` bytes of the tensors the run uses, ``hashed``
    bytes of the weight files it hashes (local folders: all of them), ``estimated`` when from the
    config's geometry rather than the files."""

    tensors: int
    hashed: int
    estimated: bool = False


def local_bytes(folder: Path, shape, *, matrices: tuple[str, ...], layers: bool) -> CheckpointBytes:
    """Bytes a run reads from one local checkpoint folder (safetensors headers; .bin files are opened)."""
    from headwatch.precompute.sources.checkpoints import tensors_to_read, weight_files
    from headwatch.precompute.sources.weights import tensor_names

    files = weight_files(folder)
    where = tensor_names(files)
    names = tensors_to_read(shape, where, matrices=matrices, layers=layers)
    return CheckpointBytes(tensors=sum(tensor_nbytes(where[n], n) for n in names), hashed=sum(f.stat().st_size for f in files))


def tensor_nbytes(path: Path, name: str) -> int:
    """Bytes of one stored tensor: its shape times its dtype's size (header only for safetensors)."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(path, framework="numpy") as f:
            sl = f.get_slice(name)
            count = 1
            for n in sl.get_shape():
                count *= n
            size = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "I8": 1, "BOOL": 1}
            return count * size[sl.get_dtype()]
    import torch

    t = torch.load(path, weights_only=True, mmap=True, map_location="cpu")[name]
    return t.numel() * t.element_size()


def geometry_bytes(shape, config: dict, *, matrices: tuple[str, ...], layers: bool) -> CheckpointBytes:
    """Bytes of the per-head factors from the geometry alone (W_Q, W_K; W_V, W_O), every layer."""
    itemsize = DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype") or "float32"), 4)
    per_layer = 0
    q, kv = shape.n_heads * shape.d_head * shape.d_model, shape.n_kv_heads * shape.d_head * shape.d_model
    if "qk" in matrices:
        per_layer += q + kv
    if "ov" in matrices:
        per_layer += kv + q
    if layers:
        per_layer += 12 * shape.d_model * shape.d_model  # a block's weights, 4 d_model^2 attention + 8 MLP
    total = per_layer * shape.n_layers * itemsize
    return CheckpointBytes(tensors=total, hashed=0, estimated=True)


def seconds_per_checkpoint(shape, config: dict, *, matrices: tuple[str, ...], lenses: tuple[str, ...], llc=None, evaluation=None):
    """(what, seconds per checkpoint, how it was scaled) for the per-head matrices and every lens with a
    recorded figure (`analysis.store.lenses.declaration.Lens.seconds`) that the run computes, in the lenses' order (``llc``: what
    the refined LLC samples per checkpoint, `precompute.costs.LlcRun`, default the default sampler; ``evaluation``:
    --eval-sequences and --eval-length)."""
    from headwatch.analysis.store.lenses import LENSES
    from headwatch.precompute import costs

    figures = [(m, figure) for m, figure in (("qk", costs.QK_SECONDS), ("ov", costs.OV_SECONDS)) if m in matrices]
    for lens in LENSES:
        asked = lens.name in (matrices if lens.asked_by == "--matrices" else lenses)
        if asked and lens.seconds is not None:
            figures.append((lens.name, lens.seconds))
    out = []
    for name, figure in figures:
        scale, how = costs.time_scale(figure, shape, config, llc=llc, evaluation=evaluation or costs.FORWARD_REFERENCE)
        out.append((name, figure.seconds * scale, f"{figure.name} = {figure.seconds} s {how}"))
    return out


def store_figures(*, matrices: tuple[str, ...], lenses: tuple[str, ...] = ()) -> list:
    """The store-size figures of a run (`precompute.costs.StoreBytes`): heads.parquet's, and those of every lens
    it computes that has one (`precompute.Lens.store_bytes`; the overlaps' and the layer table's at the
    shipped store's sizes, the composition's without ``--composition-top``)."""
    from headwatch.analysis.store.lenses import LENSES
    from headwatch.precompute import costs
    from headwatch.precompute.settings import RunOptions

    options = RunOptions(matrices=matrices, lenses=lenses)
    return [costs.HEADS_BYTES] + [lens.store_bytes for lens in LENSES if lens.store_bytes and lens.asked(options)]


def store_bytes_per_checkpoint(shape, *, matrices: tuple[str, ...], lenses: tuple[str, ...] = ()) -> float:
    """Expected store bytes per checkpoint: every figure of `store_figures` times its count at ``shape``."""
    from headwatch.precompute import costs

    head_matrices = len([m for m in matrices if m != "layers"])
    return sum(
        figure.bytes * costs.size_count(figure.per, shape, head_matrices=head_matrices)
        for figure in store_figures(matrices=matrices, lenses=lenses)
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def llc_plan(args: argparse.Namespace, lenses: tuple[str, ...]):
    """The refined LLC's options as the job reads them (`precompute.LlcOptions`, None without ``--lenses
    llc``) and what it would sample per checkpoint (`precompute.costs.LlcRun`: ``--llc-batch-size`` sequences of
    ``--eval-length`` tokens per step, ``--llc-chains`` x (``--llc-burnin`` + ``--llc-draws``) steps).

    Raises:
        ValueError: an ``--llc-*`` option without ``--lenses llc``, a value the sampler refuses, or more sampler
            sequences than ``--eval-sequences`` (as the run refuses them).
    """
    from headwatch.analysis.store.lenses.llc import LLC_LENS, LlcOptions
    from headwatch.precompute import costs
    from headwatch.precompute.__main__ import lens_options

    options = lens_options(args, lenses).get(LLC_LENS.name)
    if not isinstance(options, LlcOptions):
        return None, None
    sampler = options.sampler
    if sampler.sequences > args.eval_sequences:  # precompute.lenses.llc.sampler_sequences
        raise ValueError(
            f"--llc-sequences {sampler.sequences} exceeds the {args.eval_sequences} evaluation sequences; lower it or "
            "raise --eval-sequences"
        )
    steps = sampler.chains * (sampler.burnin + sampler.draws)
    return options, costs.LlcRun(seq_len=args.eval_length, chain_steps=steps, sequences=sampler.batch_size)


def llc_data_names(options, src) -> list[str]:
    """The distributions the run would take the refined LLC's loss on (``--llc-data``; without it ``train`` where the
    source's run.json says how it was trained, else ``text``, as `precompute.llc_data.resolve_llc_data` chooses)."""
    from headwatch.precompute.llc_data import trained_here

    if options.data is None and not trained_here(src.run_info()):
        return ["text"]
    return [spec.name for spec in options.data_specs]


def llc_checkpoints(
    options, args: argparse.Namespace, selected: list[int], new: list[int], meta, data: str = "text"
) -> list[int]:
    """The checkpoints the refined LLC would estimate under the distribution ``data``, chosen as the run chooses them
    (`precompute.lenses.llc.LlcComputation`): ``--llc-steps`` checked against the selected checkpoints, then taken
    among every training state the store holds after the pass (``meta``: the store's, None for a new one; plus the
    ``new`` steps), less those it has estimates of under ``data``.

    Raises:
        ValueError: a step that is not selected, or a store whose estimates were made under other sampler settings,
            another implementation or other evaluation sequences (the run's `check_store` refuses it).
    """
    from headwatch.analysis.store import open_store
    from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN
    from headwatch.precompute.lenses.llc import parse_llc_steps, settings_differences

    parse_llc_steps(options.steps, selected)
    states, estimated = set(new), set()
    if meta is not None:
        states |= set(meta.state_steps)
        if meta.llc is not None:
            diffs = settings_differences(meta.llc, options.sampler, options.implementation)
            evaluation = meta.llc.get("evaluation") or {}
            for key, flag, value in (
                ("n_sequences", "--eval-sequences", args.eval_sequences),
                ("seq_len", "--eval-length", args.eval_length),
            ):
                if evaluation.get(key) is not None and evaluation[key] != value:
                    diffs.append(f"{flag} {evaluation[key]} (now {value})")
            if diffs:
                raise ValueError(
                    f"store {args.out!r} has refined LLCs estimated with other settings: {'; '.join(diffs)}; the run "
                    "would refuse it: pass the stored options, or give a new --out"
                )
            estimated = {int(s) for s in open_store(args.out).steps_with(LLC, at={LLC_DATA_COLUMN: data})}
    chosen = parse_llc_steps(options.steps, sorted(states)) if states else []
    return [s for s in chosen if s not in estimated]


def describe(args: argparse.Namespace) -> list[str]:
    """The lines ``headwatch plan`` prints.

    Raises:
        ValueError: bad options; CheckpointNotFoundError (a FileNotFoundError): nothing to read.
    """
    from headwatch.analysis.store.lenses import LENSES
    from headwatch.analysis.store.lenses.layers import LAYERS
    from headwatch.analysis.store.lenses.llc import LLC_LENS
    from headwatch.analysis.store.meta import ModelInfo
    from headwatch.analysis.store.outputs import check_same_model, store_at
    from headwatch.families.registry import language_config, model_shape
    from headwatch.precompute import costs
    from headwatch.precompute.evalset import check_length, model_context
    from headwatch.precompute.settings import FetchSettings, matrices_option
    from headwatch.precompute.sources.fetch import Meter
    from headwatch.precompute.sources.local import LocalSource
    from headwatch.precompute.sources.resolve import open_source
    from headwatch.precompute.sources.revisions import parse_revisions, runs_note, select

    matrices = matrices_option(args.matrices)
    head_matrices = tuple(m for m in matrices if m != "layers")
    lenses = tuple(dict.fromkeys(args.lenses or ()))
    if args.every is not None and args.every < 1:
        raise ValueError(f"--every must be a positive integer, got {args.every}")
    requested = parse_revisions(args.revisions) if args.revisions else None
    meta = store_at(args.out) if args.out else None  # a file, another kind of folder: refused as the run refuses them
    with tempfile.TemporaryDirectory(prefix="headwatch-plan-") as scratch:
        src = open_source(args.source, scratch=Path(scratch), fetch=FetchSettings(), meter=Meter())
        listing = src.list()
        available = listing[0] if listing is not None else None
        todo, missing = select(available, revisions=requested, every=args.every)
        if not todo:
            raise ValueError(f"no checkpoint of {args.source!r} is selected")
        config = src.config(todo[0])
        shape = model_shape(config)
        if meta is not None:  # another model's store: said before any lens's refusal, as the run says it
            check_same_model(args.out, meta, ModelInfo(id=src.model_id, **shape.as_meta()), source=args.source)
        if any(lens.name in lenses and "evaluation" in lens.needs for lens in LENSES):
            check_length(args.eval_length, model_context(language_config(config)))  # as the run's evaluation set refuses it
        done: set[int] = set()
        lens_all: set[str] = set()  # lenses the store lacks: the run computes them for its old checkpoints too
        store_lines: list[str] = []
        if meta is not None:
            done = set(meta.done_steps) | {c.step for c in meta.checkpoints}
            store_lines = [
                f"store {args.out}: {len(meta.done_steps)} checkpoints, matrices {','.join(meta.matrices)}"
                + (", layers" if (Path(args.out) / LAYERS.file).is_file() else "")
            ]
            new_matrices = [m for m in head_matrices if m not in meta.matrices]
            if new_matrices:
                store_lines.append(f"  the run adds {','.join(new_matrices)} rows for the checkpoints it already has")
            for lens in LENSES:
                asked = lens.name in (matrices if lens.asked_by == "--matrices" else lenses)
                if asked and not lens.in_store(args.out):
                    lens_all.add(lens.name)
                    store_lines.append(
                        f"  the run adds the {lens.title} ({', '.join(lens.files)}) for the checkpoints it already has"
                    )
        new = [r for r in todo if r.step not in done]
        if isinstance(src, LocalSource):
            per = [
                local_bytes(src.folder / r.revision, shape, matrices=head_matrices or ("qk",), layers="layers" in matrices)
                for r in new
            ]
        else:
            one = geometry_bytes(shape, config, matrices=head_matrices, layers="layers" in matrices)
            per = [one] * len(new)
    lines = [
        f"source: {args.source} ({src.kind}), model {src.model_id}",
        f"architecture: {shape.family}, {shape.n_layers} layers x {shape.n_heads} heads, d_model {shape.d_model}, "
        f"d_head {shape.d_head}; {costs.parameters(shape, config):,} parameters (12 L d_model^2 + 2 vocab d_model)",
        f"checkpoints: {len(todo)} selected"
        + (f" ({len(missing)} requested ones missing: {', '.join(r.revision for r in missing)})" if missing else "")
        + (f", steps {todo[0].step} to {todo[-1].step}" if todo else ""),
        *([note] if (note := runs_note(todo + missing, available)) else []),
        *store_lines,
        f"to compute: {len(new)} checkpoints ({len(todo) - len(new)} already in the store); matrices "
        f"{','.join(matrices)}; lenses {','.join(lenses) or 'none'}",
    ]
    if per:
        tensors = sum(b.tensors for b in per)
        hashed = sum(b.hashed for b in per)
        how = "from the config's geometry" if per[0].estimated else "from the safetensors headers"
        lines.append(
            f"bytes to read per checkpoint: {human_bytes(per[0].tensors)} of tensors ({per[0].tensors:,} B, {how})"
            + (f" + {human_bytes(per[0].hashed)} of weight files hashed" if per[0].hashed else "")
        )
        lines.append(
            f"bytes to read in all: {human_bytes(tensors + hashed)} ({tensors:,} B of tensors"
            + (f", {hashed:,} B hashed" if hashed else "")
            + ")"
        )
    store = store_bytes_per_checkpoint(shape, matrices=matrices, lenses=lenses) * len(new)
    figures = "; ".join(figure.describe() for figure in store_figures(matrices=matrices, lenses=lenses))
    lines.append(f"expected store growth: {human_bytes(store)} (per checkpoint: {figures})")
    scratch_note = " plus one checkpoint's .bin file in a scratch folder" if src.kind == "hub" else ""
    lines.append(f"disk needed: {human_bytes(store)} for the store{scratch_note}")
    llc_options, llc_run = llc_plan(args, lenses)
    evaluation = (args.eval_sequences, args.eval_length)
    priced = seconds_per_checkpoint(shape, config, matrices=matrices, lenses=lenses, llc=llc_run, evaluation=evaluation)
    total = 0.0
    lines.append(f"estimated time on this machine ({os.cpu_count()} CPUs; the figures are a 2-core CPU's, docs/benchmarks.md):")
    for what, seconds, how in priced:
        steps = [r.step for r in (todo if what in lens_all else new)]
        if what == LLC_LENS.name:  # the rLLC estimates --llc-steps of the checkpoints that lack it, per distribution
            selected, added = [r.step for r in todo], [r.step for r in new]
            if llc_options.implementation == "devinterp":
                how += "; priced as the batched sampler: devinterp's path took 1.4 to 2.6 times its CPU-seconds"
            for name in llc_data_names(llc_options, src):
                steps = llc_checkpoints(llc_options, args, selected, added, meta, data=name)
                which = (
                    f" (--llc-steps {llc_options.steps or 'not given: about 8, log-spaced'}, those without estimates on {name})"
                )
                total += seconds * len(steps)
                label = f"llc {name}"
                lines.append(
                    f"  {label:<9} {_duration(seconds)} per checkpoint x {len(steps)}{which} = "
                    f"{_duration(seconds * len(steps))}  [{how}]"
                )
            continue
        count = len(steps)
        total += seconds * count
        lines.append(f"  {what:<9} {_duration(seconds)} per checkpoint x {count} = {_duration(seconds * count)}  [{how}]")
    lines.append(f"  total     {_duration(total)}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print `describe`; bad options, sources or a missing extra are one error line, exit 2; an
    unreachable Hub exit 3."""
    from headwatch.analysis.errors import CheckpointError, HubUnreachableError, StoreError, UnknownArchitectureError

    try:
        lines = describe(args)
    except ModuleNotFoundError as exc:
        print(
            f"headwatch plan: error: plan reads checkpoints as the job does and needs {exc.name!r}, which this "
            "install lacks: pip install 'headwatch[precompute]' (torch==2.13.0 first for the CPU build)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except HubUnreachableError as exc:
        print(f"headwatch plan: error: {exc}", file=sys.stderr)
        return EXIT_NETWORK
    except (ValueError, FileNotFoundError, CheckpointError, UnknownArchitectureError, StoreError) as exc:
        print(f"headwatch plan: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(lines))
    return EXIT_OK
