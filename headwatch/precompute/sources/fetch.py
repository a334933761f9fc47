"""HTTP for the precompute job: retries with backoff, byte ranges, bounded downloads, a meter.

Every request goes through huggingface_hub's shared HTTP client (`get_session`),
so tokens, proxies, redirects to the CDN and ``HF_HUB_OFFLINE`` (which makes the
client refuse to send anything) behave as in the rest of the Hub tooling.

Transient failures (connection errors, timeouts, a dropped body, HTTP 408, 429
and 5xx) are retried with exponential backoff; after the last attempt the
request raises `HubUnreachableError`, which stops the run (the store keeps every
committed checkpoint). Other HTTP errors are raised at once as huggingface_hub's
typed errors (``RevisionNotFoundError``, ``EntryNotFoundError``, ...).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx2
from huggingface_hub import get_session
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from headwatch.analysis.errors import CheckpointError, HubUnreachableError
from headwatch.precompute.settings import FetchSettings

T = TypeVar("T")
log = logging.getLogger("precompute")

# The statuses huggingface_hub's `http_backoff` retries (its _DEFAULT_RETRY_ON_STATUS_CODES).
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})

# Why `HubHttp.call` keeps its own retry loop instead of ``huggingface_hub.utils.http_backoff``
# / ``http_stream_backoff`` (2.4.0), which retry the same statuses and network errors:
# - they wrap one HTTP request; most calls here are HfApi calls (``model_info``,
#   ``list_repo_refs``, ``parse_safetensors_file_metadata``) that make their own
#   requests without retrying, so a loop around the call is needed anyway;
# - their waits are ``time.sleep``: a run stopping (Ctrl-C, an error in another
#   fetch thread) could not cancel a worker mid-backoff (waits here are ``stop.wait``);
# - ``http_stream_backoff`` retries only until the response starts: a body cut short
#   while it is read (a dropped range) is thrown back into its generator, which cannot
#   yield a second response;
# - the attempts they make are invisible to the `Meter`.
_MAX_WAIT_S = 30.0
_CHUNK = 1 << 20


class Cancelled(Exception):
    """The run is stopping (Ctrl-C or an error elsewhere); abandon this transfer."""


class _Transient(Exception):
    """A failure worth retrying: a 408/429/5xx status, or a body cut short."""


@dataclass
class Meter:
    """Bytes moved by this run: fetched over the network, and held on scratch disk (now and at peak).

    Thread-safe; the progress bar and the final report read it.
    """

    fetched: int = 0
    requests: int = 0
    disk: int = 0
    peak_disk: int = 0
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_fetched(self, n: int) -> None:
        with self._lock:
            self.fetched += n

    def add_request(self) -> None:
        with self._lock:
            self.requests += 1

    def add_disk(self, n: int) -> None:
        """``n`` more bytes on scratch disk (negative when a file is deleted)."""
        with self._lock:
            self.disk += n
            self.peak_disk = max(self.peak_disk, self.disk)

    def merge(self, fetched: int, requests: int, peak_disk: int) -> None:
        """Add what another meter counted (a Ray task's); its peak disk was on another scratch folder."""
        with self._lock:
            self.fetched += fetched
            self.requests += requests
            self.peak_disk = max(self.peak_disk, peak_disk)

    def rate(self) -> float:
        """Bytes fetched per second since the run started."""
        return self.fetched / max(time.monotonic() - self.started, 1e-9)


def human_bytes(n: float) -> str:
    """``1536000`` -> ``'1.5 MB'`` (decimal units, like download tools)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


class HubHttp:
    """Retrying GETs of whole files, byte ranges and downloads to disk, counted by a `Meter`.

    Args:
        settings: retries, backoff, timeout.
        meter: where bytes and requests are counted.
        token: Hub token (None: the logged-in user's, if any).
        stop: set to abandon transfers in flight (they raise `Cancelled`).
    """

    def __init__(
        self, settings: FetchSettings, meter: Meter, *, token: str | bool | None = None, stop: threading.Event | None = None
    ):
        self.settings = settings
        self.meter = meter
        self.stop = stop or threading.Event()
        self._headers = build_hf_headers(token=token, library_name="headwatch")
        self._timeout = httpx2.Timeout(settings.timeout_s, connect=min(settings.timeout_s, 15.0))
        self._said_no_ranges = False

    def call(self, fn: Callable[[], T], *, what: str) -> T:
        """``fn()`` (typically an ``HfApi`` call), retried on transient failures.

        Raises:
            HubUnreachableError: every attempt failed transiently.
            Cancelled: the run is stopping.
        """
        attempts = max(1, self.settings.retries)
        last: Exception | None = None
        for attempt in range(1, attempts + 1):
            if self.stop.is_set():
                raise Cancelled(what)
            try:
                return fn()
            except (httpx2.TransportError, _Transient) as exc:
                last = exc
            except HfHubHTTPError as exc:
                status = exc.response.status_code if exc.response is not None else None
                if status not in TRANSIENT_STATUS:
                    raise
                last = exc
            if attempt < attempts:
                wait = min(self.settings.backoff_s * 2 ** (attempt - 1), _MAX_WAIT_S)
                if self.stop.wait(wait):
                    raise Cancelled(what)
        raise HubUnreachableError(f"{what}: {_describe(last)} (gave up after {attempts} attempts)")

    def get(self, url: str, *, what: str) -> bytes:
        """The whole body of a small file.

        Raises:
            huggingface_hub errors: 404 and other non-transient statuses.
            HubUnreachableError, Cancelled: as `call`.
        """
        return self.call(lambda: self._get(url, None)[0], what=what)

    def get_range(self, url: str, start: int, end: int, *, what: str) -> tuple[bytes, int | None]:
        """Bytes ``[start, end)`` of a remote file and the file's total size (None if not reported).

        Not ``HfFileSystem.cat_file`` / ``cat_ranges`` (huggingface_hub 2.4.0), measured on a
        Pythia-1.4B-shaped checkpoint (benchmarks/bench_hub_fetch.py, part (c)): with its
        defaults it reads a 5 MiB block past every range (1.21x the bytes asked);
        ``block_size=0`` gives a stream that cannot seek; ``cache_type="none"`` reads exactly
        the bytes asked but adds two API requests per commit (revision, tree listing) and
        lacks what this method does: retries bounded by `FetchSettings` and cancellable
        (its ``http_backoff`` retries 5 times with ``time.sleep``), the run's timeout, the
        `Meter`, and a server that ignores ``Range`` (its ``r.content`` would hold the whole
        file for every range).

        A range past the end of the file comes back shortened, as HTTP specifies.
        A server that ignores ``Range`` is tolerated: the body is read up to ``end``
        and the part before ``start`` discarded.

        Raises:
            CheckpointError: the server answered a different range than asked.
            huggingface_hub errors, HubUnreachableError, Cancelled: as `get`.
        """
        assert 0 <= start < end
        return self.call(lambda: self._get(url, (start, end)), what=what)

    def download(self, url: str, dest: Path, *, what: str) -> int:
        """Stream a file to ``dest`` (its bytes counted as scratch disk until `release`); its size.

        Raises:
            huggingface_hub errors, HubUnreachableError, Cancelled: as `get`.
        """

        def attempt() -> int:
            written = 0
            try:
                with (
                    open(dest, "wb") as f,
                    get_session().stream("GET", url, headers=self._headers, timeout=self._timeout) as response,
                ):
                    self.meter.add_request()
                    self._check(response, url)
                    for chunk in response.iter_bytes(_CHUNK):
                        if self.stop.is_set():
                            raise Cancelled(what)
                        f.write(chunk)
                        written += len(chunk)
                        self.meter.add_fetched(len(chunk))
                        self.meter.add_disk(len(chunk))
            except BaseException:
                self.release(dest, written)
                raise
            return written

        return self.call(attempt, what=what)

    def release(self, path: Path, size: int) -> None:
        """Delete a downloaded file and take it off the disk meter."""
        path.unlink(missing_ok=True)
        self.meter.add_disk(-size)

    def _get(self, url: str, span: tuple[int, int] | None) -> tuple[bytes, int | None]:
        """The bytes [start, end) of ``span`` (None: the whole file) and the file's size when the server said it."""
        headers = dict(self._headers)
        if span is not None:
            start, end = span
            headers["Range"] = f"bytes={start}-{end - 1}"
        body = bytearray()
        with get_session().stream("GET", url, headers=headers, timeout=self._timeout) as response:
            self.meter.add_request()
            self._check(response, url)
            total = None
            skip = 0
            limit = None
            if span is not None:
                start, end = span
                if response.status_code == 206:
                    got_start, total = _content_range(response.headers.get("Content-Range", ""))
                    if got_start != start:
                        raise CheckpointError(f"{url}: asked for bytes from {start}, the server sent from {got_start}")
                    limit = end - start
                else:  # 200: the server ignored Range and sends the whole file
                    if not self._said_no_ranges:
                        log.warning("%s ignores HTTP Range requests: reading through the file up to each range", url)
                        self._said_no_ranges = True
                    skip, limit = start, end - start
                    total = _int_or_none(response.headers.get("Content-Length"))
            for chunk in response.iter_bytes(_CHUNK):
                if self.stop.is_set():
                    raise Cancelled(url)
                self.meter.add_fetched(len(chunk))
                if skip:
                    cut = min(skip, len(chunk))
                    chunk, skip = chunk[cut:], skip - cut
                body += chunk
                if limit is not None and len(body) >= limit:
                    del body[limit:]
                    break
        if span is not None and total is not None and len(body) < min(span[1], total) - span[0]:
            raise _Transient(f"the connection dropped after {len(body)} of {min(span[1], total) - span[0]} bytes from {url}")
        return bytes(body), total

    def _check(self, response: httpx2.Response, url: str) -> None:
        if response.status_code in TRANSIENT_STATUS:
            raise _Transient(f"HTTP {response.status_code} from {url}")
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)


def _content_range(value: str) -> tuple[int, int | None]:
    """``'bytes 0-99/1234'`` -> ``(0, 1234)``."""
    try:
        _unit, rest = value.split(" ", 1)
        span, total = rest.split("/", 1)
        first = int(span.split("-", 1)[0])
        return first, None if total.strip() == "*" else int(total)
    except ValueError as exc:
        raise CheckpointError(f"malformed Content-Range header {value!r}") from exc


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _describe(exc: Exception | None) -> str:
    if isinstance(exc, _Transient):
        return str(exc)
    if isinstance(exc, HfHubHTTPError):
        return str(exc).splitlines()[0]
    return f"{type(exc).__name__}: {exc}"
