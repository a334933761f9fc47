"""The script that hands an animated chart's paused frame back to the page's step control.

Pure, no streamlit: `dashboard.charts.follow_play` mounts `SCRIPT` as a Streamlit component
(``st.components.v2``, which runs in the app's own document, next to the chart).

Why it is needed. An animated chart (the Animation heatmap, the Forward lenses' layer divergence,
the Weight matrices' singular values) opens at the page's ``step``, which is in the link. Play
runs the following frames in the browser, where the server does not see them; after Pause the
chart would show one step while the step control, the address bar and "Link to this view" said
another, and a shared link would not reproduce the screen. The script listens to Plotly's animation
events on the chart: it remembers the name of each frame drawn (``plotly_animatingframe``; the
frames are named by their step) and, when the animation stops (Pause:
``plotly_animationinterrupted``; the last frame: ``plotly_animated``), sends that name as the
trigger ``paused``. The page then reruns with the step control at that step, so the chart, the
control, the caption and the link agree again.

The chart's element may be replaced when the page reruns, so the script looks for it every
`POLL_MS` and attaches to whichever element is there (once per element).
"""

from __future__ import annotations

POLL_MS = 250  # how often the script checks that it listens to the chart element on the page

SCRIPT = """
export default function (component) {
  const { data, setTriggerValue } = component;
  const selector = `.st-key-${data.chart} .js-plotly-plot`;
  let gd = null, shown = null, moved = false;
  const onFrame = (ev) => { if (ev && ev.name != null) { shown = String(ev.name); moved = true; } };
  const onStop = () => {
    if (!moved || shown === null) return;
    moved = false;
    if (shown !== String(data.step)) setTriggerValue("paused", shown);
  };
  const detach = () => {
    if (gd && gd.removeListener) {
      gd.removeListener("plotly_animatingframe", onFrame);
      gd.removeListener("plotly_animated", onStop);
      gd.removeListener("plotly_animationinterrupted", onStop);
    }
    gd = null;
  };
  const attach = () => {
    const el = document.querySelector(selector);
    if (el === gd || !el || typeof el.on !== "function") return;
    detach();
    gd = el;
    gd.on("plotly_animatingframe", onFrame);
    gd.on("plotly_animated", onStop);
    gd.on("plotly_animationinterrupted", onStop);
  };
  attach();
  const timer = setInterval(attach, POLL_MS);
  return () => { clearInterval(timer); detach(); };
}
""".replace("POLL_MS", str(POLL_MS))
