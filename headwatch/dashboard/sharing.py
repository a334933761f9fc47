"""How a view leaves the app: its link, the Space page's address bar, the browser history, ``?page=`` links.

Pure, no streamlit: `dashboard.viewstate` calls `publication` when a view is complete
and puts what it returns on the page, and calls `page_request` when a run starts.
The pieces come from `dashboard.urlstate` (the query string), `dashboard.space`
(Space URLs and the message to the Space page) and `dashboard.history` (one browser
history entry per view).

On a Hugging Face Space (``SPACE_ID`` set) the share link is the Space page's URL
with the page as ``page=``, and after every run the view's query string is posted to
the Space page so its address bar follows the app; ``page=`` on the root URL opens
that page. Off a Space the link is the app's own URL and nothing is posted. A path that
names no page is answered with the Overview and a notice that says so (`unknown_page`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlencode, urlsplit

from headwatch.dashboard.history import guard_script
from headwatch.dashboard.space import PAGE_PARAM, parent_query, parent_sync_script, space_url
from headwatch.dashboard.urlstate import query_string, quote, quote_value


@dataclass(frozen=True)
class Publication:
    """What a complete view puts on the page besides its own content.

    Attributes:
        link: the link that reproduces the view ("Link to this view").
        history_script: the history guard told what was written (`dashboard.history.guard_script`).
        parent_script: on a Space, the script that posts the view to the Space page; None off a Space.
    """

    link: str
    history_script: str
    parent_script: str | None


def history_guard() -> str:
    """The history guard before the page has run (installs itself once per browser tab, settles nothing)."""
    return guard_script()


def share_link(query: str, *, url_path: str, space_id: str | None, base_url: str | None) -> str:
    """The link that reproduces a view: the app's URL (or the page path) plus the query string.

    On a Space it is the Space page's URL, with the page as ``page=`` (the Space forwards
    only its query string, to the app's root URL).

    Args:
        query: the view's query string, without ``?``.
        url_path: the page's url_path (empty for the default page).
        space_id: ``OWNER/NAME`` on a Space, else None.
        base_url: the app's URL as the browser sees it (``st.context.url``), if known.
    """
    if space_id:
        return space_url(space_id, url_path, query)
    base = base_url or f"/{url_path}"
    return f"{base}?{query}" if query else base


def publication(params: Mapping[str, list[str]], *, url_path: str, space_id: str | None, base_url: str | None) -> Publication:
    """Everything a view publishes once its page has run.

    Args:
        params: the view state written to the URL, parameter -> values (as strings), in widget order.
        url_path: the page's url_path (empty for the default page).
        space_id: ``OWNER/NAME`` on a Space, else None.
        base_url: the app's URL as the browser sees it, if known.
    """
    query = query_string(dict(params))
    return Publication(
        link=share_link(query, url_path=url_path, space_id=space_id, base_url=base_url),
        history_script=guard_script(urlencode(params, doseq=True), url_path or None),  # as Streamlit encodes it
        parent_script=parent_sync_script(parent_query(url_path, query)) if space_id else None,
    )


def page_request(
    query: Mapping[str, list[str]], *, current: str, title: str, url_paths: Sequence[str]
) -> tuple[str | None, dict[str, list[str]], str | None]:
    """The page a ``page=<url_path>`` on the root URL asks for (how Space links name the page).

    Only the default page honours it (a path wins over ``page=``).

    Args:
        query: the URL's query parameters, name -> values.
        current: the url_path of the page being shown (empty for the default page).
        title: its title, for the notice.
        url_paths: every page's url_path.

    Returns:
        ``(url_path to open or None, the other query parameters, notice or None)``; the notice says
        that ``page=`` names no page here.
    """
    given = query.get(PAGE_PARAM)
    wanted = given[-1] if given else None
    rest = {k: list(v) for k, v in query.items() if k != PAGE_PARAM}
    if not wanted or current:
        return None, rest, None
    if wanted not in url_paths:
        return (
            None,
            rest,
            (
                f"{quote_value(PAGE_PARAM, wanted)} is not a page here (allowed: "
                f"{', '.join(p for p in url_paths if p)}); showing {title}."
            ),
        )
    return wanted, rest, None


def unknown_page(url: str | None, *, base_path: str, url_paths: Sequence[str]) -> str | None:
    """The notice for a URL whose path names no page, or None when it names one (or none: the root URL).

    Streamlit runs the default page for such a path, rewrites the address bar to the root and shows a
    dialog that the first click closes; this notice stays at the top of the page.

    Args:
        url: the page's URL as the browser asked for it, without the query (``st.context.url``).
        base_path: the server's ``server.baseUrlPath`` (the app's root below the host), possibly empty.
        url_paths: every page's url_path (the default page's is empty: it lives at the root).
    """
    if not url:
        return None
    path = unquote(urlsplit(url).path).strip("/")
    base = base_path.strip("/")
    if base and (path == base or path.startswith(base + "/")):
        path = path[len(base) :].strip("/")
    if not path or path in url_paths:
        return None
    pages = ", ".join(f"/{p}" for p in url_paths if p)
    return f"The page {quote('/' + path)} does not exist: showing the Overview. The pages are / (the Overview), {pages}."
