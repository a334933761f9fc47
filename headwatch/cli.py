"""The ``headwatch`` command: one entry point for the dashboard, the job and the tools around it.

    headwatch serve [DATA_DIR_OR_STORE] [streamlit options]   the dashboard (python -m headwatch.dashboard.serve)
    headwatch precompute --source ... --out STORE [options]    the job (python -m headwatch.precompute)
    headwatch train [options]                                  a reference run (python -m headwatch.training)
    headwatch publish STORE REPO_ID [options]                  upload a store (python -m headwatch.precompute.store.publish)
    headwatch info STORE                                       what a store holds
    headwatch plan SOURCE [options]                            what a run would do, before it runs
    headwatch report STORE --out DIR                           what happened in a run: Markdown + SVG figures
    headwatch compare STORE STORE... --out DIR                 across runs: sizes, emergence, consolidation,
                                                               joint trajectory clusters, scaling

Each subcommand imports its module only when chosen: ``serve`` and ``info`` work with the core
install (no torch), the others need the ``precompute`` (or ``train``) extra. Exit statuses are
those of ``python -m headwatch.precompute``: 0 done, 1 some checkpoints failed, 2 bad arguments or a run
that could not start, 3 network failure, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from headwatch import __version__

EXIT_OK, EXIT_USAGE = 0, 2
DELEGATED = {  # subcommand -> (module whose main() takes the remaining arguments, help)
    "precompute": (
        "headwatch.precompute.__main__",
        "compute the statistics of a suite of checkpoints into a store "
        "(python -m headwatch.precompute; needs the precompute extra)",
    ),
    "train": ("headwatch.training.__main__", "train a small reference run (python -m headwatch.training; needs the train extra)"),
    "llc-calibrate": (
        "headwatch.precompute.llc_calibrate",
        "sweep the refined LLC's sampler settings on one checkpoint, "
        "draw the chains' loss traces and recommend settings (needs the precompute extra)",
    ),
    "publish": (
        "headwatch.precompute.store.publish",
        "upload a store as a Hub dataset repo with a dataset card (python -m headwatch.precompute.store.publish)",
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``headwatch: error: ...``, exit status 2, no usage dump."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="headwatch",
        description="Watch attention heads learn over training: precompute per-head statistics of every "
        "checkpoint into a store, and read them in a dashboard.",
        epilog="Run 'headwatch COMMAND --help' for a command's options. Exit status: 0 done, 1 some "
        "checkpoints failed, 2 bad arguments, 3 network failure (rerun to resume), 130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"headwatch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    s = sub.add_parser(
        "serve",
        help="serve the dashboard",
        add_help=False,
        description="Serve the dashboard (streamlit). Without DATA_DIR_OR_STORE: the stores in "
        "$HEADWATCH_DATA, else ./data when it exists (a clone's shipped runs). Other options "
        "(--server.port 8501, --dev, ...) go to `python -m headwatch.dashboard.serve`.",
    )
    s.add_argument("-h", "--help", action="help", help="show this help message and exit")
    s.add_argument(
        "target", nargs="?", metavar="DATA_DIR_OR_STORE", help="a folder of stores, or one store (a folder with meta.json)"
    )

    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False, description=text)

    i = sub.add_parser(
        "info",
        help="describe a store: model, checkpoints, tables, settings, size, what a rerun would add",
        description="Describe a store without torch: the model, its "
        "checkpoints, the tables present, the settings it was made with, its size on disk, "
        "and what `headwatch precompute` with the default options would add.",
    )
    i.add_argument("store", metavar="STORE")

    r = sub.add_parser(
        "report",
        help="write what happened in a run (stages, head types, events) as Markdown with SVG figures",
        description="Write DIR/report.md: the run's summary, its developmental stages, its head types with their "
        "emergence steps and every event with the dashboard view that shows it, and the figures as SVG files "
        "beside it (matplotlib; works offline). Needs matplotlib (the precompute extra).",
    )
    r.add_argument("store", metavar="STORE")
    r.add_argument("--out", required=True, metavar="DIR", help="folder for report.md and its figures (created)")
    r.add_argument(
        "--replicate",
        action="append",
        metavar="STORE",
        help="another run of the same recipe (a second seed): the report says whether the trajectory clusters' "
        "association with the head types holds in it too (repeatable; default: the stores beside STORE whose "
        "meta.json records this run's training recipe with another seed; a run named is asked whatever its recipe)",
    )

    c = sub.add_parser(
        "compare",
        help="compare runs (a size ladder, seeds): emergence, consolidation, joint trajectory clusters, scaling",
        description="Write DIR/compare.md: per run its parameter count, tokens, each head type's first emergence "
        "step and each layer's consolidation time; the joint trajectory clusters of every head of every run against "
        "the head types and against the runs (adjusted mutual information, permutation p-values); the timescales "
        "against the parameter count; with its figures as SVG beside it. Needs matplotlib (the precompute extra).",
    )
    c.add_argument("stores", nargs="+", metavar="STORE", help="two or more stores (any number: a new rung drops in)")
    c.add_argument("--out", required=True, metavar="DIR", help="folder for compare.md and its figures (created)")
    c.add_argument("--matrix", choices=("qk", "ov"), default="qk", help="the per-head matrix whose statistics are compared")
    c.add_argument(
        "--align",
        choices=("fraction", "tokens"),
        default="fraction",
        help="the joint trajectories' common time axis: fraction of training, or tokens seen (default: fraction)",
    )
    c.add_argument(
        "--permutations", type=int, default=None, metavar="N", help="shuffles per p-value (default 9,999, as the pages)"
    )

    # argparse and the job's option tables (no torch); the job itself is imported when a plan runs
    from headwatch.plan import add_arguments

    add_arguments(
        sub.add_parser(
            "plan",
            help="say what a precompute run would do, before it runs",
            description="List the checkpoints a run would take, the bytes it would read, the disk and store "
            "size it needs and an estimated time on this machine (from the recorded benchmarks); with --out, "
            "what the store already holds and what the run would add. Needs the precompute extra.",
        )
    )
    return p


def _serve(target: str | None, rest: list[str]) -> int:
    """Point the dashboard's settings (HEADWATCH_DATA / HEADWATCH_STORE) at ``target`` and serve."""
    from headwatch.analysis.store.format import META_FILE
    from headwatch.dashboard.settings import DATA_ENV, STORE_ENV

    if target is not None:
        path = Path(target).resolve()
        if not path.is_dir():
            return _usage(f"serve: {target!r} is not a folder of stores nor a store")
        os.environ[STORE_ENV if (path / META_FILE).is_file() else DATA_ENV] = str(path)
    elif not os.environ.get(DATA_ENV) and Path("data").is_dir():
        os.environ[DATA_ENV] = str(Path("data").resolve())
    from headwatch.dashboard.serve import main as serve

    serve(rest)
    return EXIT_OK


