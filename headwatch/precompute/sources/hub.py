"""Checkpoints from a Hugging Face Hub model repo, online: one branch per checkpoint.

Per revision: one ``model_info`` call (the commit the branch points to, its files
and their LFS sha256), small GETs for ``config.json`` and shard indexes, then only
the attention bytes:

- safetensors: the header (huggingface_hub's ``parse_safetensors_file_metadata``) and
  the Q/K byte ranges (`precompute.sources.ranges`), read into memory; nothing is
  written to disk;
- ``pytorch_model.bin``: the shards holding attention tensors are downloaded to a
  scratch folder, loaded with ``weights_only=True`` and deleted at once;
- files already in the local Hub cache for that commit are read from there.

The fingerprint is the Hub's LFS sha256 (``sha256_source: hub``): a duplicate of a
known checkpoint costs one API call and no download. Offline (``HF_HUB_OFFLINE=1``)
the repo is read from the local Hub cache instead, by `precompute.sources.hubcache`.

While a run still pushes checkpoints (`precompute.follow.follow_hub`), the source lists only the branches that
point at a commit of their own (`own_commit`): a commit is atomic on the Hub, so such a branch's files are
whole; a branch that shares its commit with another was just created from it (``create_branch``) and its
upload has not landed yet.
"""

from __future__ import annotations

import builtins  # the sources have a `list` method, which hides the builtin in their class bodies
import contextlib
import hashlib
import json
import logging
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch
from huggingface_hub import HfApi, constants, hf_hub_url, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    SafetensorsParsingError,
)

from headwatch.analysis.errors import CheckpointError, CheckpointNotFoundError
from headwatch.families.blocks import block_tensor_names
from headwatch.families.extract import attention_tensor_names
from headwatch.families.family import ModelShape
from headwatch.precompute.settings import FetchSettings
from headwatch.precompute.sources.checkpoints import (
    BIN_INDEX,
    SAFETENSORS_INDEX,
    select_weight_files,
    tensors_to_read,
    weights_fingerprint,
)
from headwatch.precompute.sources.fetch import HubHttp, Meter, human_bytes
from headwatch.precompute.sources.ranges import (
    SafetensorsHeader,
    element_masks,
    header_from_metadata,
    header_read_cost,
    read_tensors,
)
from headwatch.precompute.sources.revisions import CheckpointRef, is_pythia, known_tokens_per_step, refs_from_names, schedule_gaps
from headwatch.precompute.sources.source import CheckpointSource, Fetched, SkipFn, SourceKind, check_shape
from headwatch.precompute.sources.weights import read_tensors as read_local_tensors
from headwatch.precompute.sources.weights import tensor_names

log = logging.getLogger("precompute")

# `model_info` answers kept, by revision, so that `HubSource.config` and `HubSource.fetch`
# share one API call per revision whichever comes first: the run reads the config of
# its first checkpoint(s) before fetching, and fetches one checkpoint ahead.
_INFOS_KEPT = 4


