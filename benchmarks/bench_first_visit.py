"""A fresh server's first visitor, some seconds after the server answers: the page's load and the server's CPU.

    python -m benchmarks.bench_first_visit --paths /timeline /trajectories --wait 8 --repeats 3 \
        --also before=/tmp/main-checkout

`benchmarks.bench_browser --cold` opens its page within a second of the server answering, while the server's
warm-up thread (`dashboard.serve.warm_up`) is still importing; this one waits ``--wait`` seconds first, as a Space's
first visitor usually does. Per checkout, path and repetition: a new server, the wait, one load in Chromium until every
chart is drawn (`bench_browser.load`); printed: the load, the last message from the server and the server's CPU during
the load, ms. Results: docs/dashboard.md.

With ``--chart KEY`` the load ends instead when the chart of that widget key is drawn, pressing the page's button
``--press`` first when the page asks for it (the Trajectory map of a store whose stored maps it cannot use offers
"Compute this map"): what a visitor waits for that chart, a click included.

    python -m benchmarks.bench_first_visit --store data/induction-d128 --paths /trajectories --chart trajectory_map

Results of that: docs/benchmarks.md, "The Trajectory map's first load".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.bench_browser import INSTRUMENT, RESULTS, ROOT, TIMEOUT_MS, load, serve
from benchmarks.server import cpu_seconds

STORE = ROOT / "data" / "shakespeare-pythia-6x8"
# The chart of widget key ``key`` drawn and the page's run over ('drawn'; the time it was first seen kept in
# window.__chartAt), else 'press' while the page shows the button ``press`` (false: neither yet).
CHART_OR_BUTTON = """([key, press]) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  const running = document.querySelector('[data-testid="stStatusWidget"]');
  if (gd && gd._fullLayout && gd.querySelector('.main-svg') && !running) {
    window.__chartAt = window.__chartAt || performance.now();
    return 'drawn';
  }
  if (press && [...document.querySelectorAll('button')].some(b => b.innerText.trim() === press)) return 'press';
  return false;
}"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--paths", nargs="+", default=["/timeline", "/trajectories"])
    parser.add_argument("--store", type=Path, default=STORE)
    parser.add_argument("--wait", type=float, default=8.0, help="seconds between the server answering and the visit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--also", nargs="*", default=[], metavar="LABEL=PATH", help="other checkouts, served the same way")
    parser.add_argument("--chart", default=None, metavar="KEY", help="end the load when this chart is drawn (trajectory_map)")
    parser.add_argument("--press", default="Compute this map", help="with --chart: the button to press if the page asks")
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
                        if args.chart:
                            page, rec = load_chart(context, base + path, pid, args.chart, args.press)
                        else:
                            page, _, rec = load(context, base + path, pid, 1)
                        page.close()
                        context.close()
                        rows.setdefault((label, path), []).append(rec)
        browser.close()
    until = f"until the chart {args.chart} is drawn" if args.chart else "until every chart is drawn"
    print(f"first visit {args.wait:g} s after the server answers, {until}; store {args.store.name}; ms per repetition")
    keys = ("ms", "server_cpu_ms") if args.chart else ("ms", "last_msg_ms", "server_cpu_ms")
    print("| checkout | page | load | " + ("button pressed" if args.chart else "last message") + " | server CPU |")
    print("| --- | --- | --- | --- | --- |")
    for (label, path), recs in rows.items():
        cells = [" / ".join(f"{r[k]:,.0f}" for r in recs) for k in keys]
        if args.chart:
            cells.insert(1, " / ".join("yes" if r["pressed"] else "no" for r in recs))
        print(f"| {label} | {path} | " + " | ".join(cells) + " |")
    return 0


def load_chart(context, url: str, pid: int, key: str, press: str):
    """Open ``url`` in a new tab and wait until the chart of widget key ``key`` is drawn, pressing the button
    ``press`` once if the page shows it first; returns (tab, record: ms from the navigation's start to the chart,
    whether the button was pressed, the server's CPU ms meanwhile)."""
    page = context.new_page()
    cpu = cpu_seconds(pid)
    page.goto(url)
    state = page.wait_for_function(CHART_OR_BUTTON, arg=[key, press], timeout=TIMEOUT_MS).json_value()
    pressed = state == "press"
    if pressed:
        page.get_by_role("button", name=press).click()
        page.wait_for_function(f"args => ({CHART_OR_BUTTON})(args) === 'drawn'", arg=[key, ""], timeout=TIMEOUT_MS)
    ms = page.evaluate("window.__chartAt")
    return page, {"ms": ms, "pressed": pressed, "server_cpu_ms": 1000 * (cpu_seconds(pid) - cpu)}


if __name__ == "__main__":
    raise SystemExit(main())
