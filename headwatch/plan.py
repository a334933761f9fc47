"""``headwatch plan SOURCE``: what a precompute run would do, said before it runs.

The checkpoints come from the job's own source interface (`precompute.sources.resolve.open_source`,
`CheckpointSource.list`, `precompute.sources.revisions.select`), so a plan lists what a run would
take. Bytes: for a local folder, the tensors the run reads (`tensors_to_read`, sizes from the
safetensors headers) and the weight files it hashes; for a Hub model, the tensors' sizes from the
config's geometry (the job fetches only their byte ranges). Time and store size: the recorded
benchmark figures of `headwatch.benchmarks`, scaled to this model as printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from headwatch import benchmarks as bench
from headwatch.units import human_bytes

EXIT_OK, EXIT_USAGE, EXIT_NETWORK = 0, 2, 3
# bytes per element of a config's torch_dtype / dtype
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``plan``'s options: the ones of ``python -m precompute`` that change what a run does."""
    from precompute import registry
    from precompute.settings import DEFAULT_MATRICES, MATRIX_CHOICES

    p.add_argument("source", metavar="SOURCE", help="a folder of step<N>/ checkpoint folders, or a Hub model id")
    p.add_argument(
        "--matrices",
        default=",".join(DEFAULT_MATRICES),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(MATRIX_CHOICES)} (default: all)",
    )
    p.add_argument(
        "--lenses",
        choices=registry.LENS_CHOICES,
        action="append",
        default=None,
        help=f"{' and/or '.join(registry.LENS_CHOICES)}; repeat",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--revisions", default=None, help="only these checkpoints, comma-separated (step0,step1000)")
    which.add_argument("--every", type=int, default=None, metavar="N", help="only steps that are multiples of N")
    p.add_argument("--out", default=None, metavar="STORE", help="the store the run would write or resume")


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
    from precompute.sources.checkpoints import tensors_to_read, weight_files
    from precompute.sources.weights import tensor_names

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


def parameters(shape, config: dict) -> int:
    """Parameters of a decoder: 12 L d^2 for the blocks plus the embedding and unembedding."""
    vocab = int(config.get("vocab_size") or 0)
    return 12 * shape.n_layers * shape.d_model**2 + 2 * vocab * shape.d_model


def head_pair_flops(n_layers: int, n_heads: int, d_head: int, d_model: int) -> int:
    """What the composition scores' cost scales with: ordered pairs of heads in different layers times
    the ``d_head x d_head`` product over ``d_model`` each takes (`analysis.composition`)."""
    return n_heads**2 * n_layers * (n_layers - 1) // 2 * d_head**2 * d_model


def all_head_pair_flops(n_layers: int, n_heads: int, d_head: int, d_model: int) -> int:
    """What the head similarity's cost scales with: unordered pairs of heads (within and across layers)
    times the ``d_head x d_head`` products over ``d_model`` each takes (`analysis.similarity`)."""
    heads = n_layers * n_heads
    return heads * (heads - 1) // 2 * d_head**2 * d_model


def seconds_per_checkpoint(shape, config: dict, *, matrices: tuple[str, ...], lenses: tuple[str, ...]):
    """(stage, seconds per checkpoint, how it was scaled) for the per-head matrices and every lens with a
    recorded figure that the run computes (`precompute.registry.LENSES`, in their order)."""
    from precompute import registry

    ref = bench.PYTHIA_1_4B
    heads_scale = (shape.n_layers * shape.n_heads * shape.d_model**2) / (ref["n_layers"] * ref["n_heads"] * ref["d_model"] ** 2)
    layers_scale = (shape.n_layers * shape.d_model**2) / (ref["n_layers"] * ref["d_model"] ** 2)
    params_scale = parameters(shape, config) / bench.PYTHIA_160M_PARAMETERS
    pairs_scale = head_pair_flops(shape.n_layers, shape.n_heads, shape.d_head, shape.d_model) / head_pair_flops(
        ref["n_layers"], ref["n_heads"], ref["d_head"], ref["d_model"]
    )
    all_pairs_scale = all_head_pair_flops(shape.n_layers, shape.n_heads, shape.d_head, shape.d_model) / all_head_pair_flops(
        ref["n_layers"], ref["n_heads"], ref["d_head"], ref["d_model"]
    )
    heads_how = f"x {heads_scale:.3g} (layers x heads x d_model^2 against Pythia-1.4B's)"
    scales = {
        "heads": (heads_scale, heads_how),
        "layers": (layers_scale, f"x {layers_scale:.3g} (layers x d_model^2)"),
        "parameters": (
            params_scale,
            f"x {params_scale:.3g} (parameters, {parameters(shape, config):,} against {bench.PYTHIA_160M_PARAMETERS:,})",
        ),
        "head_pairs": (pairs_scale, f"x {pairs_scale:.3g} (cross-layer head pairs x d_head^2 x d_model against Pythia-1.4B's)"),
        "all_head_pairs": (
            all_pairs_scale,
            f"x {all_pairs_scale:.3g} (pairs of heads x d_head^2 x d_model against Pythia-1.4B's)",
        ),
    }
    out = []
    if "qk" in matrices:
        out.append(("qk", bench.QK_SECONDS_1_4B * heads_scale, f"QK_SECONDS_1_4B = {bench.QK_SECONDS_1_4B} s {heads_how}"))
    if "ov" in matrices:
        out.append(("ov", bench.OV_SECONDS_1_4B * heads_scale, f"OV_SECONDS_1_4B = {bench.OV_SECONDS_1_4B} s {heads_how}"))
    for lens in registry.LENSES:
        asked = lens.name in (matrices if lens.asked_by == "--matrices" else lenses)
        if not asked or lens.cost_scale is None or lens.name not in bench.SECONDS_PER_CHECKPOINT:
            continue
        name, seconds = bench.SECONDS_PER_CHECKPOINT[lens.name]
        scale, how = scales[lens.cost_scale]
        subset = "" if lens.every_checkpoint else f", on {bench.LLC_DEFAULT_CHECKPOINTS} checkpoints"
        out.append((lens.name, seconds * scale, f"{name} = {seconds} s {how}{subset}"))
    return out


def store_bytes_per_checkpoint(shape, *, matrices: tuple[str, ...], lenses: tuple[str, ...] = ()) -> float:
    """Expected store bytes per checkpoint: heads, overlaps and layer rows at the shipped store's sizes,
    and every composition row (``--lenses composition`` without ``--composition-top``) and similarity row
    (``--lenses similarity``, its ultrametricity rows included) at the benchmarks'."""
    head_rows = shape.n_layers * shape.n_heads * len([m for m in matrices if m != "layers"])
    total = head_rows * (bench.HEADS_BYTES_PER_ROW + bench.OVERLAPS_BYTES_PER_HEAD_PAIR)
    if "layers" in matrices:
        total += shape.n_layers * bench.LAYERS_BYTES_PER_LAYER
    if "composition" in lenses:
        total += shape.n_heads**2 * shape.n_layers * (shape.n_layers - 1) // 2 * bench.COMPOSITION_BYTES_PER_PAIR
    if "similarity" in lenses:
        heads = shape.n_layers * shape.n_heads
        total += heads * (heads - 1) // 2 * bench.SIMILARITY_BYTES_PER_PAIR
    return total


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def describe(args: argparse.Namespace) -> list[str]:
    """The lines ``headwatch plan`` prints.

    Raises:
        ValueError: bad options; CheckpointNotFoundError (a FileNotFoundError): nothing to read.
    """
    from analysis.extract import model_shape
    from analysis.store.meta import read_meta
    from precompute import registry
    from precompute.settings import FetchSettings, matrices_option
    from precompute.sources.fetch import Meter
    from precompute.sources.local import LocalSource
    from precompute.sources.resolve import open_source
    from precompute.sources.revisions import parse_revisions, select

    matrices = matrices_option(args.matrices)
    head_matrices = tuple(m for m in matrices if m != "layers")
    lenses = tuple(dict.fromkeys(args.lenses or ()))
    if args.every is not None and args.every < 1:
        raise ValueError(f"--every must be a positive integer, got {args.every}")
    requested = parse_revisions(args.revisions) if args.revisions else None
    with tempfile.TemporaryDirectory(prefix="headwatch-plan-") as scratch:
        src = open_source(args.source, scratch=Path(scratch), fetch=FetchSettings(), meter=Meter())
        listing = src.list()
        available = listing[0] if listing is not None else None
        todo, missing = select(available, revisions=requested, every=args.every)
        if not todo:
            raise ValueError(f"no checkpoint of {args.source!r} is selected")
        config = src.config(todo[0])
        shape = model_shape(config)
        done: set[int] = set()
        lens_all: set[str] = set()  # lenses the store lacks: the run computes them for its old checkpoints too
        store_lines: list[str] = []
        if args.out and (Path(args.out) / "meta.json").is_file():
            meta = read_meta(args.out)
            theirs = {k: getattr(meta.model, k) for k in ("n_layers", "n_heads", "d_model", "d_head")}
            if theirs != {k: getattr(shape, k) for k in theirs}:
                raise ValueError(f"--out {args.out!r} holds another model ({theirs}); the run would refuse it: give a new --out")
            done = set(meta.done_steps) | {c.step for c in meta.checkpoints}
            store_lines = [
                f"store {args.out}: {len(meta.done_steps)} checkpoints, matrices {','.join(meta.matrices)}"
                + (", layers" if (Path(args.out) / "layers.parquet").is_file() else "")
            ]
            new_matrices = [m for m in head_matrices if m not in meta.matrices]
            if new_matrices:
                store_lines.append(f"  the run adds {','.join(new_matrices)} rows for the checkpoints it already has")
            for lens in registry.LENSES:
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
        f"d_head {shape.d_head}; {parameters(shape, config):,} parameters (12 L d_model^2 + 2 vocab d_model)",
        f"checkpoints: {len(todo)} selected"
        + (f" ({len(missing)} requested ones missing: {', '.join(r.revision for r in missing)})" if missing else "")
        + (f", steps {todo[0].step} to {todo[-1].step}" if todo else ""),
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
    composition = (
        f", composition.parquet {bench.COMPOSITION_BYTES_PER_PAIR} B per pair of heads (every pair)"
        if "composition" in lenses
        else ""
    )
    if "similarity" in lenses:
        composition += (
            f", similarity.parquet and ultrametricity.parquet {bench.SIMILARITY_BYTES_PER_PAIR} B per unordered pair of heads"
        )
    lines.append(
        f"expected store growth: {human_bytes(store)} (per checkpoint: heads.parquet "
        f"{bench.HEADS_BYTES_PER_ROW} B and overlaps {bench.OVERLAPS_BYTES_PER_HEAD_PAIR} B per head and "
        f"matrix, layers.parquet {bench.LAYERS_BYTES_PER_LAYER} B per layer: the shipped store's sizes{composition})"
    )
    scratch_note = " plus one checkpoint's .bin file in a scratch folder" if src.kind == "hub" else ""
    lines.append(f"disk needed: {human_bytes(store)} for the store{scratch_note}")
    stages = seconds_per_checkpoint(shape, config, matrices=matrices, lenses=lenses)
    subset_lenses = {lens.name for lens in registry.LENSES if not lens.every_checkpoint}
    total = 0.0
    lines.append(f"estimated time on this machine ({os.cpu_count()} CPUs; the figures are a 2-core CPU's, docs/benchmarks.md):")
    for stage, seconds, how in stages:
        count = len(todo) if stage in lens_all else len(new)
        count = min(bench.LLC_DEFAULT_CHECKPOINTS, count) if stage in subset_lenses else count
        total += seconds * count
        lines.append(f"  {stage:<9} {_duration(seconds)} per checkpoint x {count} = {_duration(seconds * count)}  [{how}]")
    lines.append(f"  total     {_duration(total)}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print `describe`; bad options, sources or a missing extra are one error line, exit 2; an
    unreachable Hub exit 3."""
    from analysis.errors import CheckpointError, HubUnreachableError, StoreError, UnknownArchitectureError

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
