"""The dashboard's settings: every environment variable the app reads, read here and nowhere else.

`read_settings` turns the environment into one frozen `AppSettings`; app.py calls it
once at the start of every script run and hands the object on (the loader finds
stores with it, the view state builds links with it). Reading per run rather than
at import keeps a changed variable (a test's ``monkeypatch.setenv``, a restarted
Space) effective without re-importing anything. Pure: no streamlit, no network.

| variable | meaning | default |
| --- | --- | --- |
| ``HEADWATCH_DATA`` | folder whose sub-folders are stores | the repository's ``data/`` |
| ``HEADWATCH_STORE`` | one more store, listed first | none |
| ``STORE_REPO`` | Hugging Face dataset repo (``owner/name``) holding one or more stores | none |
| ``STORE_REVISION`` | its branch, tag or commit | the repo's default branch |
| ``SPACE_ID`` | ``OWNER/NAME``, set by Hugging Face on a Space: links name the Space page | none (not on a Space) |

Empty values count as unset, and so do blank ones of the last three (their values are
stripped; paths are taken as given).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[2] / "data"  # the stores shipped with the repository (beside headwatch/)

DATA_ENV = "HEADWATCH_DATA"
STORE_ENV = "HEADWATCH_STORE"
REPO_ENV = "STORE_REPO"
REVISION_ENV = "STORE_REVISION"
SPACE_ENV = "SPACE_ID"


@dataclass(frozen=True)
class AppSettings:
    """How this app run is configured.

    Attributes:
        data_dir: folder searched for stores (each non-hidden sub-folder with a ``meta.json``).
        extra_store: one more store, listed first; None when unset.
        store_repo: Hub dataset repo whose stores are listed before all others; None when unset.
        store_revision: its branch, tag or commit; None for the default branch.
        space_id: ``OWNER/NAME`` of the Hugging Face Space serving the app; None off a Space.
    """

    data_dir: Path = DATA_DIR
    extra_store: Path | None = None
    store_repo: str | None = None
    store_revision: str | None = None
    space_id: str | None = None


def read_settings(environ: Mapping[str, str] | None = None) -> AppSettings:
    """The settings given by ``environ`` (default: this process's environment), empty values as unset.

    Args:
        environ: variable name -> value; ``os.environ`` when None.

    Returns:
        The resolved `AppSettings`.
    """
    env = os.environ if environ is None else environ

    def value(name: str) -> str | None:
        return (env.get(name) or "").strip() or None

    data_dir, extra = env.get(DATA_ENV), env.get(STORE_ENV)
    return AppSettings(
        data_dir=Path(data_dir) if data_dir else DATA_DIR,
        extra_store=Path(extra) if extra else None,
        store_repo=value(REPO_ENV),
        store_revision=value(REVISION_ENV),
        space_id=value(SPACE_ENV),
    )
