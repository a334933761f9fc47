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
(when `dashboard.viewstate.view_state` publishes the view), so opening a page would give
two entries, the bare page and the same page with its parameters, and Back would have to
be pressed twice to leave it.
Streamlit has no way for a script to ask for a replace, so this script does it in the
browser: it wraps ``history.pushState`` so that the first query-only push after the
entry was created (a page switch or the page load) replaces that entry. Later
query-only pushes (the user changed a widget) still add entries, so Back undoes
widget changes one at a time.

One race: on a page switch Streamlit writes the new page's query string as soon as its
message arrives (``handlePageInfoChanged``) and the new path once the new page's session
is set up (``maybeUpdatePageUrl``, with that same query string). Under load the query came
first: a query-only push on the old page's settled entry, which looks like a widget change,
then the path's push, two entries for one switch. So an entry a query-only push added stays
"unconfirmed" until its own page's run settles it; a page switch carrying the same query
string onto such an entry replaces it (the entry was the switch's all along). A widget
change is settled by its page's run, so a page switch after it still adds its own entry.

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
      unconfirmed: false,  // the current entry came from a query-only push its page's run has not settled yet
      replaced: 0,  // how many pushes became replaces (read by the browser tests)
      settle(written, path) {
        const here = w.location.pathname.replace(/\\/+$/, "");
        if (path !== null && !here.endsWith("/" + path) && here !== "") return;  // another page's late settle
        if (query() === written) hw.pending = hw.unconfirmed = false;
      },
    };
    h.pushState = function (data, unused, url) {
      const to = url == null ? new URL(w.location.href) : new URL(String(url), w.location.href);
      if (to.pathname !== w.location.pathname) {  // a page switch: a new entry, whose view state is still to come
        // The new page's query can reach the address bar before its path does (Streamlit writes the query as its
        // message comes, the path once the new page's session is set up, with that same query): the entry the
        // query made, which no page has settled, was this switch's, so the switch takes its place.
        const early = hw.unconfirmed && to.search === w.location.search;
        hw.pending = true;
        hw.unconfirmed = false;
        if (early) {
          hw.replaced += 1;
          return replace(data, unused, url);
        }
        return push(data, unused, url);
      }
      if (hw.pending) {  // the app completing the view of this entry
        hw.pending = false;
        hw.replaced += 1;
        return replace(data, unused, url);
      }
      hw.unconfirmed = true;  // a widget change (its own entry, so Back undoes it), until its page's run settles it
      return push(data, unused, url);
    };
    w.addEventListener("popstate", () => { hw.pending = hw.unconfirmed = false; });  // Streamlit replaces on Back/Forward
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