class HubSource(CheckpointSource):
    """The checkpoints (branches) of a Hub model repo, read over the network.

    Args:
        repo_id: ``ORG/NAME``.
        scratch: folder for temporary ``pytorch_model.bin`` downloads.
        fetch: retries, range merging, concurrency.
        meter: counts bytes fetched and scratch disk.
        token: Hub token (None: the logged-in user's, if any).
        endpoint: the Hub (default: ``HF_ENDPOINT`` or https://huggingface.co).
        cache_dir: the Hub cache, where files already downloaded are read (default:
            ``HF_HUB_CACHE``).
        following: the repo may still be receiving checkpoints: list only the branches that point at a
            commit of their own (`own_commit`).
    """

    kind: ClassVar[SourceKind] = "hub"
    fetch_settings: FetchSettings

    def __init__(
        self,
        repo_id: str,
        *,
        scratch: Path,
        fetch: FetchSettings,
        meter: Meter,
        token: str | bool | None = None,
        endpoint: str | None = None,
        cache_dir: str | Path | None = None,
        following: bool = False,
    ):
        super().__init__(name=repo_id, model_id=repo_id)
        self.following = following
        self.repo_id = repo_id
        self.scratch = scratch
        self.fetch_settings = fetch
        self.meter = meter
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self.cache_dir = str(cache_dir or constants.HF_HUB_CACHE)
        self.http = HubHttp(fetch, meter, token=token, stop=self.stop)
        self.api = HfApi(endpoint=self.endpoint, token=token, library_name="headwatch")
        self._masks: dict[tuple, dict[str, torch.Tensor]] = {}
        self._infos: OrderedDict[str, Any] = OrderedDict()  # revision -> model_info, the latest _INFOS_KEPT
        self._infos_lock = threading.Lock()
        self._said_bin = False

    def list(self) -> tuple[list[CheckpointRef], list[str]]:
        branches = self.branches()
        refs, ignored = refs_from_names(branches, where=f"the branches of {self.repo_id}")
        if not self.following:
            return refs, ignored
        ready = []
        for ref in refs:
            if own_commit(ref.revision, branches):
                ready.append(ref)
            else:
                log.info(
                    "%s points at the commit of another branch (its upload has not landed): left for the next round", ref.revision
                )
        return ready, ignored

    def branches(self) -> dict[str, str]:
        """Every branch of the repo and the commit it points at (``HfApi.list_repo_refs``, with retries).

        Raises:
            CheckpointNotFoundError: no such repo, or it is gated.
            CheckpointError, HubUnreachableError: the Hub refused or could not be reached.
        """
        refs = self._api(lambda: self.api.list_repo_refs(self.repo_id), what=f"list the branches of {self.repo_id}")
        return {b.name: b.target_commit for b in refs.branches}

    def config(self, ref: CheckpointRef) -> dict[str, Any]:
        info = self._info(ref)
        return self._json(info.sha, "config.json", ref)

    def fetch(
        self, ref: CheckpointRef, shape: ModelShape, *, skip: SkipFn, matrices: tuple[str, ...] = ("qk",), layers: bool = False
    ) -> Fetched:
        info = self._info(ref)
        commit = info.sha
        siblings = {s.rfilename: s for s in info.siblings or []}
        files = select_weight_files(siblings, lambda name: self._json(commit, name, ref), where=f"{self.repo_id}@{ref.revision}")
        lfs = {f: siblings[f].lfs.sha256 for f in files if siblings[f].lfs is not None}
        fetched = Fetched(ref, "", "hub", {}, commit=commit)
        if len(lfs) == len(files):
            fetched.files = dict(sorted(lfs.items()))
            fetched.sha256 = weights_fingerprint(lfs)
            if skip(fetched.sha256):
                return fetched
        fetched.config = self._json(commit, "config.json", ref)
        check_shape(fetched.config, shape)
        cached = {f: try_to_load_from_cache(self.repo_id, f, cache_dir=self.cache_dir, revision=commit) for f in files}
        paths = [Path(p) for p in cached.values() if isinstance(p, str)]  # str: in the cache
        if len(paths) == len(cached):
            where = tensor_names(paths)
            fetched.tensors = read_local_tensors(where, tensors_to_read(shape, where, matrices=matrices, layers=layers))
        elif files[0].endswith(".safetensors"):
            fetched.tensors = self._read_safetensors(commit, files, shape, ref, matrices, layers=layers)
        else:
            fetched.tensors = self._read_bin(commit, files, shape, ref, matrices, layers=layers)
        if not fetched.sha256:  # no LFS digest: fingerprint the attention tensors as read
            fetched.sha256, fetched.sha256_source = tensors_fingerprint(fetched.tensors), "read"
        return fetched

    @contextlib.contextmanager
    def checkpoint_folder(self, ref: CheckpointRef) -> Iterator[Path]:
        """The revision's config and weight files in ``scratch/<commit>/`` (files already in the
        Hub cache are linked, not downloaded), deleted when the block ends: one checkpoint at a time."""
        info = self._info(ref)
        commit = info.sha
        siblings = {s.rfilename: s for s in info.siblings or []}
        files = select_weight_files(siblings, lambda name: self._json(commit, name, ref), where=f"{self.repo_id}@{ref.revision}")
        wanted = ["config.json", *files] + [f for f in (SAFETENSORS_INDEX, BIN_INDEX, "generation_config.json") if f in siblings]
        folder = self.scratch / f"model-{commit[:12]}"
        folder.mkdir(parents=True, exist_ok=True)
        downloaded: dict[Path, int] = {}
        try:
            for f in dict.fromkeys(wanted):
                dest = folder / f
                cached = try_to_load_from_cache(self.repo_id, f, cache_dir=self.cache_dir, revision=commit)
                if isinstance(cached, str):
                    dest.symlink_to(Path(cached).resolve())
                    continue
                url = hf_hub_url(self.repo_id, f, revision=commit, endpoint=self.endpoint)
                downloaded[dest] = self.http.download(url, dest, what=f"download {self._where(ref, f)}")
            yield folder
        finally:
            for dest, size in downloaded.items():
                self.http.release(dest, size)
            shutil.rmtree(folder, ignore_errors=True)

    def tokenizer_location(self, ref: CheckpointRef) -> tuple[str, dict[str, Any]]:
        return self.repo_id, {"revision": "main", "cache_dir": self.cache_dir}

    def default_tokens_per_step(self) -> int | None:
        return known_tokens_per_step(self.repo_id)

    def check_schedule(self, available: builtins.list[CheckpointRef]) -> None:
        if not is_pythia(self.repo_id):
            return
        absent, extra = schedule_gaps(available)
        if absent:
            log.warning(
                "%s lacks %d branches of the Pythia schedule: %s",
                self.repo_id,
                len(absent),
                ", ".join(f"step{s}" for s in absent[:10]),
            )
        if extra:
            log.info("%s has branches outside the Pythia schedule: %s", self.repo_id, ", ".join(f"step{s}" for s in extra[:10]))

    def progress_note(self, ref: CheckpointRef) -> str:
        return f"{ref.revision}, {human_bytes(self.meter.fetched)} fetched at {human_bytes(self.meter.rate())}/s"

    # -- reading ----------------------------------------------------------------------

    def _read_safetensors(
        self,
        commit: str,
        files: builtins.list[str],
        shape: ModelShape,
        ref: CheckpointRef,
        matrices: tuple[str, ...],
        *,
        layers: bool = False,
    ) -> dict[str, torch.Tensor]:
        if len(files) > 1:  # sharded: the index says which shards hold the tensors wanted
            weight_map = self._json(commit, SAFETENSORS_INDEX, ref)["weight_map"]
            wanted = tensors_to_read(shape, weight_map, matrices=matrices, layers=layers)
            files = sorted({weight_map[n] for n in wanted})
        sizes = {s.rfilename: s.size for s in self._info(ref).siblings or []}
        headers = {f: self._header(commit, f, sizes.get(f), ref) for f in files}
        shapes = {n: s.shape for h in headers.values() for n, s in h.tensors.items()}
        masks = dict(self._element_masks(shape, shapes, matrices))
        if layers:  # the whole-layer matrices need every element of every block weight
            for name in block_tensor_names(shape, shapes).values():
                masks[name] = torch.ones(shapes[name], dtype=torch.bool)
        out: dict[str, torch.Tensor] = {}
        for f, header in headers.items():
            mine = {n: m for n, m in masks.items() if n in header.tensors}
            out.update(
                read_tensors(
                    self._getter(commit, f, ref),
                    header,
                    mine,
                    merge_gap=self.fetch_settings.range_merge_gap,
                    concurrency=self.fetch_settings.concurrency,
                    where=self._where(ref, f),
                )
            )
        return out

    def _read_bin(
        self,
        commit: str,
        files: builtins.list[str],
        shape: ModelShape,
        ref: CheckpointRef,
        matrices: tuple[str, ...],
        *,
        layers: bool = False,
    ) -> dict[str, torch.Tensor]:
        if len(files) > 1:
            weight_map = self._json(commit, BIN_INDEX, ref)["weight_map"]
            files = sorted({weight_map[n] for n in tensors_to_read(shape, weight_map, matrices=matrices, layers=layers)})
        if not self._said_bin:
            log.info(
                "%s@%s has no safetensors weights: downloading the pytorch_model.bin files that hold "
                "attention tensors, one checkpoint at a time, into %s",
                self.repo_id,
                ref.revision,
                self.scratch,
            )
            self._said_bin = True
        self.scratch.mkdir(parents=True, exist_ok=True)
        paths: dict[Path, int] = {}
        try:
            for f in files:  # every shard holding attention tensors: at most one checkpoint's worth on disk
                dest = self.scratch / f"{commit[:12]}-{f}"
                url = hf_hub_url(self.repo_id, f, revision=commit, endpoint=self.endpoint)
                paths[dest] = self.http.download(url, dest, what=f"download {self._where(ref, f)}")
            where = tensor_names(paths)
            tensors = read_local_tensors(where, tensors_to_read(shape, where, matrices=matrices, layers=layers))
            return {n: t.clone() for n, t in tensors.items()}  # off the mmap, so the files can go
        finally:
            for dest, size in paths.items():
                self.http.release(dest, size)

    def _element_masks(
        self, shape: ModelShape, shapes: dict[str, tuple[int, ...]], matrices: tuple[str, ...]
    ) -> dict[str, torch.Tensor]:
        """Element masks of the attention tensors ``matrices`` need, computed once per model geometry."""
        names = attention_tensor_names(shape, shapes, matrices=matrices)
        key = (shape, matrices, tuple((n, shapes[n]) for n in names))
        if key not in self._masks:
            self._masks = {key: element_masks(shape, {n: shapes[n] for n in names}, matrices=matrices)}
        return self._masks[key]

    def _header(self, commit: str, filename: str, size: int | None, ref: CheckpointRef) -> SafetensorsHeader:
        """The file's header, read and parsed by huggingface_hub (with retries); counted on the meter."""
        where = self._where(ref, filename)
        try:
            meta = self.http.call(
                lambda: self.api.parse_safetensors_file_metadata(
                    self.repo_id, filename, revision=commit, timeout=self.fetch_settings.timeout_s
                ),
                what=f"read the header of {where}",
            )
        except EntryNotFoundError as exc:
            raise CheckpointNotFoundError(f"{where} is listed but cannot be downloaded") from exc
        except SafetensorsParsingError as exc:
            raise CheckpointError(f"{where}: {_first_line(exc)}; truncated or not a safetensors file") from exc
        except HfHubHTTPError as exc:
            raise CheckpointError(f"{where}: {_first_line(exc)}") from exc
        header = header_from_metadata(meta, file_size=size, where=where)
        # the library's session reports no byte counts: count what its requests carried
        fetched, requests = header_read_cost(header.header_bytes, header.file_size)
        self.meter.add_fetched(fetched)
        for _ in range(requests):
            self.meter.add_request()
        return header

    def _getter(self, commit: str, filename: str, ref: CheckpointRef):
        url = hf_hub_url(self.repo_id, filename, revision=commit, endpoint=self.endpoint)
        what = f"read {self._where(ref, filename)}"

        def get(start: int, end: int) -> tuple[bytes, int | None]:
            try:
                return self.http.get_range(url, start, end, what=what)
            except EntryNotFoundError as exc:
                raise CheckpointNotFoundError(f"{self._where(ref, filename)} is listed but cannot be downloaded") from exc
            except HfHubHTTPError as exc:
                raise CheckpointError(f"{self._where(ref, filename)}: {_first_line(exc)}") from exc

        return get

    def _json(self, commit: str, filename: str, ref: CheckpointRef) -> dict[str, Any]:
        cached = try_to_load_from_cache(self.repo_id, filename, cache_dir=self.cache_dir, revision=commit)
        where = self._where(ref, filename)
        try:
            if isinstance(cached, str):
                text = Path(cached).read_bytes()
            else:
                text = self.http.get(
                    hf_hub_url(self.repo_id, filename, revision=commit, endpoint=self.endpoint), what=f"read {where}"
                )
        except EntryNotFoundError:
            raise CheckpointNotFoundError(f"{where} does not exist (save_pretrained writes one)") from None
        except HfHubHTTPError as exc:
            raise CheckpointError(f"{where}: {_first_line(exc)}") from exc
        try:
            return json.loads(text)
        except ValueError as exc:
            raise CheckpointError(f"{where} is not valid JSON: {exc}") from exc

    def _info(self, ref: CheckpointRef):
        """The revision's ``model_info`` (its commit, files and LFS digests): asked once, then
        kept for the next calls about the same revision (`_INFOS_KEPT`)."""
        with self._infos_lock:
            if ref.revision in self._infos:
                self._infos.move_to_end(ref.revision)
                return self._infos[ref.revision]
        info = self._api(
            lambda: self.api.model_info(
                self.repo_id, revision=ref.revision, files_metadata=True, timeout=self.fetch_settings.timeout_s
            ),
            what=f"look up {self.repo_id}@{ref.revision}",
            revision=ref.revision,
        )
        with self._infos_lock:
            self._infos[ref.revision] = info
            while len(self._infos) > _INFOS_KEPT:
                self._infos.popitem(last=False)
        return info

    def _api(self, fn, *, what: str, revision: str | None = None):
        """An HfApi call with retries; Hub errors become one-line checkpoint errors."""
        try:
            return self.http.call(fn, what=what)
        except RevisionNotFoundError:
            raise CheckpointNotFoundError(f"revision {revision!r} does not exist in {self.repo_id}") from None
        except GatedRepoError:
            raise CheckpointNotFoundError(
                f"{self.repo_id} is gated: accept its terms on {self.endpoint}/{self.repo_id} and log in (`hf auth login`)"
            ) from None
        except RepositoryNotFoundError:
            raise CheckpointNotFoundError(
                f"no model repo {self.repo_id!r} on {self.endpoint} (nor a local directory of that name); "
                "check the id, or log in (`hf auth login`) if it is private"
            ) from None
        except HfHubHTTPError as exc:
            raise CheckpointError(f"{what}: {_first_line(exc)}") from exc

    def _where(self, ref: CheckpointRef, filename: str) -> str:
        return f"{self.repo_id}@{ref.revision}/{filename}"


def own_commit(branch: str, branches: dict[str, str]) -> bool:
    """Whether ``branch`` points at a commit no other branch points at. A branch made with ``create_branch``
    points at the commit it was made from until the upload to it (``upload_folder(revision=branch)``, one
    commit) lands; until then it carries another checkpoint's files, or ``main``'s."""
    return sum(commit == branches[branch] for commit in branches.values()) == 1


def tensors_fingerprint(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over the attention tensors as read (name, dtype, shape and raw bytes, by name)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name} {t.dtype} {tuple(t.shape)}\n".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
