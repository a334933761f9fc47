"""Command line: ``python -m headwatch.precompute --source DIR_OR_REPO --out STORE [options]``.

``--source`` is a local folder of ``step<N>/`` checkpoint folders or a Hub model id
(``EleutherAI/pythia-1.4b-deduped``): its branches are the checkpoints, and only the
Q/K bytes of each are fetched. Repeated, it runs several models one after the other,
each into its own store ``OUT/<name>`` (the folder's or the repo's name).
``--executor ray`` computes each checkpoint as a task on a Ray cluster
(`precompute.job.ray_executor`); the stores are the local executor's, bit for bit.

Exit status: 0 when every selected checkpoint is in the store, 1 when some are
missing or failed (listed on stderr and in meta.json; the rest were processed),
2 when the run could not start (bad source, unknown architecture, incompatible
store, bad options), 3 when the network failed after retries or the Ray cluster
was lost (the store keeps every committed checkpoint; rerun to resume) or the
push to the Hub failed, 130 when interrupted (likewise). With several sources:
the worst status of their runs; a network or cluster failure stops them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from pathlib import Path

from headwatch.analysis.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    HubUnreachableError,
    StoreError,
    UnknownArchitectureError,
)
from headwatch.analysis.store.format import META_FILE
from headwatch.analysis.store.lenses import LENSES
from headwatch.analysis.store.lenses.declaration import Lens
from headwatch.precompute import evalset
from headwatch.precompute.settings import (
    DEFAULT_MATRICES,
    RayOptions,
    RunOptions,
    default_device,
    default_ray_address,
    matrices_option,
    option_default,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NETWORK, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def parse_matrices(value: str) -> tuple[str, ...]:
    """``--matrices``: `precompute.settings.matrices_option`, its error as argparse's."""
    try:
        return matrices_option(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a step (0 or more), got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m headwatch.precompute",
        description="Read every checkpoint of a training run (local folders or Hub revisions) and write a statistics "
        "store: W_QK and W_OV of every head (their entries and exact spectra, against random heads) and, with --matrices "
        "layers, every block weight against Marchenko-Pastur; with --lenses, "
        + ", ".join(lens.name for lens in LENSES if lens.asked_by == "--lenses")
        + ".",
    )
    p.add_argument(
        "--source",
        required=True,
        action="append",
        help="folder with one step<N>/ (or checkpoint-<N>/, ...) sub-folder per checkpoint, "
        "or a Hub model id whose branches are the checkpoints (EleutherAI/pythia-70m); "
        "repeat it to run several models, each into OUT/<its name>",
    )
    p.add_argument(
        "--out",
        required=True,
        help="store directory to create, or to resume (with several --source: the folder that holds their stores)",
    )
    p.add_argument(
        "--revisions",
        default=None,
        help="only these checkpoints, comma-separated (step0,step1000); "
        "required with HF_HUB_OFFLINE=1, which reads them from the local Hub cache",
    )
    p.add_argument("--every", type=_positive, default=None, help="only steps that are multiples of N")
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default=default_device(), help="default: auto ($HEADWATCH_DEVICE)"
    )
    p.add_argument("--model-id", default=None, help="model name recorded in the store (default: the folder name or repo id)")
    p.add_argument(
        "--tokens-per-step",
        type=int,
        default=None,
        help="tokens per training step, to record tokens seen (Pythia: 2097152, set automatically)",
    )
    p.add_argument(
        "--push-to-hub",
        metavar="REPO_ID",
        default=None,
        help="afterwards, upload the store as a Hub dataset repo with a dataset card",
    )
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the dataset repo private")
    p.add_argument(
        "--matrices",
        type=parse_matrices,
        default=DEFAULT_MATRICES,
        metavar="LIST",
        help="what to compute, comma-separated: qk (per-head W_QK), ov (per-head W_OV), layers "
        f"(every 2-D weight of every block, layers.parquet); default {','.join(DEFAULT_MATRICES)}. "
        "A store keeps the per-head matrices it has: a later run computes them too; a rerun with "
        "layers adds the layer table to a store",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where each checkpoint is computed: local (default; one fetched ahead) or ray "
        "(one task per checkpoint on a Ray cluster; the store is the same)",
    )
    p.add_argument(
        "--ray-address",
        default=default_ray_address(),
        metavar="ADDRESS",
        help="with --executor ray: the cluster to join (auto, HOST:6379, ray://HOST:10001); "
        "default $RAY_ADDRESS, else a cluster started on this machine",
    )
    p.add_argument(
        "--ray-cpus-per-task",
        type=_positive,
        default=None,
        metavar="N",
        help="CPUs (and torch threads) per task; default: this machine's torch threads, as a local "
        "run computes with (other values change the spectral columns in their last bits)",
    )
    p.add_argument(
        "--max-in-flight",
        type=_positive,
        default=None,
        metavar="N",
        help="most checkpoints submitted and not yet committed (default: twice the tasks the cluster runs at once)",
    )
    p.add_argument(
        "--lenses",
        choices=LENSES.choices,
        action="append",
        default=None,
        help="lenses: "
        + "; ".join(f"{lens.name} ({lens.summary})" for lens in LENSES if lens.asked_by == "--lenses")
        + ". Repeat to combine.",
    )
    evalset.add_arguments(p, when="with --lenses: ")
    add_lens_options(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    follow = p.add_argument_group("following a run while it trains (precompute.follow)")
    follow.add_argument(
        "--follow",
        action="store_true",
        help="--source is a run folder still training: add each checkpoint as soon as its files are complete, "
        "with every lens the store has, until the folder says training finished (run.json or "
        "training-finished.json), SIGTERM or SIGINT; rerun to resume. --source ORG/NAME (a Hub repo): add each "
        "new step branch once it has a commit of its own, until --follow-until, SIGTERM or SIGINT",
    )
    follow.add_argument(
        "--poll",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --follow: seconds between looks (default 2 for a run folder, 60 for a Hub repo)",
    )
    follow.add_argument(
        "--follow-until",
        type=_non_negative,
        default=None,
        metavar="STEP",
        help="with --follow of a Hub repo: the run's last step; once its branch (or a later one) has landed, "
        "read every step branch once more and stop",
    )
    follow.add_argument(
        "--follow-pid",
        type=_positive,
        default=None,
        metavar="PID",
        help="with --follow: the trainer's process; when it is gone without finishing, stop after the complete checkpoints",
    )
    return p.parse_args(argv)


def add_lens_options(parser: argparse.ArgumentParser) -> None:
    """One argument group per lens with options (`precompute.Lens.options`), the lenses on by
    default (``--overlap-k``, ``--no-embeddings``, ``--no-types``) included."""
    for lens in LENSES:
        if not lens.options:
            continue
        asked = "on by default" if lens.asked_by == "default" else f"{lens.asked_by} {lens.name}"
        group = parser.add_argument_group(f"{lens.title} ({asked}; the same for every checkpoint of a store)")
        for option in lens.options:
            dest = _dest(lens, option.field)
            if option.switch:
                env = f" (${option.env}=0)" if option.env else ""
                group.add_argument(option.flag, dest=dest, action="store_false", default=None, help=option.help + env)
                continue
            default = (
                f" ({option.default:g})"
                if isinstance(option.default, float)
                else (f" ({option.default})" if option.default is not None else "")
            )
            group.add_argument(
                option.flag, dest=dest, type=option.type, default=None, metavar=option.metavar, help=option.help + default
            )


def _dest(lens: Lens, field: str) -> str:
    return f"lens_{lens.name}_{field}"


def lens_options(args: argparse.Namespace, lenses: tuple[str, ...]) -> dict[str, object]:
    """The options of every lens the run may compute, from the parsed lens flags (a flag not given: its default,
    `precompute.settings.option_default`): the lenses asked for by name, and those on by default.

    Raises:
        ValueError: a flag given for a lens not asked for, or a value the lens refuses.
    """
    out: dict[str, object] = {}
    for lens in LENSES:
        given = {
            o.field: getattr(args, _dest(lens, o.field))
            for o in lens.options
            if getattr(args, _dest(lens, o.field), None) is not None
        }
        computed = lens.asked_by == "default" or lens.name in lenses
        if given and not computed:
            flags = [o.flag for o in lens.options if o.field in given]
            raise ValueError(f"{', '.join(flags)} are for the {lens.title}: add {lens.asked_by} {lens.name}")
        if computed and lens.make_options is not None:
            out[lens.name] = lens.make_options({o.field: given.get(o.field, option_default(o)) for o in lens.options})
    return out


def store_paths(sources: list[str], out: str) -> list[tuple[str, str]]:
    """``(source, store)`` pairs: one source writes ``out`` itself; several write ``out/<name>``,
    named after the folder or the repo.

    Raises:
        ValueError: two sources have the same name.
    """
    if len(sources) == 1:
        return [(sources[0], out)]
    names = [Path(s.rstrip("/")).name for s in sources]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(
            f"several --source are named {twice[0]!r}: their stores would collide under {out!r}; "
            "run them separately with their own --out"
        )
    return [(s, str(Path(out) / n)) for s, n in zip(sources, names, strict=True)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per HTTP request otherwise
    logging.getLogger("devinterp").setLevel(logging.WARNING)  # four INFO lines per refined-LLC estimate otherwise
    try:
        runs = store_paths(args.source, args.out)
        if len(runs) > 1 and (args.model_id or args.push_to_hub):
            raise ValueError("--model-id and --push-to-hub name one model; give them with a single --source")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    options = RunOptions(
        device=args.device,
        model_id=args.model_id,
        tokens_per_step=args.tokens_per_step,
        revisions=args.revisions,
        every=args.every,
        matrices=args.matrices,
        progress=not args.no_progress,
        executor=args.executor,
        ray=RayOptions(address=args.ray_address, cpus_per_task=args.ray_cpus_per_task, max_in_flight=args.max_in_flight),
        lenses=tuple(dict.fromkeys(args.lenses or ())),
        eval_text=args.eval_text,
        eval_sequences=args.eval_sequences,
        eval_length=args.eval_length,
    )
    if options.eval_text and not options.lenses:
        print(
            f"error: --eval-text is for the lenses: add {' and/or '.join(f'--lenses {n}' for n in LENSES.choices)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        options = dataclasses.replace(options, lens_options=lens_options(args, options.lenses))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.follow or args.poll is not None or args.follow_pid is not None or args.follow_until is not None:
        return follow_one(options, args)
    status = EXIT_OK
    for source, out in runs:
        status = max(status, run_one(source, out, options, args))
        if status in (EXIT_NETWORK, EXIT_INTERRUPTED):
            return status
    return status


def follow_one(options: RunOptions, args: argparse.Namespace) -> int:
    """``--follow``: one run folder (or Hub repo) followed into one store until training finishes or a signal
    stops it."""
    import signal
    import threading

    from headwatch.precompute import follow

    if not args.follow:
        print("error: --poll, --follow-pid and --follow-until are for --follow", file=sys.stderr)
        return EXIT_USAGE
    if len(args.source) > 1 or args.push_to_hub or args.executor != "local" or args.revisions or args.every:
        print(
            "error: --follow follows one --source with the local executor, every checkpoint, no --push-to-hub "
            "(publish the store once training has finished)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.poll is not None and args.poll <= 0:
        print(f"error: --poll {args.poll}: expected a positive number of seconds", file=sys.stderr)
        return EXIT_USAGE
    repo_id = follow.hub_repo(args.source[0])
    if repo_id is None and args.follow_until is not None:
        print(
            "error: --follow-until is for a Hub repo; a run folder says it finished with run.json or training-finished.json",
            file=sys.stderr,
        )
        return EXIT_USAGE
    stop = threading.Event()
    mark = follow.store_mark(args.out)

    def on_signal(signum: int, frame: object) -> None:
        if stop.is_set():  # a second signal: stop in the middle of the round (the store keeps its commits)
            raise KeyboardInterrupt
        stop.set()
        print("stopping after this round (signal again to stop at once)", file=sys.stderr)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        if repo_id is not None:
            poll = args.poll or follow.HUB_POLL_SECONDS
            follow.follow_hub(repo_id, args.out, options, poll=poll, stop=stop, pid=args.follow_pid, until=args.follow_until)
        else:
            poll = args.poll or follow.POLL_SECONDS
            follow.follow_run(args.source[0], args.out, options, poll=poll, stop=stop, pid=args.follow_pid)
    except follow.REFUSALS as exc:
        print(f"error: {exc}{_kept(args.out, mark)}", file=sys.stderr)
        return EXIT_USAGE
    except HubUnreachableError as exc:
        print(f"error: {exc}{_kept(args.out, mark)}", file=sys.stderr)
        return EXIT_NETWORK
    except KeyboardInterrupt:
        print(f"\ninterrupted: {_resume(args.out, 'to start again')}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_INTERRUPTED if stop.is_set() else EXIT_OK


def _kept(out: str, mark: bytes | None) -> str:
    """The line that says the store keeps the checkpoints the follower committed, when it committed some (``mark``:
    the store's `precompute.follow.store_mark` when it started); nothing for a refusal or a follower that stopped
    at its first look: its error stays one line."""
    from headwatch.precompute.follow import store_mark

    now = store_mark(out)
    return f"\n{out} keeps every finished checkpoint" if now is not None and now != mark else ""


def _resume(out: str, when: str) -> str:
    """What a run that stopped early left: the store keeps its checkpoints (resume), or, before the first commit,
    nothing was written (start again ``when``)."""
    if (Path(out) / META_FILE).is_file():
        return f"{out} keeps every finished checkpoint; run the same command to resume"
    return f"nothing was written to {out}; run the same command {when}"


def run_one(source: str, out: str, options: RunOptions, args: argparse.Namespace) -> int:
    """One model's run, reported on stderr; its exit status."""
    from headwatch.analysis.errors import ClusterError
    from headwatch.precompute.job.run import run_precompute  # imports torch; keep --help fast

    try:
        report = run_precompute(source, out, options)
    except (CheckpointNotFoundError, UnknownArchitectureError, StoreError, CheckpointError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except HubUnreachableError as exc:
        print(f"error: network failure: {exc}\n{_resume(out, 'once the Hub can be reached')}", file=sys.stderr)
        return EXIT_NETWORK
    except ClusterError as exc:
        print(f"error: Ray cluster failure: {exc}\n{_resume(out, 'once the cluster is back')}", file=sys.stderr)
        return EXIT_NETWORK
    except KeyboardInterrupt:
        print(f"\ninterrupted: {_resume(out, 'to start again')}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(
        f"{out}: {len(report.computed)} computed, {len(report.already_done)} already done, "
        f"{len(report.duplicates)} duplicates, {len(report.failed)} failed",
        file=sys.stderr,
    )
    if report.bytes_fetched or report.peak_disk:
        print(report.transfer_summary(), file=sys.stderr)
    if report.completed:
        print(
            f"note: {len(report.completed)} checkpoints already in the store were read again for the rows "
            "they lacked (a matrix the store gained, or the circuit columns of schema version 3)",
            file=sys.stderr,
        )
    if report.incomplete:
        print(
            f"note: {len(report.incomplete)} checkpoints could not be read again (see the warnings above): their "
            f"rows of a matrix the store gained, or their circuit columns, stay NaN (steps "
            f"{', '.join(map(str, report.incomplete[:5]))}{', ...' if len(report.incomplete) > 5 else ''})",
            file=sys.stderr,
        )
    for lens in LENSES:
        steps = report.lenses.get(lens.name)
        if steps:
            print(f"{lens.title}: computed at steps {', '.join(map(str, steps))}", file=sys.stderr)
    for note in report.notes:
        print(note, file=sys.stderr)
    for c in report.mixed:
        files = ", ".join(f"{s.file} = step {s.step}'s {s.other_file}" for s in c.shared_files)
        print(
            f"note: step {c.step} ({c.revision}) mixes weights of two revisions ({files}): its statistics are "
            "stored, but the views leave it out of the training states unless asked",
            file=sys.stderr,
        )
    status = EXIT_OK
    if report.failed:
        print("failed or missing checkpoints (rerun to retry them):", file=sys.stderr)
        for f in report.failed:
            print(f"  {f.revision}: {f.error}", file=sys.stderr)
        status = EXIT_FAILED
    if args.push_to_hub:
        from headwatch.precompute.store.publish import push_store

        try:
            url = push_store(out, args.push_to_hub, private=args.private or None)
        except StoreError as exc:  # refused: the repo holds another model's store, another run holds the lock
            print(
                f"error: push to {args.push_to_hub} refused: {exc}\nthe store is complete; publish it with "
                f"python -m headwatch.precompute.store.publish {out} REPO_ID",
                file=sys.stderr,
            )
            return EXIT_NETWORK
        except (OSError, ValueError) as exc:  # Hub errors are OSErrors
            print(
                f"error: push to {args.push_to_hub} failed: {exc}\nthe store is complete; retry with "
                f"python -m headwatch.precompute.store.publish {out} {args.push_to_hub}",
                file=sys.stderr,
            )
            return EXIT_NETWORK
        print(f"pushed {out} to {url}", file=sys.stderr)
    return status


if __name__ == "__main__":
    status = main()
    if status == EXIT_NETWORK and "ray" in sys.modules:
        # Ray's core worker, finding the cluster's head gone at interpreter exit, would end the
        # process with status 1; the store is committed and the message printed, so leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
