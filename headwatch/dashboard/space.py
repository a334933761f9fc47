"""Hosting on a Hugging Face Space: stores from a Hub dataset repo, and links that work inside the Space page.

Pure helpers, no streamlit and no network: `dashboard.loader` downloads the repo
and `dashboard.viewstate` injects the script (`dashboard.sharing` composes it); these functions only turn a
downloaded snapshot into store paths, word a failed download, and build the
Space URL and the message that keeps the Space page's address bar in step.

A Docker Space shows the app in an iframe of ``https://huggingface.co/spaces/OWNER/NAME``.
That page forwards its own query string to the app's *root* URL on load, so the
page travels in the query string (``page=head``) rather than in the path; the
app posts ``{queryString, hash}`` to it after every rerun (the message format
Spaces listen for, see https://huggingface.co/docs/hub/spaces-handle-url-parameters).
"""

from __future__ import annotations

import json
from pathlib import Path

from headwatch.analysis.store import is_store
from headwatch.analysis.store.format import META_FILE

SPACES_ORIGIN = "https://huggingface.co"
PAGE_PARAM = "page"  # the page's url_path, in links meant for the Space page
STORE_PATTERNS = ["*.json", "*.parquet"]  # what a store holds (meta.json, heads.parquet, embeddings.parquet)


def snapshot_stores(snapshot: Path, repo_id: str) -> list[tuple[str, Path]]:
    """The stores in a downloaded dataset-repo snapshot, each with its run name.

    A snapshot with ``meta.json`` at its root is one store, named after the repo
    (``owner/pythia-160m-store`` -> ``pythia-160m-store``); otherwise every
    non-hidden sub-folder with a ``meta.json`` is one, named after the folder.

    Args:
        snapshot: the snapshot folder (as returned by ``huggingface_hub.snapshot_download``).
        repo_id: the dataset repo it came from.

    Returns:
        ``(name, path)`` pairs, sub-folders in name order; empty when the snapshot holds no store.
    """
    if is_store(snapshot):
        return [(repo_id.rsplit("/", 1)[-1], snapshot)]
    if not snapshot.is_dir():
        return []
    return [(p.name, p) for p in sorted(snapshot.iterdir()) if p.is_dir() and not p.name.startswith(".") and is_store(p)]


def download_error_message(repo_id: str, revision: str | None, error: BaseException | None) -> str:
    """What to show when the store repo could not be used: what failed, which repo and revision, what to do.

    Args:
        repo_id: the value of ``STORE_REPO``.
        revision: the value of ``STORE_REVISION`` (None: the default branch).
        error: the exception the download raised, or None when it worked but held no store.
    """
    where = f"`{repo_id}`" + (f" at revision `{revision}`" if revision else " (default branch)")
    if error is None:
        what = (
            f"The dataset repo {where} was downloaded but holds no statistics store "
            f"(no `{META_FILE}` at its root or in a sub-folder)."
        )
        todo = "Upload a store made by `python -m headwatch.precompute` to the repo, or point `STORE_REPO` at another one."
    else:
        first = (str(error).strip().splitlines() or [""])[0][:300]
        what = (
            f"Could not download the statistics store from the Hugging Face dataset repo {where}: "
            f"{type(error).__name__}" + (f" ({first})" if first else "") + "."
        )
        todo = (
            "Check that `STORE_REPO` names an existing dataset repo (`owner/name`), that `STORE_REVISION` "
            "is a branch, tag or commit in it, and that the Space can reach the Hub (a private repo needs "
            "an `HF_TOKEN` secret); then restart the Space. Unset `STORE_REPO` to use the stores under `data/`."
        )
    return f"{what}\n\n{todo}"


def space_url(space_id: str, url_path: str, query: str) -> str:
    """The Space page's URL for a view: ``https://huggingface.co/spaces/OWNER/NAME?page=head&layer=1``.

    Args:
        space_id: ``OWNER/NAME`` (Hugging Face sets ``SPACE_ID``).
        url_path: the page's url_path; empty for the default page (no ``page=`` then).
        query: the view's query string, without ``?``.
    """
    return f"{SPACES_ORIGIN}/spaces/{space_id}" + parent_query(url_path, query)


def parent_query(url_path: str, query: str) -> str:
    """``?page=<url_path>&<query>`` (the page first, left out for the default page); empty when there is nothing."""
    parts = ([f"{PAGE_PARAM}={url_path}"] if url_path else []) + ([query] if query else [])
    return "?" + "&".join(parts) if parts else ""


def parent_sync_script(query_string: str) -> str:
    """HTML whose script puts ``query_string`` in the Space page's address bar.

    It runs in a component iframe inside the app's iframe, so the Space page is
    ``window.parent.parent``; the target origin keeps the message from going anywhere else.
    """
    message = json.dumps({"queryString": query_string, "hash": ""}).replace("<", "\\u003c")  # no "</script>" inside
    return f"<script>\n(window.parent.parent || window.top).postMessage({message}, {json.dumps(SPACES_ORIGIN)});\n</script>"
