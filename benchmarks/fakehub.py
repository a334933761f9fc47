"""A stand-in Hugging Face Hub on 127.0.0.1, and a local Hub cache, for offline tests and benchmarks.

`FakeHub` serves the few endpoints the precompute job uses, from repos held in
memory (branch -> commit -> files):

- ``GET /api/models/ORG/NAME/refs``                 (``HfApi.list_repo_refs``)
- ``GET /api/models/ORG/NAME/revision/REV?blobs=1``  (``HfApi.model_info(files_metadata=True)``)
- ``GET /api/models/ORG/NAME/tree/REV[/PATH]``       (``HfApi.list_repo_tree``, ``HfFileSystem``; one level)
- ``GET|HEAD /ORG/NAME/resolve/REV/FILE``            with ``Range: bytes=a-b`` answered 206

Errors carry the Hub's ``X-Error-Code`` header, so huggingface_hub raises its own
typed errors. Every request is logged (method, path, Range header); faults can be
injected (503s, a slow link). `write_hub_cache` lays out the same repos the way
huggingface_hub caches downloads: ``models--ORG--NAME/{blobs,refs,snapshots}``.

It lives in benchmarks/ (as `benchmarks.synthetic_store` does) so that the integration tests and
`benchmarks.bench_hub_fetch` share it while benchmarks/ imports nothing from tests/ (`.importlinter`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin")


@dataclass
class Repo:
    """A model repo: branch -> commit, commit -> {file name: bytes, or a Path read on demand}.

    ``lfs_sha256[(commit, name)]`` overrides the digest the Hub reports for a file
    (default: the sha256 of its bytes).
    """

    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, bytes | Path]] = field(default_factory=dict)
    lfs_sha256: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, branch: str, files: Mapping[str, bytes | Path]) -> str:
        parts = [branch.encode()]
        for name, value in sorted(files.items()):
            parts.append(name.encode() + (hashlib.sha256(value).digest() if isinstance(value, bytes) else str(value).encode()))
        commit = hashlib.sha1(b"".join(parts)).hexdigest()
        self.commits[commit] = dict(files)
        self.branches[branch] = commit  # last, as the Hub moves a branch once its commit is whole
        return commit

    def sha256(self, commit: str, name: str) -> str:
        if (commit, name) not in self.lfs_sha256:
            value = self.commits[commit][name]
            self.lfs_sha256[(commit, name)] = hashlib.sha256(_read(value, 0, _size(value))).hexdigest()
        return self.lfs_sha256[(commit, name)]


def _size(value: bytes | Path) -> int:
    return len(value) if isinstance(value, bytes) else value.stat().st_size


def _read(value: bytes | Path, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of a file held in memory or on disk."""
    if isinstance(value, bytes):
        return value[start:end]
    with open(value, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file of a ``save_pretrained`` folder, by name."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@dataclass
class Logged:
    method: str
    path: str
    range: str | None


class FakeHub:
    """The server; use as a context manager. ``url`` is its endpoint."""

    def __init__(self, *, port: int = 0) -> None:
        self.repos: dict[str, Repo] = {}
        self.log: list[Logged] = []
        self.sent = 0  # file bytes sent by resolve requests
        self.fail_next = 0  # answer this many next requests with 503
        self.fail_after: int | None = None  # answer 503 to every request once this many were served
        self.fail_matching: str | None = None  # answer 503 to every request whose path contains this
        self.delay_s = 0.0  # sleep before answering each resolve request
        self.ignore_range = False  # answer 200 with the whole file, like a server without Range support
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub._handle(self, head=False)

            def do_HEAD(self) -> None:
                hub._handle(self, head=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def ranges(self, filename: str) -> list[tuple[int, int]]:
        """Byte ranges ``[start, end)`` requested of ``filename`` (any repo, any revision), in order."""
        out = []
        for entry in self.log:
            if entry.method == "GET" and entry.path.endswith("/" + filename) and entry.range:
                a, b = entry.range.removeprefix("bytes=").split("-")
                out.append((int(a), int(b) + 1))
        return out

    def resolves(self, filename: str) -> list[Logged]:
        return [e for e in self.log if "/resolve/" in e.path and e.path.endswith("/" + filename)]

    # -- request handling --------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        url = urlparse(h.path)
        path = unquote(url.path)
        with self._lock:
            self.log.append(Logged(h.command, path, h.headers.get("Range")))
            n = len(self.log)
            failing = (
                self.fail_next > 0
                or (self.fail_after is not None and n > self.fail_after)
                or (self.fail_matching is not None and self.fail_matching in path)
            )
            if self.fail_next > 0:
                self.fail_next -= 1
        if failing:
            self._send(h, 503, b"overloaded", head=head)
            return
        m = re.match(r"^/api/models/([^/]+/[^/]+)/refs$", path)
        if m:
            repo = self._repo(h, m.group(1), head)
            if repo:
                body: dict[str, object] = {
                    "branches": [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": c} for b, c in repo.branches.items()],
                    "converts": [],
                    "tags": [],
                }
                self._send(h, 200, json.dumps(body).encode(), head=head, ctype="application/json")
            return
        m = re.match(r"^/api/models/([^/]+/[^/]+)/revision/(.+)$", path)
        if m:
            repo = self._repo(h, m.group(1), head)
            commit = self._commit(h, repo, m.group(2), head) if repo else None
            if repo and commit:
                siblings = []
                for name, value in repo.commits[commit].items():
                    size = _size(value)
                    s = {"rfilename": name, "size": size, "blobId": hashlib.sha1(f"{commit}/{name}".encode()).hexdigest()}
                    if name.endswith(LFS_SUFFIXES):
                        s["lfs"] = {"sha256": repo.sha256(commit, name), "size": size, "pointerSize": 134}
                    siblings.append(s)
                body = {"id": m.group(1), "modelId": m.group(1), "sha": commit, "private": False, "siblings": siblings}
                self._send(h, 200, json.dumps(body).encode(), head=head, ctype="application/json")
            return
        m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path)
        if m:  # one folder level (recursive=false), the shape the Hub gives: type, oid, size, path, lfs
            repo = self._repo(h, m.group(1), head)
            commit = self._commit(h, repo, m.group(2), head) if repo else None
            if repo and commit:
                prefix = (m.group(3) or "").strip("/")
                entries, folders = [], set()
                for name, value in sorted(repo.commits[commit].items()):
                    if prefix and not name.startswith(prefix + "/"):
                        continue
                    rest = name[len(prefix) + 1 :] if prefix else name
                    if "/" in rest:
                        folders.add(name[: len(name) - len(rest)] + rest.split("/", 1)[0])
                        continue
                    size = _size(value)
                    e = {"type": "file", "oid": hashlib.sha1(f"{commit}/{name}".encode()).hexdigest(), "size": size, "path": name}
                    if name.endswith(LFS_SUFFIXES):
                        e["lfs"] = {"oid": repo.sha256(commit, name), "size": size, "pointerSize": 134}
                    entries.append(e)
                if prefix and not entries and not folders:
                    self._send(h, 404, b"entry not found", head=head, error="EntryNotFound")
                    return
                entries += [
                    {"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0, "path": f}
                    for f in sorted(folders)
                ]
                self._send(h, 200, json.dumps(entries).encode(), head=head, ctype="application/json")
            return
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            repo = self._repo(h, m.group(1), head)
            commit = self._commit(h, repo, m.group(2), head) if repo else None
            if not repo or not commit:
                return
            files = repo.commits[commit]
            if m.group(3) not in files:
                self._send(h, 404, b"entry not found", head=head, error="EntryNotFound")
                return
            if self.delay_s:
                time.sleep(self.delay_s)
            value = files[m.group(3)]
            size = _size(value)
            extra = {"X-Repo-Commit": commit, "ETag": f'"{repo.sha256(commit, m.group(3))}"', "Accept-Ranges": "bytes"}
            rng = h.headers.get("Range")
            if rng and not self.ignore_range:
                a, b = rng.removeprefix("bytes=").split("-")
                start, end = int(a), min(int(b), size - 1)
                if start >= size:
                    self._send(h, 416, b"", head=head, headers={"Content-Range": f"bytes */{size}"})
                    return
                extra["Content-Range"] = f"bytes {start}-{end}/{size}"
                sent = self._send(h, 206, _read(value, start, end + 1), head=head, headers=extra)
            else:
                sent = self._send(h, 200, _read(value, 0, size), head=head, headers=extra)
            with self._lock:
                self.sent += sent
            return
        self._send(h, 404, b"no such endpoint", head=head)

    def _repo(self, h: BaseHTTPRequestHandler, repo_id: str, head: bool) -> Repo | None:
        if repo_id not in self.repos:
            self._send(h, 404, b"repo not found", head=head, error="RepoNotFound")
            return None
        return self.repos[repo_id]

    def _commit(self, h: BaseHTTPRequestHandler, repo: Repo, rev: str, head: bool) -> str | None:
        commit = repo.branches.get(rev, rev if rev in repo.commits else None)
        if commit is None:
            self._send(h, 404, b"revision not found", head=head, error="RevisionNotFound")
        return commit

    def _send(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        *,
        head: bool,
        ctype: str = "application/octet-stream",
        headers: dict[str, str] | None = None,
        error: str | None = None,
    ) -> int:
        """Answer; the body bytes written."""
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        if error:
            h.send_header("X-Error-Code", error)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if head:
            return 0
        try:
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            return 0
        return len(body)


def write_hub_cache(cache: Path, repo_id: str, repo: Repo) -> Path:
    """Lay out ``repo`` the way huggingface_hub caches downloads; the repo's cache folder.

    ``models--ORG--NAME/blobs/<sha256>`` holds each file once; ``snapshots/<commit>/<file>``
    are relative symlinks to the blobs; ``refs/<branch>`` holds the branch's commit.
    """
    root = cache / ("models--" + repo_id.replace("/", "--"))
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    for commit, files in repo.commits.items():
        snap = root / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        for name, value in files.items():
            data = _read(value, 0, _size(value))
            blob = root / "blobs" / hashlib.sha256(data).hexdigest()
            if not blob.exists():
                blob.write_bytes(data)
            link = snap / name
            if not link.exists():
                os.symlink(os.path.relpath(blob, snap), link)
    for branch, commit in repo.branches.items():
        (root / "refs" / branch).write_text(commit)
    return root
