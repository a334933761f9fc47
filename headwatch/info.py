"""``headwatch info STORE``: what a store holds, read from its meta.json and files (no torch).

Reads through `analysis.store` (`open_store`, the typed `Meta`, the declared tables) and
compares the recorded settings with the job's defaults (`precompute.settings`) to say what a
rerun with the default options would add.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.compute as pc

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store.format import MATRICES
from headwatch.analysis.store.lenses import LENSES, TABLES
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.store.reader import open_store, read_table
from headwatch.precompute.settings import DEFAULT_MATRICES, RunOptions
from headwatch.units import human_bytes

EXIT_OK, EXIT_USAGE = 0, 2


def store_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (hidden lock files included)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def rerun_adds(path: Path, meta) -> list[str]:
    """What ``headwatch precompute --source <its source> --out STORE`` with default options would add."""
    adds = []
    head = [m for m in DEFAULT_MATRICES if m in MATRICES]
    missing = [m for m in head if m not in meta.matrices]
    if missing:
        adds.append(f"per-head {','.join(missing)} rows for all {len(meta.done_steps)} checkpoints")
    for lens in LENSES:
        enough = len(meta.done_steps) >= lens.min_checkpoints
        if lens.asked(RunOptions()) and not lens.in_store(path) and enough:
            adds.append(f"the {lens.title} ({', '.join(lens.files)})" + (" for every checkpoint" if lens.stepwise else ""))
    if meta.failed:
        adds.append(f"a retry of the {len(meta.failed)} failed checkpoints")
    adds.append(f"any checkpoint of {meta.settings.get('source') or 'its source'!r} not yet in the store")
    return adds


def absent_types(record: object) -> dict[str, str]:
    """The head types a store's types lens did not decide and why (``meta.json`` ``types`` ``absent``), less the
    current-token type, which `forward_has` reports from the forward lens itself."""
    absent = record.get("absent") if isinstance(record, dict) else None
    return {str(k): str(v) for k, v in absent.items() if k != "current_token"} if isinstance(absent, dict) else {}


def forward_has(path: Path, column: str) -> bool:
    """Whether the store's attention.parquet has the column ``column``."""
    import pyarrow.parquet as pq

    try:
        return column in pq.ParquetFile(path / ATTENTION.file).schema_arrow.names
    except OSError:
        return False


def llc_data_lines(path: Path, meta) -> list[str]:
    """The distributions the store's refined LLCs were taken on (meta.json ``llc.data``; a store written before they
    were named: held-out text), each with its checkpoints and sequences, and how to add the others."""
    from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_BUILT_IN, LLC_DATA_COLUMN, data_records
    from headwatch.analysis.store.older_versions import complete_keys

    records = data_records(meta.llc)
    table = read_table(path, LLC)
    if not records or table is None:
        return []
    table = complete_keys(LLC, table)
    lines = ["refined LLC distributions (the SGLD loss taken on):"]
    for name, record in records.items():
        steps = set(table.filter(pc.equal(table[LLC_DATA_COLUMN], name))["step"].to_pylist())
        sha = str(record.get("tokens_sha256") or "")[:12]
        lines.append(
            f"  {name:<9} {len(steps)} checkpoints; {record.get('sequences')} x {record.get('seq_len')} tokens "
            f"(sha256 {sha}): {record.get('description', '')}"
        )
    if "data" not in (meta.llc or {}):
        lines.append("  (written before distributions were named: every estimate is on held-out text)")
    others = [n for n in LLC_DATA_BUILT_IN if n not in records]
    if others:
        lines.append(f"  add others: --lenses llc --llc-data {','.join(others)} (each is stored beside these)")
    return lines


def describe(path: str | Path) -> list[str]:
    """The lines ``headwatch info`` prints for the store at ``path``.

    Raises:
        StoreError: not a store, or its files disagree.
    """
    path = Path(path)
    store = open_store(path)
    meta, model = store.meta, store.meta.model
    steps = meta.done_steps
    lines = [
        f"store: {path}",
        f"model: {model.id or '(unnamed)'} ({model.model_type or model.family})",
        f"architecture: {model.family}, {model.n_layers} layers x {model.n_heads} heads"
        + (f" ({model.n_kv_heads} key/value heads)" if model.n_kv_heads not in (None, model.n_heads) else "")
        + f", d_model {model.d_model}, d_head {model.d_head}",
        f"checkpoints: {len(steps)}"
        + (f", steps {steps[0]} to {steps[-1]}" if steps else "")
        + (f" ({len(meta.duplicates)} duplicates, {len(meta.failed)} failed)" if meta.duplicates or meta.failed else ""),
        f"matrices: {', '.join(meta.matrices)}",
        "tables:",
    ]
    for spec in TABLES.values():
        file = path / spec.file
        lines.append(f"  {spec.file:<26} {human_bytes(file.stat().st_size) if file.is_file() else 'absent'}")
    settings = dict(meta.settings)
    lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items() if k != "fetch"))
    lines.append("lenses:")
    for lens in LENSES:
        if not (path / lens.tables[0].file).is_file():
            lines.append(f"  {lens.name:<11} absent ({lens.summary})")
            continue
        rows = read_table(path, lens.tables[0])
        count = len(set(rows["step"].to_pylist())) if rows is not None and "step" in rows.column_names else None
        unit = "pairs of consecutive checkpoints" if lens.min_checkpoints > 1 else "checkpoints"
        at = f"{count} {unit}" if count is not None else "present"
        lacking = [spec.file for spec in lens.tables[1:] if not (path / spec.file).is_file()]
        lines.append(
            f"  {lens.name:<11} {at}"
            + (f"; meta.json {lens.meta_key!r} records how" if lens.recorded(meta) else "")
            + (f"; lacks {', '.join(lacking)} (a rerun of the lens adds it)" if lacking else "")
        )
    lines += [f"  note: no {name} heads: {why}" for name, why in absent_types(meta.types).items()]
    if meta.forward is not None and (path / ATTENTION.file).is_file() and not forward_has(path, "current_token"):
        lines.append(
            "  note: attention.parquet has no current_token score (written before it was recorded): recompute the "
            "forward lens (--lenses attention) to have it and the current-token heads"
        )
    priced = [lens for lens in LENSES if lens.seconds is not None or lens.store_bytes is not None]
    lines.append("what a checkpoint of each lens costs (recorded figures, docs/benchmarks.md; headwatch plan scales them):")
    for lens in priced:
        figures = [f"{lens.seconds.name} = {lens.seconds.seconds} s"] if lens.seconds is not None else []
        figures += [lens.store_bytes.describe()] if lens.store_bytes is not None else []
        lines.append(f"  {lens.name:<11} {'; '.join(figures)}")
    if meta.forward is not None:
        lines.append(f"evaluation sequences: {meta.forward.n_sequences} x {meta.forward.seq_len} tokens of {meta.forward.text}")
    lines += llc_data_lines(path, meta)
    lines.append(f"size on disk: {human_bytes(store_bytes(path))}")
    lines.append("a rerun with the default options would add:")
    lines += [f"  - {a}" for a in rerun_adds(path, meta)]
    return lines


def run(store: str) -> int:
    """Print `describe` for ``store``; a path that is no store is a usage error (exit 2)."""
    try:
        lines = describe(store)
    except StoreError as exc:  # it names the path and says what to give
        print(f"headwatch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"headwatch: error: {store!r} is not a readable store: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(lines))
    return EXIT_OK
