"""Browser benchmark: what a user waits for on each dashboard page, next to a bare Streamlit page.

    python -m benchmarks.bench_browser                       # both stores, 3 repetitions
    python -m benchmarks.bench_browser --stores shakespeare --pages "layer view" --repeats 5
    python -m benchmarks.bench_browser --stores shakespeare --pages "head explorer" --cold --loads-only \
        --also before=/tmp/main-checkout                     # two checkouts page by page, one bare page

Every page of the navigation is timed (the refined LLC's on ``induction-d128``, the one shipped store
with its tables); pages without a simple select box or radio have their loads timed only.

Each store is served with ``python -m headwatch.dashboard.serve`` (as ``scripts/dashboard.sh``
does) and opened in Debian's Chromium through Playwright. For every page:

- load: a new tab opens the page's URL; the time from the navigation's start until
  the page's Plotly charts are all drawn (every ``.js-plotly-plot`` has its SVG and
  its ``_fullLayout``, the expected number of them) and Streamlit's running
  indicator is gone, or later, if a chart was still changing after that, the last
  change (the charts are watched until nothing changes for 1 s);
- change: one widget change (a select box or a radio, alternating between two
  values) in an open tab; the time from the pointer going down on the choice until
  the last DOM change inside a chart (or, where no chart depends on the widget, the
  rerun's last WebSocket message).

With ``--cold``, also a **cold load** per page: a newly started server (no Streamlit cache
filled) opened in a new browser context (empty HTTP cache), the time of its first load; the
bare page likewise on its own fresh server. Each cold load costs a server start (a few
seconds, not timed).

Next to them, the same two times for a bare page: a generated one-file Streamlit app
in a temporary folder, served by ``streamlit run`` with the same options, with the
same number of charts at the same heights and widths (one 200-point line each) and
one select box (a radio for the overview, whose only chart, the sidebar's loss
curve, does not depend on its widget: there the bare charts stay the same too). The
ratio is page / bare page. Caches are warm: every timed load and change was done
once first.

Every page is also timed against a second bare page with the page's own Streamlit elements (``ELEMENTS``, read off
the loaded page): the same widgets with their labels, options, chosen tags and help icons, the same tabs, headings,
markdown and captions (their text), download buttons, data grids (as many rows and columns, the same height) and the
same navigation, with charts of the same sizes, one under another. It draws what Streamlit itself draws for the page
and nothing of headwatch's (no figures of its own, no store, no custom component), so that ratio says what the page
costs beyond Streamlit's own elements: Streamlit's floor for the page (the data grid, for one, is a canvas component
with its own script chunk, which the chart-only bare page never loads).

To say where the time goes, each operation also records: the server process's CPU
time (``/proc/PID/stat``: the rerun's Python work and the figures' serialisation),
when the page sent its first WebSocket message (the widget's new value), when the
first and the last reply arrived and how many bytes came, how many times Plotly drew
a chart (``plotly_afterplot`` events), Chromium's main-thread busy time (CDP
``Performance.getMetrics``: ``TaskDuration``, of which ``ScriptDuration``,
``RecalcStyleDuration`` and ``LayoutDuration``; painting and the like are the rest)
and the charts' sizes (traces, data points, subplots, animation frames). Medians of
``--repeats``. Prints tables and writes benchmarks/results/browser.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.common import CHROMIUM, CHROMIUM_ARGS
from benchmarks.server import cpu_seconds, stop, wait_healthy
from headwatch.dashboard.labels import STATS

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "benchmarks" / "results"
VIEWPORT: ViewportSize = {"width": 1500, "height": 1900}
SERVER_OPTIONS = ["--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"]
QUIET_MS = 1000  # an operation is over when no chart changed and no message came for this long
TIMEOUT_MS = 180_000
STORES = {
    "pythia-1.4b-synthetic": None,
    "shakespeare": ROOT / "data" / "shakespeare-pythia-6x8",
    "induction-d128": ROOT / "data" / "induction-d128",  # the refined LLC's page (the others lack llc.parquet)
}
KL, SIGMA = STATS["kl_gauss"].label, STATS["std"].label  # what the statistic select boxes show

# (name, URL path and query, widget change: (kind, widget key, the two values' labels))
PAGES = [
    ("overview", "/", ("radio", "xscale", ["log", "linear"])),
    ("head explorer", "/head?layer=2&head=1", ("select", "layer", ["3", "2"])),
    ("layer view", "/layers?stat=kl_gauss&layer=3", ("select", "layer", ["4", "3"])),
    ("architecture heatmaps", "/architecture?stat=std", ("select", "stat", [KL, SIGMA])),
    ("animation", "/animation?stat=std", ("select", "stat", [KL, SIGMA])),
    ("trajectory map", "/trajectories?stat=kl_gauss", ("select", "stat", [SIGMA, KL])),
    ("random-matrix lab", "/lab?dmodel=1024&nheads=8", ("select", "nheads", ["16", "8"])),
    ("timeline", "/timeline", None),
    ("heads", "/heads?stat=kl_gauss", ("select", "stat", [SIGMA, KL])),
    ("circuits", "/circuits?layer=5&head=0", ("select", "layer", ["4", "5"])),
    ("head similarity", "/similarity?layer=0", ("select", "layer", ["every head", "layer 0"])),
    ("weight matrices", "/weights?layer=0", ("select", "layer", ["1", "0"])),
    ("forward lenses", "/lenses", None),
    ("compare runs", "/compare", None),
    ("refined LLC", "/llc", ("radio", "colour", ["cluster", "layer"])),
]
# Pages timed only on some stores (the others lack their tables), and stores timed only for some pages.
PAGE_STORES = {"refined LLC": ["induction-d128"]}
# A widget of None: loads only (the page has no select box or radio that redraws a chart simply).

# Installed in every tab before the page's own scripts: counts WebSocket traffic, records when a chart's DOM
# last changed and when the pointer went down on the armed control.
INSTRUMENT = """
(() => {
  const B = window.__bench = {bytes: 0, msgs: 0, sent: 0, firstMsg: 0, lastMsg: 0, lastChart: 0, draws: 0,
                               armed: false, tChange: null};
  const WS = window.WebSocket;
  const Wrapped = function (...args) {
    const ws = new WS(...args);
    const send = ws.send.bind(ws);
    ws.send = (data) => { if (!B.sent) B.sent = performance.now(); return send(data); };
    ws.addEventListener("message", (e) => {
      const now = performance.now();
      B.bytes += e.data.byteLength ?? e.data.size ?? e.data.length ?? 0;
      B.msgs += 1;
      if (!B.firstMsg) B.firstMsg = now;
      B.lastMsg = now;
    });
    return ws;
  };
  Wrapped.prototype = WS.prototype;
  Object.assign(Wrapped, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  window.WebSocket = Wrapped;
  const arm = () => { if (B.armed) { B.tChange = performance.now(); B.armed = false; } };
  window.addEventListener("pointerdown", arm, true);
  const hooked = new WeakSet();  // charts whose draws are counted (Plotly's plotly_afterplot event)
  new MutationObserver((records) => {
    for (const gd of document.getElementsByClassName("js-plotly-plot")) {
      if (!hooked.has(gd) && gd.on) { hooked.add(gd); gd.on("plotly_afterplot", () => { B.draws += 1; }); }
    }
    for (const r of records) {
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      if (el && el.closest && el.closest(".js-plotly-plot")) { B.lastChart = performance.now(); return; }
    }
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
})();
"""
DRAWN = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .filter(gd => gd._fullLayout && gd.querySelector('.main-svg')).length"""
RUNNING = "document.querySelector('[data-testid=\"stStatusWidget\"]')"
# all expected charts drawn, the run over: record when that was first seen
LOADED = f"""n => {{
  const B = window.__bench;
  if (!B.loaded && ({DRAWN})() >= n && !{RUNNING}) B.loaded = performance.now();
  return B.loaded && !{RUNNING} && performance.now() - Math.max(B.lastChart, B.lastMsg, B.loaded) > {QUIET_MS};
}}"""
CHANGED = f"""() => {{
  const B = window.__bench;
  return B.tChange !== null && B.lastMsg > B.tChange && !{RUNNING}
    && performance.now() - Math.max(B.lastChart, B.lastMsg) > {QUIET_MS};
}}"""
SIZES = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
  const len = a => (a && a.length) || 0;
  const points = gd._fullData.reduce(
    (n, t) => n + (t.z ? len(t.z) * (len(t.z[0]) || 1) : Math.max(len(t.x), len(t.y))), 0);
  return {height: gd._fullLayout.height, width: gd._fullLayout.width, traces: gd._fullData.length, points,
          subplots: (gd._fullLayout._subplots.cartesian || []).length,
          frames: len(gd._transitionData && gd._transitionData._frames)};
})"""

# The page's Streamlit elements in document order, per area (sidebar, main), and its navigation's page titles: what
# the bare page "with the page's elements" draws (`BARE_APP`, ?e=NAME): the same widgets with the same labels, options,
# chosen tags and help icons, the same headings, markdown and captions (their text, without its formatting), the same
# tabs, download buttons, charts (height x width) and grids. Layout blocks (columns) are not copied: their elements
# come one under another. An element of the page's own (a custom component) has no counterpart.
ELEMENTS = """() => {
  const text = el => (el ? el.innerText : '').trim();
  const help = el => !!el.querySelector('[data-testid="stTooltipIcon"]');
  const label = el => text(el.querySelector('[data-testid="stWidgetLabel"]')) || 'label';
  const kinds = {
    stHeading: el => ({k: 'heading', level: Number((el.querySelector('h1,h2,h3,h4,h5,h6') || {tagName: 'H3'}).tagName[1]),
                      text: text(el)}),
    stMarkdown: el => ({k: el.querySelector('[data-testid="stCaptionContainer"]') ? 'caption' : 'markdown', text: text(el)}),
    stSelectbox: el => ({k: 'select', label: label(el), help: help(el)}),
    stMultiSelect: el => ({k: 'multiselect', label: label(el), help: help(el),
                          tags: [...el.querySelectorAll('[data-tag]')].map(t => t.getAttribute('aria-label'))}),
    stRadio: el => ({k: 'radio', label: label(el), help: help(el),
                    options: [...el.querySelectorAll('[data-testid="stRadioOption"]')].map(text),
                    horizontal: getComputedStyle(el.querySelector('[role="radiogroup"]') || el).flexDirection === 'row'}),
    stCheckbox: el => ({k: el.querySelector('[role="switch"]') ? 'toggle' : 'checkbox', label: label(el) || text(el),
                       help: help(el), on: !!(el.querySelector('input') || {}).checked}),
    stSlider: el => ({k: 'slider', label: label(el), help: help(el)}),
    stDownloadButton: el => ({k: 'download', icon: text(el.querySelector('[data-testid="stIconMaterial"]')),
                             label: text(el.querySelector('[data-testid="stMarkdownContainer"]')) || 'Download',
                             type: (el.querySelector('button') || {getAttribute: () => null}).getAttribute('kind')}),
    stTabs: el => ({k: 'tabs', labels: [...el.querySelectorAll('[data-testid="stTab"]')].map(text)}),
    stHtml: el => ({k: 'html', text: text(el)}),
    stAlert: el => ({k: 'info', text: text(el)}),
    stPlotlyChart: el => { const gd = el.querySelector('.js-plotly-plot');
      return {k: 'chart', height: Math.round(gd._fullLayout.height), width: Math.round(gd._fullLayout.width)}; },
    stDataFrame: el => { const grid = el.querySelector('[role="grid"], [aria-rowcount]');
      return {k: 'grid', rows: Math.max(Number(grid && grid.getAttribute('aria-rowcount') || 1) - 1, 1),
              cols: Math.max(Number(grid && grid.getAttribute('aria-colcount') || 1), 1),
              height: Math.max(Math.round(el.getBoundingClientRect().height), 80)}; },
  };
  const sel = Object.keys(kinds).map(k => `[data-testid="${k}"]`).join(',');
  const area = name => { const root = document.querySelector(`[data-testid="${name}"]`);
    return root ? [...root.querySelectorAll(sel)].map(el => kinds[el.getAttribute('data-testid')](el)) : []; };
  const link = el => ({title: text(el.querySelector('[data-testid="stMarkdownContainer"]')),
                       icon: text(el.querySelector('[data-testid="stIconMaterial"]'))});
  return {nav: [...document.querySelectorAll('[data-testid="stSidebarNavLink"]')].map(link),
          sidebar: area('stSidebarUserContent'), main: area('stMain')};
}"""

TEXT_KINDS = {"heading", "markdown", "caption", "html", "info"}  # the kinds of ELEMENTS that are text, not widgets

BARE_APP = '''"""A bare page: Plotly charts of given sizes (?c=HxW&c=HxW...) and one widget; nothing else. Or (?e=NAME)
the elements listed in NAME.json beside this file (a page's, read by ELEMENTS), under a navigation with the same page
titles."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

st.set_page_config(layout="wide")


def chart(rng, height, width, key):
    fig = go.Figure(go.Scatter(y=rng.standard_normal(200).cumsum(), mode="lines"), layout=dict(height=height))
    st.plotly_chart(fig, width=width, key=key)


def grid(rng, rows, cols, height, key):
    frame = pd.DataFrame(rng.standard_normal((rows, cols)), columns=[f"column {j}" for j in range(cols)])
    st.dataframe(frame, height=height, hide_index=True, key=key)


def element(e, n, rng):
    """One element of a page's, drawn by Streamlit alone (key: its index)."""
    k, key, tip = e["k"], f"e{n}", "help" if e.get("help") else None
    if k == "heading":
        st.markdown("#" * e["level"] + " " + e["text"])
    elif k in ("markdown", "html", "info"):
        (st.info if k == "info" else st.markdown)(e["text"])
    elif k == "caption":
        st.caption(e["text"])
    elif k == "select":
        st.selectbox(e["label"], ["a", "b"], key=key, help=tip)
    elif k == "multiselect":
        st.multiselect(e["label"], e["tags"] + ["another"], default=e["tags"], key=key, help=tip)
    elif k == "radio":
        st.radio(e["label"], e["options"] or ["a"], horizontal=e["horizontal"], key=key, help=tip)
    elif k in ("toggle", "checkbox"):
        (st.toggle if k == "toggle" else st.checkbox)(e["label"], e["on"], key=key, help=tip)
    elif k == "slider":
        st.select_slider(e["label"], list(range(10)), key=key, help=tip)
    elif k == "download":
        icon = f":material/{e['icon']}:" if e["icon"] else None
        kind = e["type"] if e["type"] in ("primary", "secondary", "tertiary") else "secondary"
        st.download_button(e["label"], "a,b\\n1,2\\n", file_name="data.csv", key=key, on_click="ignore", icon=icon, type=kind)
    elif k == "tabs":
        st.tabs(e["labels"] or ["tab"])
    elif k == "chart":
        chart(rng, e["height"], e["width"], key)
    elif k == "grid":
        grid(rng, e["rows"], e["cols"], e["height"], key)


def page_of_elements(spec):
    rng = np.random.default_rng(0)
    with st.sidebar:
        for n, e in enumerate(spec["sidebar"]):
            element(e, f"s{n}", rng)
    for n, e in enumerate(spec["main"]):
        element(e, n, rng)


if "e" in st.query_params:
    spec = json.loads((Path(__file__).parent / f"{st.query_params['e']}.json").read_text())
    links = [(n["title"] or f"page {i}", f":material/{n['icon']}:" if n["icon"] else None) for i, n in enumerate(spec["nav"])]
    first, *others = links or [("page", None)]
    pages = [st.Page(lambda: page_of_elements(spec), title=first[0], icon=first[1], default=True)]
    pages += [st.Page(lambda: None, title=t, icon=icon, url_path=f"p{i}") for i, (t, icon) in enumerate(others)]
    st.navigation(pages, expanded=True).run()
    st.stop()
charts = [tuple(int(n) for n in c.split("x")) for c in st.query_params.get_all("c")]
if st.query_params.get("w") == "radio":  # the widget does not change the charts
    value = st.radio("v", ["a", "b"], key="v", horizontal=True)
    seed = 0
else:
    value = st.selectbox("v", ["a", "b"], key="v")
    seed = ["a", "b"].index(value)
rng = np.random.default_rng(seed)
for i, (height, width) in enumerate(charts):
    chart(rng, height, width, f"chart{i}")
'''


@contextmanager
def serve(cmd: list[str], *, cwd: Path, env: dict[str, str]):
    """Start a Streamlit server (``cmd`` plus a free port) and yield (base URL, pid); stop it afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w", prefix="bench-browser-", suffix=".log", delete=False)  # noqa: SIM115 (closed in the finally below)
    proc = subprocess.Popen(
        [*cmd, *SERVER_OPTIONS, "--server.port", str(port)], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        health = wait_healthy(proc, base, seconds=120)
        if health != "healthy":
            raise RuntimeError(f"server {'exited' if health == 'exited' else 'not healthy after 120 s'}; see {log.name}")
        yield base, proc.pid
    finally:
        stop(proc)
        log.close()
        os.unlink(log.name)


def browser_metrics(cdp) -> dict[str, float]:
    """Chromium's cumulative main-thread times for the tab, in ms."""
    got = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {k: 1000 * got[k] for k in ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")}


def load(context, url: str, pid: int, charts: int):
    """Open ``url`` in a new tab and wait until ``charts`` charts are drawn; returns (tab, CDP session, record)."""
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    cpu = cpu_seconds(pid)
    page.goto(url)
    page.wait_for_function(LOADED, arg=charts, timeout=TIMEOUT_MS)
    b = page.evaluate("window.__bench")
    m = browser_metrics(cdp)
    return (
        page,
        cdp,
        {
            "ms": max(b["loaded"], b["lastChart"]),
            "drawn_ms": b["loaded"],
            "server_cpu_ms": 1000 * (cpu_seconds(pid) - cpu),
            "bytes": b["bytes"],
            "draws": b["draws"],
            "sent_ms": b["sent"],
            "first_msg_ms": b["firstMsg"],
            "last_msg_ms": b["lastMsg"],
            "busy_ms": m["TaskDuration"],
            "script_ms": m["ScriptDuration"],
            "layout_ms": m["LayoutDuration"],
            "style_ms": m["RecalcStyleDuration"],
        },
    )


def change(page, cdp, pid: int, kind: str, key: str, label: str) -> dict:
    """Change widget ``key`` to ``label`` and wait until the page is quiet again."""
    if kind == "select":
        page.locator(f".st-key-{key} [role='combobox']").click()
        target = page.get_by_role("option", name=label, exact=True)
        target.wait_for()
    else:
        target = page.locator(f".st-key-{key}").get_by_text(label, exact=True)
    page.wait_for_timeout(300)
    before, cpu = browser_metrics(cdp), cpu_seconds(pid)
    page.evaluate(
        "() => Object.assign(window.__bench, {bytes: 0, msgs: 0, sent: 0, firstMsg: 0, lastMsg: 0, "
        "lastChart: 0, draws: 0, tChange: null, armed: true})"
    )
    target.click()
    page.wait_for_function(CHANGED, timeout=TIMEOUT_MS)
    b = page.evaluate("window.__bench")
    after, t0 = browser_metrics(cdp), b["tChange"]
    redrawn = b["lastChart"] > t0
    return {
        "ms": (b["lastChart"] if redrawn else b["lastMsg"]) - t0,
        "redrawn": redrawn,
        "server_cpu_ms": 1000 * (cpu_seconds(pid) - cpu),
        "bytes": b["bytes"],
        "draws": b["draws"],
        "sent_ms": b["sent"] - t0,
        "first_msg_ms": b["firstMsg"] - t0,
        "last_msg_ms": b["lastMsg"] - t0,
        "busy_ms": after["TaskDuration"] - before["TaskDuration"],
        "script_ms": after["ScriptDuration"] - before["ScriptDuration"],
        "layout_ms": after["LayoutDuration"] - before["LayoutDuration"],
        "style_ms": after["RecalcStyleDuration"] - before["RecalcStyleDuration"],
    }


def median(records: list[dict]) -> dict:
    """Per field, the median over the repetitions (booleans: all of them)."""
    return {
        k: all(r[k] for r in records) if isinstance(v, bool) else statistics.median(r[k] for r in records)
        for k, v in records[0].items()
    }


def measure(
    context,
    base: str,
    pid: int,
    path: str,
    widget: tuple[str, str, list[str]] | None,
    repeats: int,
    charts: int | None = None,
) -> dict:
    """Loads and changes of one page (``widget`` None: loads only), medians of ``repeats`` after one untimed round of each."""
    if charts is None:  # how many charts the page draws: count them once it is quiet
        page, _, _ = load(context, base + path, pid, 1)  # every page draws a chart (the sidebar's loss curve)
        charts = page.evaluate(DRAWN)
        page.close()
    loads = []
    for r in range(repeats + 1):
        page, cdp, rec = load(context, base + path, pid, charts)
        sizes, elements = page.evaluate(SIZES), page.evaluate(ELEMENTS)
        if r:
            loads.append(rec)
        if r < repeats:
            page.close()
    changes = []
    if widget is not None:
        kind, key, labels = widget
        changes = [change(page, cdp, pid, kind, key, labels[r % 2]) for r in range(repeats + 2)][2:]
    page.close()
    return {
        "charts": charts,
        "sizes": sizes,
        "elements": elements,
        "load": median(loads),
        "change": median(changes) if changes else None,
        "loads_ms": [r["ms"] for r in loads],
        "changes_ms": [r["ms"] for r in changes],
    }


def bare_path(sizes: list[dict], kind: str) -> str:
    """The bare page's URL: charts of the sizes in ``sizes``, widget ``kind``."""
    return "/?" + "".join(f"c={round(s['height'])}x{round(s['width'])}&" for s in sizes) + f"w={kind}"


def _ms(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values) + " ms"


def cold_loads(browser, cmd: list[str], *, cwd: Path, env: dict[str, str], path: str, charts: int, repeats: int) -> list[dict]:
    """``repeats`` first loads of ``path``, each on a newly started server in a new browser context."""
    records = []
    for _ in range(repeats):
        with serve(cmd, cwd=cwd, env=env) as (base, pid):
            context = browser.new_context(viewport=VIEWPORT)
            context.add_init_script(INSTRUMENT)
            _, _, rec = load(context, base + path, pid, charts)
            records.append(rec)
            context.close()
    return records


def on_store(page: str, store: str) -> bool:
    """Whether ``page`` is timed on ``store`` (`PAGE_STORES`: a store named there serves only the pages naming it)."""
    if page in PAGE_STORES:
        return store in PAGE_STORES[page]
    return store not in {s for names in PAGE_STORES.values() for s in names}


def run(
    store: Path,
    name: str,
    pages: list[str],
    repeats: int,
    context,
    bare_base: str,
    bare_pid: int,
    cold: tuple | None = None,
    *,
    bare_dir: Path,
    roots: dict[str, Path] | None = None,
    loads_only: bool = False,
) -> list[dict]:
    """Every page of ``pages`` on ``store`` against the bare page, and against a bare page with the page's elements
    (`ELEMENTS`, written to ``bare_dir``, the bare app's folder); ``cold``: (browser, bare server cmd, its folder).

    ``roots``: the checkouts to serve the app from, by label (default: this one, unlabelled); each page is timed
    from every one in turn, against one bare page's figures. ``loads_only``: no widget changes.
    """
    roots = roots or {"": ROOT}
    env = dict(os.environ, HEADWATCH_STORE=str(store), HEADWATCH_DATA=str(RESULTS / "no-data"))
    envs = {label: dict(env, PYTHONPATH=str(root)) for label, root in roots.items()}
    app_cmd = [sys.executable, "-m", "headwatch.dashboard.serve"]
    rows = []
    with ExitStack() as stack:
        servers = {label: stack.enter_context(serve(app_cmd, cwd=root, env=envs[label])) for label, root in roots.items()}
        for page_name, path, widget in (p for p in PAGES if p[0] in pages and on_store(p[0], name)):
            t = time.perf_counter()
            widget = None if loads_only else widget
            apps = {label: measure(context, base, pid, path, widget, repeats) for label, (base, pid) in servers.items()}
            first = next(iter(apps.values()))
            kind = "radio" if widget and widget[0] == "radio" else "select"
            bare = measure(
                context,
                bare_base,
                bare_pid,
                bare_path(first["sizes"], kind),
                (kind, "v", ["b", "a"]) if widget else None,
                repeats,
                charts=first["charts"],
            )
            if cold is not None:
                browser, bare_cmd, bare_cwd = cold
                for label, app in apps.items():
                    app_cold = cold_loads(
                        browser, app_cmd, cwd=roots[label], env=envs[label], path=path, charts=app["charts"], repeats=repeats
                    )
                    app["cold"], app["colds_ms"] = median(app_cold), [r["ms"] for r in app_cold]
                bare_cold = cold_loads(
                    browser,
                    bare_cmd,
                    cwd=bare_cwd,
                    env=dict(os.environ),
                    path=bare_path(first["sizes"], kind),
                    charts=first["charts"],
                    repeats=repeats,
                )
                bare["cold"], bare["colds_ms"] = median(bare_cold), [r["ms"] for r in bare_cold]
            # the same Streamlit elements on a bare page: what Streamlit itself costs for the page's widgets, text,
            # navigation and grids (its floor), with charts of the same sizes
            spec = f"{name}-{page_name}".replace(" ", "-")
            (bare_dir / f"{spec}.json").write_text(json.dumps(first["elements"]))
            drawn = sum(e["k"] == "chart" for area in ("sidebar", "main") for e in first["elements"][area])
            epath = f"/?e={spec}"
            same = measure(context, bare_base, bare_pid, epath, None, repeats, charts=drawn)
            if cold is not None:
                got = cold_loads(browser, bare_cmd, cwd=bare_cwd, env=dict(os.environ), path=epath, charts=drawn, repeats=repeats)
                same["cold"], same["colds_ms"] = median(got), [r["ms"] for r in got]
            for label, app in apps.items():
                shown = f"{page_name} ({label})" if label else page_name
                rows.append({"store": name, "page": shown, "path": path, "app": app, "bare": bare, "bare_elements": same})
                if cold is not None:
                    print(f"[{name}] {shown}: cold loads {_ms(app['colds_ms'])} (bare {_ms(bare['colds_ms'])})", flush=True)
                print(
                    f"[{name}] {shown}: loads {_ms(app['loads_ms'])} (bare {_ms(bare['loads_ms'])}), changes "
                    f"{_ms(app['changes_ms'])} (bare {_ms(bare['changes_ms'])}) [{time.perf_counter() - t:.0f} s]",
                    flush=True,
                )
    return rows


def tables(rows: list[dict]) -> str:
    out = [
        "| store | page | charts | points | load, ms | bare | ratio | change, ms | bare | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    with_cold = all("cold" in r["app"] for r in rows)
    if with_cold:
        out[0] += " cold load, ms | bare | ratio |"
        out[1] += " ---: | ---: | ---: |"
    for r in rows:
        a, b = r["app"], r["bare"]
        points = sum(s["points"] for s in a["sizes"])
        if a["change"] is None:
            changed = "- | - | - |"
        else:
            mark = "" if a["change"]["redrawn"] else "*"
            changed = f"{a['change']['ms']:.0f}{mark} | {b['change']['ms']:.0f} | {a['change']['ms'] / b['change']['ms']:.1f} |"
        out.append(
            f"| {r['store']} | {r['page']} | {a['charts']} | {points:,} | {a['load']['ms']:.0f} | "
            f"{b['load']['ms']:.0f} | {a['load']['ms'] / b['load']['ms']:.1f} | "
            + changed
            + (f" {a['cold']['ms']:.0f} | {b['cold']['ms']:.0f} | {a['cold']['ms'] / b['cold']['ms']:.1f} |" if with_cold else "")
        )
    out += [
        "",
        "Where the time goes (page / bare page; ms unless said; load: from the navigation's start, change: "
        "from the pointer down):",
        "",
        "| store | page | op | server CPU | sent | first msg | last msg | KB received | chart draws | "
        "browser busy | of it script | of it style | of it layout | done |",
        "| --- | --- | --- |" + " ---: |" * 11,
    ]
    for r in rows:
        for op in ("load", "change", "cold"):
            a, b = r["app"].get(op), r["bare"].get(op)
            if a is None:
                continue
            cells = [
                f"{a[k] / (1024 if k == 'bytes' else 1):.0f} / {b[k] / (1024 if k == 'bytes' else 1):.0f}"
                for k in (
                    "server_cpu_ms",
                    "sent_ms",
                    "first_msg_ms",
                    "last_msg_ms",
                    "bytes",
                    "draws",
                    "busy_ms",
                    "script_ms",
                    "style_ms",
                    "layout_ms",
                    "ms",
                )
            ]
            out.append(f"| {r['store']} | {r['page']} | {op} | " + " | ".join(cells) + " |")
    with_elements = [r for r in rows if r.get("bare_elements")]
    if with_elements:
        out += [
            "",
            "Against a bare page with the page's elements (`ELEMENTS`: the same widgets, labels, help icons, tabs, "
            "headings, markdown and captions, download buttons, data grids and navigation, charts of the same sizes): "
            "what Streamlit itself costs for them, page / that bare page:",
            "",
            "| store | page | widgets | text elements | grids | load, ms | bare with its elements | ratio |"
            + (" cold load, ms | bare with its elements | ratio |" if with_cold else ""),
            "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |" + (" ---: | ---: | ---: |" if with_cold else ""),
        ]
        for r in with_elements:
            a, g = r["app"], r["bare_elements"]
            listed = [e for area in ("sidebar", "main") for e in a["elements"][area]]
            texts = sum(e["k"] in TEXT_KINDS for e in listed)
            widgets = sum(e["k"] not in {*TEXT_KINDS, "chart", "grid"} for e in listed)
            shape = ", ".join(f"{e['rows']}x{e['cols']}" for e in listed if e["k"] == "grid") or "-"
            out.append(
                f"| {r['store']} | {r['page']} | {widgets} | {texts} | {shape} | "
                + " | ".join(
                    f"{a[op]['ms']:.0f} | {g[op]['ms']:.0f} | {a[op]['ms'] / g[op]['ms']:.2f}"
                    for op in ("load", "cold")
                    if op in g
                )
                + " |"
            )
    out += ["", "Chart sizes: (height x width px, traces, points, subplots, frames) per chart", ""]
    for r in rows:
        sizes = "; ".join(
            f"({s['height']:.0f}x{s['width']:.0f}, {s['traces']}, {s['points']:,}, {s['subplots']}, {s['frames']})"
            for s in r["app"]["sizes"]
        )
        out.append(f"- {r['store']} / {r['page']}: {sizes}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", nargs="+", default=list(STORES), choices=list(STORES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time cold loads (a fresh server and browser context each)")
    parser.add_argument("--pages", nargs="+", default=[p[0] for p in PAGES], choices=[p[0] for p in PAGES])
    parser.add_argument(
        "--also",
        metavar="LABEL=PATH",
        nargs="+",
        default=[],
        help="also serve the app from another checkout (the code before a change), timed page by page in the same run",
    )
    parser.add_argument("--loads-only", action="store_true", help="time loads only, no widget changes")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from benchmarks.bench_dashboard import make_store

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "no-data").mkdir(exist_ok=True)
    stores = {name: STORES[name] or make_store("1.4b") for name in args.stores}
    load_before = os.getloadavg()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as tmp, sync_playwright() as p:
        (Path(tmp) / "bare.py").write_text(BARE_APP)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=VIEWPORT)
        context.add_init_script(INSTRUMENT)
        bare_cmd = [sys.executable, "-m", "streamlit", "run", "bare.py", "--server.fileWatcherType", "none"]
        with serve(bare_cmd, cwd=Path(tmp), env=dict(os.environ)) as (bare_base, bare_pid):
            for name, store in stores.items():
                cold = (browser, bare_cmd, Path(tmp)) if args.cold else None
                roots = {"": ROOT} | {label: Path(path).resolve() for label, path in (a.split("=", 1) for a in args.also)}
                rows += run(
                    store,
                    name,
                    args.pages,
                    args.repeats,
                    context,
                    bare_base,
                    bare_pid,
                    cold,
                    bare_dir=Path(tmp),
                    roots=roots,
                    loads_only=args.loads_only,
                )
        browser.close()
    load_after = os.getloadavg()
    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before and "
        f"{load_after[0]:.1f} after, Python {platform.python_version()}"
    )
    print(f"\nbrowser benchmark, {date.today().isoformat()}, {machine}, median of {args.repeats}\n")
    print(tables(rows))
    print("\n* no chart depends on this widget: the time until the rerun's last message")
    (RESULTS / "browser.json").write_text(
        json.dumps({"date": date.today().isoformat(), "machine": machine, "repeats": args.repeats, "rows": rows}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
