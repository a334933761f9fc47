"""The script that opens the view of a chart's clicked point in a new browser tab.

Pure, no streamlit: `dashboard.charts.open_in_new_tab` mounts `SCRIPT` as a Streamlit component
(``st.components.v2``, which runs in the app's own document, next to the chart).

Why it is needed. A click that a chart hands to the server (``on_select="rerun"``, then
`dashboard.viewstate.switch_page`) can only switch the page of the tab it came from: the view the
reader clicked from is gone. Where a click should open evidence beside the chart (a Circuits cell:
the target and source heads at the step shown), the script listens to Plotly's ``plotly_click`` on
the chart and opens a link made from the point's ``customdata`` with ``window.open`` in a new tab
(the click itself is the user's gesture, so the browser does not block it as a pop-up). The server
sees nothing of it; the page stays as it was.

The link is a template: the page's relative URL with ``{i}`` where ``customdata[i]`` goes
(``head?run=r&layer={0}&head={1}&step={2}``) and ``{meta[i]}`` where the clicked trace's ``meta[i]``
goes: what is the same for every point of the trace and changes with an animation frame (a frame sets
the trace's ``meta``, as a Circuits frame its step: `dashboard.views.circuits.figures.composition_animation`).
Each value is URL-encoded, and a point whose ``customdata`` or trace ``meta`` lacks one of them, or
holds a value that is not a finite number or a string, opens nothing. The chart's element may be
replaced when the page reruns, so the script looks for it every `POLL_MS` and attaches to whichever
element is there (once per element).
"""

from __future__ import annotations

POLL_MS = 250  # how often the script checks that it listens to the chart element on the page

SCRIPT = """
export default function (component) {
  const { data } = component;
  const selector = `.st-key-${data.chart} .js-plotly-plot`;
  let gd = null;
  const fill = (point) => {
    const cd = point.customdata, meta = point.fullData && point.fullData.meta;
    // Plotly decodes numeric arrays as typed arrays
    const list = (a) => Array.isArray(a) || ArrayBuffer.isView(a);
    let ok = true;
    const url = String(data.template).replace(/\\{(?:meta\\[(\\d+)\\]|(\\d+))\\}/g, (_, m, c) => {
      const from = m === undefined ? cd : meta;
      const v = list(from) ? from[Number(m === undefined ? c : m)] : undefined;
      if (typeof v === "number" && Number.isFinite(v)) return encodeURIComponent(String(v));
      if (typeof v === "string") return encodeURIComponent(v);
      ok = false;
      return "";
    });
    return ok ? url : null;
  };
  const onClick = (ev) => {
    const point = ev && ev.points && ev.points[0];
    const url = point ? fill(point) : null;
    if (url) window.open(new URL(url, window.location.href).href, "_blank", "noopener");
  };
  const detach = () => {
    if (gd && gd.removeListener) gd.removeListener("plotly_click", onClick);
    gd = null;
  };
  const attach = () => {
    const el = document.querySelector(selector);
    if (el === gd || !el || typeof el.on !== "function") return;
    detach();
    gd = el;
    gd.on("plotly_click", onClick);
  };
  attach();
  const timer = setInterval(attach, POLL_MS);
  return () => { clearInterval(timer); detach(); };
}
""".replace("POLL_MS", str(POLL_MS))