def _delegate(command: str, args: list[str]) -> int:
    """``main(args)`` of the subcommand's module; a missing extra is a usage error."""
    import importlib

    module_name = DELEGATED[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        extra = "train" if command == "train" else "precompute"
        return _usage(
            f"{command} needs {exc.name!r}, which this install lacks: pip install 'headwatch[{extra}]' "
            "(with torch==2.13.0 installed first for the CPU build)"
        )
    return int(module.main(args) or 0)


def _compare(args: argparse.Namespace) -> int:
    """``headwatch compare``: bad input (one store, stores of different statistics) refused in one line."""
    from headwatch.analysis.errors import StoreError

    if len(args.stores) < 2:
        return _usage(f"compare: a comparison needs at least two stores, got one ({args.stores[0]}); name two or more")
    if args.permutations is not None and args.permutations < 1:
        return _usage(f"compare: --permutations {args.permutations}: need at least 1")
    try:
        from headwatch.compare import run as compare

        return compare(args.stores, args.out, matrix=args.matrix, align=args.align, permutations=args.permutations)
    except ModuleNotFoundError as exc:
        return _usage(f"compare needs {exc.name!r}, which this install lacks: pip install 'headwatch[precompute]'")
    except StoreError as exc:
        return _usage(f"compare: {exc}")


def _usage(message: str) -> int:
    print(f"headwatch: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    """Run the ``headwatch`` command with ``argv`` (default: this process's arguments); the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return _delegate(argv[0], argv[1:])
    if argv and argv[0] == "serve" and not {"-h", "--help"} & set(argv[1 : argv.index("--") if "--" in argv else None]):
        # DATA_DIR_OR_STORE comes first; everything after it is streamlit's (its values may not start with -)
        target = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else None
        return _serve(target, argv[2:] if target is not None else argv[1:])
    parser = _parser()
    try:
        args, rest = parser.parse_known_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if rest:
        return _usage(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "info":
        from headwatch.info import run as info

        return info(args.store)
    if args.command == "report":
        from headwatch.analysis.errors import StoreError

        try:
            from headwatch.report import run as report

            return report(args.store, args.out, args.replicate)
        except ModuleNotFoundError as exc:
            return _usage(f"report needs {exc.name!r}, which this install lacks: pip install 'headwatch[precompute]'")
        except StoreError as exc:
            return _usage(f"report: {exc}")
    if args.command == "compare":
        return _compare(args)
    from headwatch.plan import run as plan

    return plan(args)
