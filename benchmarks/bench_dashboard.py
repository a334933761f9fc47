"""Dashboard benchmark: rerun time per page, cold start and peak memory at Pythia-1.4B and -12B size.

    python -m benchmarks.bench_dashboard              # both sizes; stores cached in benchmarks/results/
    python -m benchmarks.bench_dashboard --sizes 1.4b --repeats 5

For each size a synthetic store with the model's dimensions (154 checkpoints plus a
duplicate, 128 singular values, 202 histogram bins per head; `synthetic_store`) is
written once, with trajectory embeddings from `precompute.lenses.embeddings.add_embeddings`
(real UMAP). Then a fresh Python process, through Streamlit's AppTest, measures:

- cold start: from the process's start (before importing streamlit) until the head
  explorer, the heaviest page, has rendered once: imports, opening the store, first run;
- per page: the median server time of a rerun after a widget change (layer, head,
  statistic, k, steps, toggles; each page cycles through its own list of changes);
- peak memory: the process's maximum resident set size after all pages.

Targets (docs/dashboard.md, "Performance"): rerun < 300 ms at 1.4B and < 800 ms at 12B, cold start < 5 s,
memory < 1.5 GB. Prints a table and writes benchmarks/results/dashboard.json.
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

from benchmarks.common import ROOT, in_worker

START = time.perf_counter()
RESULTS = ROOT / "benchmarks" / "results"
SIZES: dict[str, dict[str, Any]] = {  # Pythia dimensions: layers, heads, d_head, d_model; 154 checkpoints each
    "1.4b": dict(n_layers=24, n_heads=16, d_head=128, d_model=2048),
    "12b": dict(n_layers=36, n_heads=40, d_head=128, d_model=5120),
}
TARGET_RERUN_MS = {"1.4b": 300, "12b": 800}
TARGET_COLD_S, TARGET_MEMORY_MB = 5.0, 1536

HEAD, LAYERS, ARCH, ANIM, TRAJ = (
    "pages/head_explorer.py",
    "pages/layer_view.py",
    "pages/architecture_heatmaps.py",
    "pages/animated_heatmap.py",
    "pages/trajectory_map.py",
)


def make_store(size: str) -> Path:
    """The cached synthetic store of one size (written with embeddings on first use)."""
    from benchmarks.synthetic_store import add_synthetic_overlaps, write_synthetic_store
    from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS
    from headwatch.analysis.store.lenses.overlaps import OVERLAPS
    from headwatch.precompute.lenses.embeddings import add_embeddings

    path = RESULTS / "stores" / f"pythia-{size}-synthetic"
    if not (path / EMBEDDINGS.file).is_file():
        t = time.perf_counter()
        write_synthetic_store(path, **SIZES[size], n_checkpoints=154, model_id=f"synthetic/pythia-{size}")
        print(f"[{size}] wrote store in {time.perf_counter() - t:.1f} s", flush=True)
        t = time.perf_counter()
        add_embeddings(path)
        print(f"[{size}] embeddings (UMAP, 4 statistics) in {time.perf_counter() - t:.1f} s", flush=True)
    if not (path / OVERLAPS.file).is_file():  # stores cached before overlaps existed
        add_synthetic_overlaps(path)
    return path


def page_changes(n_layers: int, n_heads: int, steps: list[int]) -> dict[str, list[tuple[str, str, list]]]:
    """Per page, the widget changes to time: (widget kind, key, values); round r sets values[r % 2].

    The first value differs from the page's default and the two alternate, so every
    timed rerun follows a real change of that widget.
    """
    a = [steps[i] for i in (0, 10, 40)]
    b = [steps[i] for i in (20, 80, 153)]
    return {
        HEAD: [
            ("selectbox", "layer", [n_layers // 2, n_layers - 1]),
            ("selectbox", "head", [3, n_heads - 1]),
            ("multiselect", "step", [a, b]),
            ("selectbox", "stat", ["kl_gauss", "stable_rank"]),
            ("toggle", "logp", [False, True]),
            ("toggle", "loglam", [True, False]),
            ("selectbox", "gap", [5, 20]),
        ],
        LAYERS: [
            ("selectbox", "stat", ["kl_gauss", "lambda"]),
            ("selectbox", "layer", [n_layers // 2, n_layers - 1]),
            ("toggle", "logy", [True, False]),
            ("selectbox", "stat", ["stable_rank", "std"]),
        ],
        ARCH: [
            ("selectbox", "stat", ["lambda", "kl_gauss"]),
            ("toggle", "logc", [True, False]),
            ("selectbox", "stat", ["lambda", "std"]),
            ("slider", "k", [5, 20]),
        ],
        ANIM: [
            ("select_slider", "step", [steps[10], steps[120]]),
            ("selectbox", "stat", ["stable_rank", "std"]),
            ("toggle", "logc", [True, False]),
            ("select_slider", "step", [steps[153], steps[40]]),
        ],
        TRAJ: [
            ("selectbox", "stat", ["spectral_entropy", "std"]),
            ("selectbox", "layer", [3, n_layers - 1]),
            ("selectbox", "head", [5, 1]),
            ("selectbox", "stat", ["stable_rank", "kl_gauss"]),
        ],
    }


def worker(store: Path, repeats: int) -> dict:
    """Runs in a fresh process: cold start, rerun times per page, peak memory."""
    os.environ["HEADWATCH_STORE"] = str(store)
    os.environ["HEADWATCH_DATA"] = str(RESULTS / "no-data")
    (RESULTS / "no-data").mkdir(parents=True, exist_ok=True)

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    at.switch_page(HEAD).run()
    cold = time.perf_counter() - START
    assert not at.exception, [e.value for e in at.exception]

    from headwatch.analysis.store import open_store

    s = open_store(store)
    out: dict = {"cold_start_s": cold, "pages": {}}
    for page, todo in page_changes(s.n_layers, s.n_heads, [int(x) for x in s.steps]).items():
        at.switch_page(page).run()
        times = []
        for r in range(repeats):
            for kind, key, values in todo:
                if kind == "slider" and key not in at.session_state:
                    continue  # k exists only while the statistic is lambda
                getattr(at, kind)(key=key).set_value(values[r % 2])
                t = time.perf_counter()
                at.run()
                times.append(time.perf_counter() - t)
                assert not at.exception, (page, key, [e.value for e in at.exception])
        out["pages"][page] = {"median_ms": 1000 * statistics.median(times), "max_ms": 1000 * max(times), "n": len(times)}
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory since its exec (VmHWM). Not ``getrusage``'s ru_maxrss: on Linux a
    child started by fork + exec inherits the parent's peak at the fork, which here is the store writer's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--repeats", type=int, default=3, help="rounds of each page's widget changes")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeats)))
        return 0

    RESULTS.mkdir(parents=True, exist_ok=True)
    results = {}
    for size in args.sizes:
        store = make_store(size)
        results[size] = in_worker("benchmarks.bench_dashboard", "--worker", str(store), "--repeats", str(args.repeats))

    names = {HEAD: "head explorer", LAYERS: "layer view", ARCH: "architecture", ANIM: "animation", TRAJ: "trajectory map"}
    lines = [f"| page | {' | '.join(f'{s} median ms (max)' for s in results)} |", f"| --- |{' --- |' * len(results)}"]
    for page, name in names.items():
        cells = [f"{r['pages'][page]['median_ms']:.0f} ({r['pages'][page]['max_ms']:.0f})" for r in results.values()]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    cold = " | ".join(f"{r['cold_start_s']:.1f}" for r in results.values())
    memory = " | ".join(f"{r['peak_rss_mb']:.0f}" for r in results.values())
    lines.append(f"| cold start, s | {cold} |")
    lines.append(f"| peak memory, MB | {memory} |")
    verdicts = []
    for size, r in results.items():
        worst = max(p["median_ms"] for p in r["pages"].values())
        verdicts.append(
            f"{size}: rerun {'ok' if worst < TARGET_RERUN_MS[size] else 'OVER'} (< {TARGET_RERUN_MS[size]} ms), "
            f"cold start {'ok' if r['cold_start_s'] < TARGET_COLD_S else 'OVER'} (< {TARGET_COLD_S:.0f} s), "
            f"memory {'ok' if r['peak_rss_mb'] < TARGET_MEMORY_MB else 'OVER'} (< {TARGET_MEMORY_MB} MB)"
        )
    load = os.getloadavg()
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.1f} at the end, Python {platform.python_version()}"
    )
    print(f"dashboard benchmark, {date.today().isoformat()}, {machine}")
    print("\n".join(lines))
    print("\n".join(verdicts))
    (RESULTS / "headwatch.dashboard.json").write_text(
        json.dumps({"date": date.today().isoformat(), "machine": machine, "results": results}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
