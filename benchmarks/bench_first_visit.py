"""A fresh server's first visitor, some seconds after the server answers: the page's load and the server's CPU.

    python -m benchmarks.bench_first_visit --paths /timeline /trajectories --wait 8 --repeats 3 \
        --also before=/tmp/main-checkout

`benchmarks.bench_browser --cold` opens its page within a second of the server answering, while the server's
warm-up thread (`dashboard.serve.warm_up`) is still importing; this one waits ``--wait`` seconds first, as a Space's
first visitor usually does. Per checkout, path and repetition: a new server, the wait, one load in Chromium until every
chart is drawn (`bench_browser.load`); printed: the load, the last message from the server and the server's CPU during
the load, ms. Results: docs/dashboard.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.bench_browser import INSTRUMENT, RESULTS, ROOT, load, serve

STORE = ROOT / "data" / "shakespeare-pythia-6x8"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--paths", nargs="+", default=["/timeline", "/trajectories"])
    parser.add_argument("--store", type=Path, default=STORE)
    parser.add_argument("--wait", type=float, default=8.0, help="seconds between the server answering and the visit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--also", nargs="*", default=[], metavar="LABEL=PATH", help="other checkouts, served the same way")
    args = parser.parse_args()
    roots = {"this": ROOT} | {label: Path(path) for label, path in (a.split("=", 1) for a in args.also)}
    from playwright.sync_api import sync_playwright

    data = dict(HEADWATCH_STORE=str(args.store), HEADWATCH_DATA=str(RESULTS / "no-data"))
    rows: dict[tuple[str, str], list[dict]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        for _ in range(args.repeats):
            for label, root in roots.items():
                env = dict(os.environ, **data, PYTHONPATH=str(root))
                for path in args.paths:
                    with serve([sys.executable, "-m", "headwatch.dashboard.serve"], cwd=root, env=env) as (base, pid):
                        time.sleep(args.wait)
                        context = browser.new_context()
                        context.add_init_script(INSTRUMENT)
                        page, _, rec = load(context, base + path, pid, 1)
                        page.close()
                        context.close()
                        rows.setdefault((label, path), []).append(rec)
        browser.close()
    print(f"first visit {args.wait:g} s after the server answers; store {args.store.name}; ms per repetition")
    print("| checkout | page | load | last message | server CPU |")
    print("| --- | --- | --- | --- | --- |")
    for (label, path), recs in rows.items():
        cells = [" / ".join(f"{r[k]:,.0f}" for r in recs) for k in ("ms", "last_msg_ms", "server_cpu_ms")]
        print(f"| {label} | {path} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
