"""What each chart of a page costs to draw, alone: its figure read off the live page, drawn again in a blank page.

    python -m benchmarks.bench_chart_draws --pages "head explorer" circuits
    python -m benchmarks.bench_chart_draws --pages circuits --repeats 9 --stores shakespeare

A page's load time beyond a bare Streamlit page's is mostly its charts' draws and Streamlit's own elements
(`benchmarks.bench_browser`). This separates the first: each page of `bench_browser.PAGES` is served on a shipped
store (``python -m headwatch.dashboard.serve``), opened in Chromium at the browser benchmark's window size, and once drawn each
chart's figure is read off the page as Plotly holds it (``gd.data``, ``gd.layout`` with Streamlit's theme applied,
``gd._transitionData._frames``). In a blank Chromium page with the plotly.js that the plotly package ships, each
figure is then drawn ``--repeats`` times with ``Plotly.newPlot`` (a new div each time, until the next animation frame
after its promise settles), as it is and with ``automargin`` off on every axis; the median of each is printed, with
the chart's widget key, size, traces and points, and the margins Plotly had to grow on the page (drawn ``_size`` past
the declared ``margin``: a margin pushed is the chart laid out and drawn a second time).

What the numbers leave out: Streamlit draws every chart twice per load (its chart component reacts once before the
width is known and again after its theme effect, `docs/dashboard.md`, "Streamlit's floor"), and its theming parses
each figure's JSON; a chart's share of a load is about twice its draw here, plus that. The blank page's plotly.js
(the plotly package's) is not the exact build Streamlit bundles (their versions: `docs/dashboard.md`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from benchmarks import bench_browser as bb
from benchmarks.common import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parent.parent

# Every chart's figure as Plotly holds it on the page, its widget key, and the margins it grew (in the order of
# `bench_browser.SIZES`, which gives each one's size, traces and points).
FIGURES = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
  const key = ((gd.closest('[class*="st-key-"]') || {className: ''}).className.match(/st-key-(\\S+)/) || [0, '?'])[1];
  const size = gd._fullLayout._size, margin = gd._fullLayout.margin;
  const grown = ['l', 'r', 't', 'b'].filter(s => size[s] - margin[s] > 0.5).map(s => `${s} +${Math.ceil(size[s] - margin[s])}`);
  return {key, grown, data: gd.data, layout: gd.layout, frames: (gd._transitionData && gd._transitionData._frames) || []};
})"""

# Median ms of ``repeats`` draws of figure ``f`` in a new div each, automargin as it is or off on every axis.
DRAW = """async ([f, repeats, marginsOff]) => {
  const out = [];
  for (let r = 0; r < repeats; r++) {
    const layout = structuredClone(f.layout);
    if (marginsOff) for (const k in layout) if (/^[xy]axis\\d*$/.test(k)) layout[k].automargin = false;
    const div = document.createElement('div');
    div.style.width = f.width + 'px';
    document.body.appendChild(div);
    const t = performance.now();
    await Plotly.newPlot(div, structuredClone(f.data), Object.assign(layout, {width: f.width, height: f.height}),
                         {displaylogo: false});
    if (f.frames.length) await Plotly.addFrames(div, structuredClone(f.frames));
    await new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)));
    out.push(performance.now() - t);
    Plotly.purge(div);
    div.remove();
  }
  out.sort((a, b) => a - b);
  return out[Math.floor(out.length / 2)];
}"""


def plotly_js() -> str:
    """The plotly.js the plotly package ships (what ``plotly.io`` embeds in HTML)."""
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()


def page_figures(context, base: str, pid: int, path: str) -> list[dict]:
    """The figures of the page at ``path`` once its charts are drawn and the page is quiet."""
    page, _, _ = bb.load(context, base + path, pid, 1)
    try:
        return [dict(size, **fig) for size, fig in zip(page.evaluate(bb.SIZES), page.evaluate(FIGURES), strict=True)]
    finally:
        page.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stores", nargs="+", default=["shakespeare", "induction-d128"], choices=[s for s in bb.STORES if bb.STORES[s]]
    )
    parser.add_argument("--pages", nargs="+", default=[p[0] for p in bb.PAGES], choices=[p[0] for p in bb.PAGES])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    (bb.RESULTS / "no-data").mkdir(parents=True, exist_ok=True)
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=bb.VIEWPORT)
        context.add_init_script(bb.INSTRUMENT)
        blank = browser.new_page(viewport=bb.VIEWPORT)
        blank.set_content("<html><body></body></html>")
        blank.add_script_tag(content=plotly_js())
        for name in args.stores:
            env = dict(os.environ, HEADWATCH_STORE=str(bb.STORES[name]), HEADWATCH_DATA=str(bb.RESULTS / "no-data"))
            with bb.serve([sys.executable, "-m", "headwatch.dashboard.serve"], cwd=ROOT, env=env) as (base, pid):
                for page_name, path, _ in bb.PAGES:
                    if page_name not in args.pages or not bb.on_store(page_name, name):
                        continue
                    for fig in page_figures(context, base, pid, path):
                        drawn = [blank.evaluate(DRAW, [fig, args.repeats, off]) for off in (False, True)]
                        rows.append((name, page_name, fig, *drawn))
                        print(f"[{name}] {page_name} {fig['key']}: {drawn[0]:.0f} ms, automargin off {drawn[1]:.0f}", flush=True)
        browser.close()
    skipped = sorted(set(args.pages) - {r[1] for r in rows})
    print(
        f"\nOne chart's draw alone in Chromium, median of {args.repeats}, ms"
        + (f" (not on these stores: {skipped})" if skipped else "")
    )
    print("\n| store | page | chart | height x width | traces | points | frames | margins grown | draw | automargin off |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for name, page_name, fig, as_is, off in rows:
        print(
            f"| {name} | {page_name} | {fig['key']} | {fig['height']:.0f} x {fig['width']:.0f} | {fig['traces']} | "
            f"{fig['points']:,} | {len(fig['frames'])} | {', '.join(fig['grown']) or '-'} | {as_is:.0f} | {off:.0f} |"
        )
    print(
        "\nPer page, every chart drawn once: "
        + "; ".join(
            f"{page_name} ({name}) {math.fsum(r[3] for r in rows if r[:2] == (name, page_name)):.0f} ms"
            for name, page_name in dict.fromkeys((r[0], r[1]) for r in rows)
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
