"""One browser-history entry per view: the script that keeps the app's own URL rewrite from adding a second one.

Pure helper, no streamlit: `dashboard.widgets` puts the script on the page with
``st.html(..., unsafe_allow_javascript=True)`` (it runs in the app's own document).

Why it is needed. Streamlit's frontend adds a history entry in two places:

- when the page changes (a sidebar link, ``st.page_link``, ``st.switch_page``), it
  pushes the new page's path with the query string it had so far;
- whenever the script writes ``st.query_params`` (a ``pageInfoChanged`` message),
  it pushes the new query string, unless the run was started by Back/Forward,
  where it replaces the entry instead.

The app writes the complete view state to the query string at the end of every run
(when `dashboard.viewstate.view_state` publishes the view), so opening a page gave two
entries, the bare page and the same page with its parameters, and Back had to be
pressed twice to leave it.
Streamlit has no way for a script to ask for a replace, so this script does it in the
browser: it wraps ``history.pushState`` so that the first query-only push after the
entry was created (a page switch or the page load) replaces that entry. Later
query-only pushes (the user changed a widget) still add entries, so Back keeps
undoing widget changes one at a time as before.

`settle` is called after every run with the page and the query string the app wrote:
when the address bar already holds it (a link that carried the whole view, a page
switch whose URL happened to be complete), nothing more is coming for this entry. A
settle for another page than the one in the address bar is ignored: during a page
switch the previous page's script element can run once more, and the new page's
address still carries the previous page's query string, which would end the
new entry's wait before the new page has written its state.
"""

from __future__ import annotations

import json

GUARD = """
(() => {
  const w = window, h = w.history;
  let hw = w.__headwatchHistory;
  if (!hw) {
    const push = h.pushState.bind(h), replace = h.replaceState.bind(h);
    const query = () => w.location.search.replace(/^\\?/, "");
    hw = w.__headwatchHistory = {
      pending: true,  // the current entry still waits for the app to write its view state
      replaced: 0,  // how many pushes became replaces (read by the browser tests)
      settle(written, path) {
        const here = w.location.pathname.replace(/\\/+$/, "");
        if (path !== null && !here.endsWith("/" + path) && here !== "") return;  // another page's late settle
        if (query() === written) hw.pending = false;
      },
    };
    h.pushState = function (data, unused, url) {
      const path = url == null ? w.location.pathname : new URL(String(url), w.location.href).pathname;
      if (path !== w.location.pathname) {  // a page switch: a new entry, whose view state is still to come
        hw.pending = true;
        return push(data, unused, url);
      }
      if (hw.pending) {  // the app completing the view of this entry
        hw.pending = false;
        hw.replaced += 1;
        return replace(data, unused, url);
      }
      return push(data, unused, url);  // a widget change: its own entry, so Back undoes it
    };
    w.addEventListener("popstate", () => { hw.pending = false; });  // Streamlit replaces on Back/Forward itself
  }
  SETTLE
})();
"""


def guard_script(written: str | None = None, url_path: str | None = None) -> str:
    """The ``<script>`` that installs the history guard once per browser tab (idempotent).

    Args:
        written: the query string (no ``?``) the app has just written to the URL, as
            Streamlit encodes it; None before the page has run.
        url_path: the page that wrote it (its ``url_path``); None accepts any page.
    """
    settle = "" if written is None else f"hw.settle({json.dumps(written)}, {json.dumps(url_path)});".replace("<", "\\u003c")
    return f"<script>{GUARD.replace('SETTLE', settle)}</script>"  # no "</script>" inside: written is escaped
