"""Publish a store as a Hugging Face Hub dataset repo, with a dataset card.

The card (``README.md``) says what every table and column means (from the store
format's tables, `analysis.store.lenses.TABLES`, and the files' own Arrow schemas) and how the store
was made: model, checkpoints and revisions, duplicates, failures, settings and
software versions, all read from the store's ``meta.json``. Its YAML header
declares the Parquet files, so ``datasets.load_dataset(REPO_ID)`` works.

The upload is one commit holding every file of the store plus the card, made
under the store's lock so no run changes the store mid-upload::

    python -m headwatch.precompute.store.publish STORE REPO_ID [--private]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx2
import pyarrow as pa
import pyarrow.parquet as pq

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import TABLES, Meta, open_store, read_meta
from headwatch.analysis.store.format import HEADS, HIST_Z_BINS, HIST_Z_HI, HIST_Z_LO, META_FILE
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.store.lenses.overlaps import OVERLAPS
from headwatch.analysis.store.outputs import model_text
from headwatch.families.registry import folded_note
from headwatch.precompute.store.lock import store_lock

CARD_FILE = "README.md"
EXIT_USAGE, EXIT_NETWORK = 2, 3  # as `python -m headwatch.precompute`: bad input, the Hub failed


def dataset_card(store: str | Path, *, repo_id: str | None = None) -> str:
    """The ``README.md`` of a store's dataset repo.

    Args:
        store: the store directory.
        repo_id: the dataset repo, for the loading examples (default: a placeholder).

    Raises:
        StoreError: the store cannot be opened or is inconsistent.
    """
    store = Path(store)
    opened = open_store(store)
    meta = opened.meta
    model = meta.model
    repo = repo_id or "ORG/NAME"
    checkpoints = meta.checkpoints
    settings = meta.settings
    present = [spec for spec in TABLES.values() if (store / spec.file).is_file()]

    products = " and ".join({"qk": "W_QK", "ov": "W_OV"}.get(m, m) for m in meta.matrices)
    yaml = [
        "---",
        f"pretty_name: {json.dumps(products + ' statistics of ' + str(model.id))}",
        "tags:",
        "- interpretability",
        "- attention-heads",
        "- training-dynamics",
        "- headwatch",
        "configs:",
    ]
    for spec in present:
        yaml += [f"- config_name: {spec.name}", f"  data_files: {spec.file}"]
        if spec is HEADS:
            yaml.append("  default: true")
    yaml.append("---")

    out = [
        *yaml,
        "",
        f"# {products} statistics of `{model.id}` across training",
        "",
        "For every attention head h of every layer, at every checkpoint, the statistics of "
        "W_QK,h = W_Q,h^T W_K,h"
        + (' and of its OV circuit W_OV,h = W_O[:, h] W_V,h (`matrix` "ov")' if "ov" in meta.matrices else "")
        + f" (each a {model.d_model} x {model.d_model} matrix of rank at most "
        f"{model.d_head}): the distribution of its entries, its singular values, its symmetric fraction and "
        f"eigenvalue positivity, and how far it moves between checkpoints. "
        f"Made with headwatch's `python -m headwatch.precompute`.",
        "",
        "Conventions: raw weights as stored in the checkpoint; no 1/sqrt(d_head) factor; no biases; "
        "no LayerNorm folding; rotary position encoding ignored. Natural logarithms."
        + (f" Except: {folded}." if (folded := folded_note(model.family)) else ""),
        "",
        "## How it was made",
        "",
        "| | |",
        "| --- | --- |",
        f"| model | `{model.id}` ({model.model_type}, family `{model.family}`) |",
        f"| geometry | {model.n_layers} layers x {model.n_heads} heads "
        f"({model.n_kv_heads} K/V heads), d_model {model.d_model}, d_head {model.d_head} |",
        "| source | `{}` ({}) |".format(*meta.source),
        f"| checkpoints | {len(checkpoints)} listed: {len(meta.done_steps)} with statistics "
        f"({len(meta.mixed)} of them with mixed weights), {len(meta.duplicates)} duplicates, "
        f"{len(meta.failed)} missing or failed |",
        f"| steps | {_steps_summary(meta.done_steps)} |",
        f"| rows | {opened.keys.num_rows} in `{HEADS.file}` |",
        f"| schema version | {meta.schema_version} |",
        "",
        "Settings (`meta.json` `settings`):",
        "",
        "```json",
        json.dumps(settings, indent=1, sort_keys=True),
        "```",
        "",
        "Software versions (`meta.json` `software`):",
        "",
        "| package | version |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in sorted(meta.software.items())],
        "",
        "### Checkpoints",
        "",
        "Every checkpoint's weights are fingerprinted with sha256; revisions whose weights are identical to an "
        "earlier one are listed with `duplicate_of` and have no rows: never read them as a training state. "
        "Source of the sha256: `file` = the weight files hashed here, `hub` = the Hub's LFS metadata (the same "
        "digest, without downloading), `read` = the attention tensors as read (comparable only with each other); "
        "a sharded checkpoint's digest is the sha256 of its sorted `name sha256` lines. A checkpoint with a weight "
        "file identical to a later checkpoint's while the whole differs mixes two revisions' weights "
        "(`shared_files` in `meta.json`; the column *mixed with* below): it has rows, but is not a training state.",
        "",
        "| step | revision | tokens | sha256 | source of sha256 | mixed with | duplicate of |",
        "| ---: | --- | ---: | --- | --- | --- | ---: |",
        *[
            f"| {c.step} | {c.revision} | {c.tokens if c.tokens is not None else ''} | "
            f"`{str(c.sha256)[:12]}` | {c.sha256_source} | "
            f"{'; '.join(f'{s.file} = step {s.step} {s.other_file}' for s in c.shared_files)} | "
            f"{c.duplicate_of if c.duplicate_of is not None else ''} |"
            for c in checkpoints
        ],
    ]
    if meta.failed:
        out += [
            "",
            "Missing or failed checkpoints (no rows):",
            "",
            "| step | revision | reason | error |",
            "| ---: | --- | --- | --- |",
        ]
        out += [f"| {f.step} | {f.revision} | {f.reason} | {_cell(f.error)} |" for f in meta.failed]
    out += [
        "",
        "## Files",
        "",
        f"- `{META_FILE}`: the model, the checkpoint list above, the histogram edges, settings and versions.",
        *[f"- `{spec.file}`: {spec.row}" for spec in present],
    ]
    for spec in present:
        out += [
            "",
            f"### `{spec.file}`: {spec.row}",
            "",
            spec.about,
            "",
            "| column | type | meaning |",
            "| --- | --- | --- |",
            *_column_rows(store / spec.file, spec.docs),
        ]
        if spec is HEADS:
            out += [
                "",
                f"`hist_z` bins: z = (w - mu) / sigma on {HIST_Z_BINS} fixed bins from {HIST_Z_LO:g} to "
                f"{HIST_Z_HI:g} (`meta.json` `hist_edges`), plus an underflow bin first and an overflow bin last; "
                f"the {HIST_Z_BINS + 2} probabilities sum to 1. Raw-unit densities: p(w) = p_z((w - mu)/sigma) / "
                "sigma. Singular values: lambda_k = s_k^2.",
            ]
        if spec is OVERLAPS:
            out += ["", f"K = {meta.overlap_k} (`meta.json` `overlaps`)."]
        if spec is ATTENTION and meta.forward is not None:
            f = meta.forward
            out += [
                "",
                f"Evaluation set (`meta.json` `forward`): {f.n_sequences} sequences of {f.seq_len} tokens of "
                f"{f.text} (text sha256 `{f.text_sha256[:12]}`, token ids sha256 `{f.tokens_sha256[:12]}`), "
                f"tokenizer {f.tokenizer}, windows drawn with seed {f.seed}; the induction score on "
                f"{f.induction_sequences} sequences of {f.induction_repeat} random tokens repeated twice (seed "
                f"{f.induction_seed}); forward pass in {f.dtype}. Uniform causal attention over T positions "
                "gives entropy mean_i log2 i, span (T - 1)/4.",
            ]
    out += [
        "",
        "## Loading",
        "",
        "```python",
        "import pandas as pd",
        "from huggingface_hub import hf_hub_download",
        "",
        f'df = pd.read_parquet(hf_hub_download("{repo}", "{HEADS.file}", repo_type="dataset"))',
        'df[df["head"] == 3]  # index columns by name: df.head is a pandas method',
        "```",
        "",
        f'or `datasets.load_dataset("{repo}")`.',
        "",
    ]
    return "\n".join(out)


def push_store(
    store: str | Path,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | bool | None = None,
    api: Any = None,
) -> str:
    """Upload a store and its dataset card as one commit to a Hub dataset repo (created if needed).

    Args:
        store: the store directory.
        repo_id: the dataset repo, ``ORG/NAME``.
        private: create the repo private (an existing repo keeps its visibility).
        token: Hub token (default: the logged-in user's).
        api: an ``HfApi`` (tests pass a recording stand-in).

    Returns:
        The URL of the commit.

    Raises:
        StoreError: the store cannot be opened (a file, a folder that is not a store: refused before its lock is
            taken), another run holds its lock, or the repo holds the store of another model.
        huggingface_hub errors (``HfHubHTTPError``, an ``OSError``): the Hub refused or failed.
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    store = Path(store)
    read_meta(store)  # not a store: said before anything is written, its lock file included
    api = api or HfApi(token=token, library_name="headwatch")
    with store_lock(store):
        meta = read_meta(store)
        if meta.upgraded:
            raise StoreError(
                f"{store} was written by an older schema version; upgrade it before publishing "
                f"(python -m headwatch.precompute.store.upgrade {store}) so that its files say what its card says"
            )
        check_repo(api, repo_id, meta)
        card = dataset_card(store, repo_id=repo_id)
        files = sorted(p for p in store.iterdir() if p.is_file() and p.name != CARD_FILE)
        operations = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p)) for p in files]
        operations.append(CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=card.encode()))
        model = open_store(store).meta.model.id
        try:
            api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
            info = api.create_commit(
                repo_id,
                operations=operations,
                repo_type="dataset",
                commit_message=f"headwatch store of {model}: {', '.join(p.name for p in files)} and dataset card",
            )
        except httpx2.TransportError as exc:
            raise ConnectionError(f"cannot reach the Hub to push {repo_id}: {type(exc).__name__}: {exc}") from exc
    return str(getattr(info, "commit_url", None) or f"https://huggingface.co/datasets/{repo_id}")


