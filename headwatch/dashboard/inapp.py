"""The scripts that move the reader within the app: a link in a page's text opening its view in this tab, and a
panel opened as evidence brought into view.

Pure, no streamlit: `dashboard.charts.app_links` and `dashboard.charts.bring_into_view` mount them as Streamlit
components (``st.components.v2``, which run in the app's own document).

Links in text. Streamlit opens every link of a Markdown text in a new browser tab (and a link in this tab would load
the app again, a new session). The head links of a run's headline (the Overview, the Timeline) lead to views of the
app, as a click on the Timeline's events lane does, which switches the page in this tab. `LINKS` makes the headline's
links behave the same way: it listens to clicks on the links inside one container (``.st-key-<container>``) whose
``href`` is a view of the app (``head?run=...``, `dashboard.navigation.PAGES`' url_paths), and hands a plain click's
link to the page as the trigger ``link`` instead of following it; the page then opens that view in this tab
(`dashboard.viewstate.open_link`). A click with a modifier key or another button (a new tab asked for) is left to the
browser. The container is marked ``data-hw-in-app`` once the script listens.

Bringing a panel into view. A link to a head's evidence opens the head explorer on its statistic tab, which stands
below the head's widgets, below the fold of a laptop's window. `SCROLL` scrolls the container ``.st-key-<container>``
to the top of the window (below Streamlit's header) and keeps it there while the page settles (until the chart
``.st-key-<chart>`` is drawn and the container has not moved for `SETTLE_MS`, at most `LIMIT_MS`), once per
``token``; a wheel, key, touch or click of the reader's ends it at once.
"""

from __future__ import annotations

POLL_MS = 100  # how often the scripts look for their elements
SETTLE_MS = 600  # the container still this long, with its chart drawn: the page has settled
LIMIT_MS = 15_000  # the scroll gives up after this long
GAP_PX = 8  # between Streamlit's header and the container brought into view

LINKS = """
export default function (component) {
  const { data, setTriggerValue } = component;
  const escape = (s) => s.replace(/[.*+?^${}()|[\\]\\\\]/g, "\\\\$&");
  const views = new RegExp(`^(?:${data.pages.map(escape).join("|")})\\\\?`);
  const inside = `.st-key-${data.container}`;
  const onClick = (ev) => {
    if (ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    const a = ev.target && ev.target.closest ? ev.target.closest("a[href]") : null;
    if (!a || !a.closest(inside)) return;
    const href = a.getAttribute("href") || "";
    if (!views.test(href)) return;
    ev.preventDefault();
    ev.stopPropagation();
    setTriggerValue("link", href);
  };
  document.addEventListener("click", onClick, true);
  const mark = () => { const el = document.querySelector(inside); if (el) el.dataset.hwInApp = "1"; };
  mark();
  const timer = setInterval(mark, POLL_MS);
  return () => { clearInterval(timer); document.removeEventListener("click", onClick, true); };
}
""".replace("POLL_MS", str(POLL_MS))

SCROLL = (
    """
export default function (component) {
  const { data } = component;
  const done = (window.__hwBroughtIntoView = window.__hwBroughtIntoView || {});
  if (done[data.token]) return;
  done[data.token] = true;
  const events = ["wheel", "touchstart", "keydown", "mousedown"];
  let stopped = false, last = null, since = Date.now();
  const stop = () => { stopped = true; };
  events.forEach((e) => window.addEventListener(e, stop, { capture: true, passive: true }));
  const started = Date.now();
  let timer = null;
  const finish = () => {
    clearInterval(timer);
    events.forEach((e) => window.removeEventListener(e, stop, { capture: true }));
  };
  const tick = () => {
    if (stopped || Date.now() - started > LIMIT_MS) return finish();
    const el = document.querySelector(`.st-key-${data.container}`);
    if (!el) return;
    const header = document.querySelector('[data-testid="stHeader"]');
    const top = (header ? Math.max(header.getBoundingClientRect().bottom, 0) : 0) + GAP_PX;
    if (Math.abs(el.getBoundingClientRect().top - top) > 2) {
      el.style.scrollMarginTop = `${top}px`;
      el.scrollIntoView({ block: "start" });
    }
    const now = el.getBoundingClientRect().top;
    const drawn = document.querySelector(`.st-key-${data.chart} .js-plotly-plot .main-svg`);
    if (!drawn || last === null || Math.abs(now - last) >= 1) since = Date.now();
    else if (Date.now() - since >= SETTLE_MS) return finish();
    last = now;
  };
  timer = setInterval(tick, POLL_MS);
  tick();
}
""".replace("POLL_MS", str(POLL_MS))
    .replace("SETTLE_MS", str(SETTLE_MS))
    .replace("LIMIT_MS", str(LIMIT_MS))
)
SCROLL = SCROLL.replace("GAP_PX", str(GAP_PX))
