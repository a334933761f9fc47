"""Which checkpoint source ``--source`` names: `open_source`.

The one module that imports the `precompute.sources.source.CheckpointSource`
implementations; the run opens its source here.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import HFValidationError, validate_repo_id

from headwatch.analysis.errors import CheckpointNotFoundError
from headwatch.precompute.settings import FetchSettings
from headwatch.precompute.sources.fetch import Meter
from headwatch.precompute.sources.hub import HubSource
from headwatch.precompute.sources.hubcache import HubCacheSource
from headwatch.precompute.sources.local import LocalSource
from headwatch.precompute.sources.source import CheckpointSource


def open_source(
    spec: str | Path,
    *,
    scratch: Path,
    fetch: FetchSettings,
    meter: Meter,
    token: str | bool | None = None,
    following: bool = False,
) -> CheckpointSource:
    """A local folder if ``spec`` is a directory; else a Hub model repo id, read from the
    local Hub cache when ``HF_HUB_OFFLINE`` is set and from the Hub otherwise.

    Args:
        spec: ``--source``.
        scratch: a folder for temporary downloads (``pytorch_model.bin`` files).
        fetch: Hub fetch settings.
        meter: counts bytes fetched and scratch disk in use.
        token: Hub token (None: the logged-in user's, if any).
        following: the run may still be training (`precompute.follow`): a local
            folder lists only its complete checkpoints, a Hub repo only its branches with a commit of their own.

    Raises:
        CheckpointNotFoundError: neither an existing directory nor a valid repo id, or
            (offline) a repo the Hub cache does not hold.
    """
    path = Path(spec)
    if path.is_dir():
        return LocalSource(path, following=following)
    try:
        validate_repo_id(str(spec))
    except HFValidationError:
        raise CheckpointNotFoundError(
            f"--source {str(spec)!r} is not a directory, nor a Hub model id like EleutherAI/pythia-70m"
        ) from None
    if constants.is_offline_mode():
        return HubCacheSource(str(spec))
    return HubSource(str(spec), scratch=scratch, fetch=fetch, meter=meter, token=token, following=following)