def _column_rows(path: Path, docs: dict[str, str]) -> list[str]:
    """Markdown rows ``| column | type | meaning |`` for every column of a Parquet file."""
    schema = pq.read_schema(path)
    rows = []
    for name in schema.names:
        meaning = docs.get(name, "see meta.json")
        rows.append(f"| `{name}` | {_type(schema.field(name).type)} | {_cell(meaning)} |")
    return rows


def _type(t: pa.DataType) -> str:
    return f"list&lt;{t.value_type}&gt;" if pa.types.is_list(t) else str(t)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _steps_summary(steps: list[int]) -> str:
    if not steps:
        return "none"
    return (
        f"{len(steps)} from {min(steps)} to {max(steps)}: "
        + ", ".join(map(str, steps[:12]))
        + (", ..." if len(steps) > 12 else "")
    )


def check_repo(api: Any, repo_id: str, meta: Meta) -> None:
    """Refuse to push the store of ``meta`` into a dataset repo that holds the store of another model: its
    ``meta.json`` names another model or geometry (an upload would mix the two stores' files). A repo that does
    not exist yet, or holds no store, takes it.

    Raises:
        StoreError: the repo holds another model's store, or a ``meta.json`` this code cannot read.
        ConnectionError: the Hub cannot be reached.
    """
    import tempfile

    from huggingface_hub.errors import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    with tempfile.TemporaryDirectory(prefix="headwatch-publish-") as tmp:
        try:
            api.hf_hub_download(repo_id, META_FILE, repo_type="dataset", local_dir=tmp)
        except LocalEntryNotFoundError as exc:  # no network: not an answer about the repo
            raise ConnectionError(f"cannot reach the Hub to read {repo_id}'s {META_FILE}: {exc}") from exc
        except (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError):
            return
        try:
            theirs = read_meta(tmp).model
        except StoreError as exc:
            raise StoreError(
                f"the dataset repo {repo_id} holds a {META_FILE} this code cannot read ({exc}); push to another repo"
            ) from None
    if theirs.id != meta.model.id or theirs.geometry() != meta.model.geometry():
        raise StoreError(
            f"the dataset repo {repo_id} holds the store of another model, {model_text(theirs)}, not "
            f"{model_text(meta.model)}; push to another repo"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m headwatch.precompute.store.publish",
        description="Upload a store as a Hub dataset repo with a dataset card.",
    )
    p.add_argument("store", help="store directory (meta.json + heads.parquet)")
    p.add_argument("repo_id", help="dataset repo to create or update, ORG/NAME")
    p.add_argument("--private", action="store_true", help="create the repo private")
    args = p.parse_args(argv)
    try:
        url = push_store(args.store, args.repo_id, private=args.private or None)
    except ValueError as exc:  # StoreError: not a store, locked, the repo of another model
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # the Hub refused or failed (its errors are OSErrors)
        print(f"error: push to {args.repo_id} failed: {exc}", file=sys.stderr)
        return EXIT_NETWORK
    print(f"pushed {args.store} to {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
