"""Compare runs benchmark: the page's rerun time comparing two runs of Pythia-1.4B and of Pythia-12B dimensions.

    python -m benchmarks.bench_compare                 # both sizes; stores cached in benchmarks/results/
    python -m benchmarks.bench_compare --sizes 1.4b --repeats 5

For each size two synthetic stores with the model's dimensions (`bench_dashboard.SIZES`: 24 x 16 and
36 x 40 heads, d_head 128; 154 checkpoints plus a duplicate; W_QK rows, no overlaps, which the page does
not read) are written once, with different seeds. Then a fresh Python process, through Streamlit's
AppTest, opens the Compare runs page on the two (``runs=A&runs=B``) and measures:

- first render: opening both stores and the page's first run (after the app's first run);
- the median (max) server time of a rerun after a widget change: statistic, alignment, depth bins,
  the bin shown, the point of training, log y; each change alternates between two values, so
  every timed rerun follows a real change;
- peak memory: the process's maximum resident set size since it started (VmHWM).

Targets (the dashboard's, docs/dashboard.md "Performance"): rerun < 300 ms at 1.4B and < 800 ms at 12B.
Prints a Markdown table and writes benchmarks/results/compare.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.bench_dashboard import SIZES, TARGET_RERUN_MS, peak_rss_mb
from benchmarks.common import ROOT, in_worker

RESULTS = ROOT / "benchmarks" / "results"
PAGE = "pages/compare_runs.py"
SEEDS = (0, 1)


def make_stores(size: str) -> list[Path]:
    """The two cached synthetic stores of one size (written on first use)."""
    from benchmarks.synthetic_store import write_synthetic_store
    from headwatch.analysis.store.format import HEADS

    paths = []
    for seed in SEEDS:
        path = RESULTS / "stores" / f"compare-{size}-seed{seed}"
        if not (path / HEADS.file).is_file():
            t = time.perf_counter()
            write_synthetic_store(
                path,
                **SIZES[size],
                n_checkpoints=154,
                model_id=f"synthetic/pythia-{size}",
                seed=seed,
                matrices=("qk",),
                overlaps=False,
            )
            print(f"[{size}] wrote {path.name} in {time.perf_counter() - t:.1f} s", flush=True)
        paths.append(path)
    return paths


# (widget kind, key, two values): round r sets values[r % 2]; the first differs from the page's default
CHANGES: list[tuple[str, str, list[Any] | None]] = [
    ("selectbox", "stat", ["kl_gauss", "stable_rank"]),
    ("radio", "align", ["step", "tokens"]),
    ("selectbox", "nbins", [6, 4]),
    ("selectbox", "bin", [0, 1]),
    ("select_slider", "point", None),  # two of the offered points, chosen when the page is open
    ("toggle", "logy", [True, False]),
]


def worker(a: Path, b: Path, repeats: int) -> dict:
    """Runs in a fresh process: the page's first render, its reruns after widget changes, peak memory."""
    data = RESULTS / "compare-data"
    data.mkdir(parents=True, exist_ok=True)
    link = data / b.name
    if not link.exists():
        link.symlink_to(b)
    os.environ["HEADWATCH_STORE"] = str(a)
    os.environ["HEADWATCH_DATA"] = str(data)
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    t = time.perf_counter()
    at.switch_page(PAGE)
    at.query_params = {"runs": [a.name, b.name]}
    at.run()
    first = time.perf_counter() - t
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="runs").value == [a.name, b.name], at.multiselect(key="runs").value
    from headwatch.analysis.store import open_store

    store = open_store(a)
    steps, tokens_per_step = [int(x) for x in store.steps], store.meta.tokens_per_step
    assert tokens_per_step is not None  # the synthetic stores record it
    times = []
    for r in range(repeats):
        for kind, key, values in CHANGES:
            if values is None:  # a checkpoint a third of the way in, and the last one, in the current alignment
                step = int(steps[[len(steps) // 3, -1][r % 2]])
                align = at.session_state["align"]
                value = {"step": step, "tokens": int(step * tokens_per_step), "fraction": round(step / steps[-1], 4)}[align]
                at.select_slider(key=key).set_value(value)
            else:
                getattr(at, kind)(key=key).set_value(values[r % 2])
            t = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - t)
            assert not at.exception, (key, [e.value for e in at.exception])
    return {
        "first_render_s": first,
        "median_ms": 1000 * statistics.median(times),
        "max_ms": 1000 * max(times),
        "n": len(times),
        "peak_rss_mb": peak_rss_mb(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the widget changes")
    parser.add_argument("--worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        a, b = args.worker
        print(json.dumps(worker(a, b, args.repeats)))
        return 0

    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {}
    for size in args.sizes:
        a, b = make_stores(size)
        results[size] = in_worker("benchmarks.bench_compare", "--worker", str(a), str(b), "--repeats", str(args.repeats))

    load = os.getloadavg()
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} (1 / 5 / 15 min) at the end, Python {platform.python_version()}"
    )
    print(f"Compare runs benchmark, {date.today().isoformat()}, {machine}\n")
    print("| two runs of | rerun, median ms (max) | target | first render, s | peak memory, MB |")
    print("| --- | --- | --- | --- | --- |")
    for size, r in results.items():
        verdict = "ok" if r["median_ms"] < TARGET_RERUN_MS[size] else "OVER"
        print(
            f"| Pythia-{size} dims ({SIZES[size]['n_layers']} x {SIZES[size]['n_heads']}, 154 checkpoints) | "
            f"{r['median_ms']:.0f} ({r['max_ms']:.0f}) | < {TARGET_RERUN_MS[size]} ms: {verdict} | "
            f"{r['first_render_s']:.1f} | {r['peak_rss_mb']:.0f} |"
        )
    (RESULTS / "compare.json").write_text(
        json.dumps({"date": date.today().isoformat(), "machine": machine, "results": results}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
