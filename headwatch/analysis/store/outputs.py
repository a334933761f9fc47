"""Where a command may write, checked before it writes anything.

A command that writes a store (``precompute``, its ``--follow``, ``train --watch``) takes a path that holds
nothing yet (missing, or an empty folder) or a store of the same model (`store_at`, `check_same_model`); a
command that writes files into a folder (``report``, ``compare``, ``llc-calibrate``) takes a folder that is not
a store (`check_files_folder`). Anything else is refused with a `StoreError` that names the path, says what it
is, and what to give instead: the command line prints it as one line and exits 2.
"""

from __future__ import annotations

from pathlib import Path

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store.format import META_FILE
from headwatch.analysis.store.meta import Meta, ModelInfo, read_meta


def store_at(path: str | Path, *, option: str = "--out") -> Meta | None:
    """The metadata of the store at the output path ``path``, or None when nothing is there yet.

    Args:
        path: where a command would write a store.
        option: the command-line option that named it, for the message.

    Returns:
        None for a missing path or an empty folder; the store's metadata otherwise.

    Raises:
        StoreError: ``path`` is a file, a folder of stores or a non-empty folder that is not a store, or its
            ``meta.json`` is unreadable.
        SchemaVersionError: the store is from a newer schema version.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StoreError(f"{option} {str(path)!r} is a file, not a store folder; give a new path (a folder is created)")
    if (path / META_FILE).is_file():
        return read_meta(path)
    if not path.exists() or not any(path.iterdir()):
        return None
    stores = sorted(p.name for p in path.iterdir() if (p / META_FILE).is_file())
    if stores:
        raise StoreError(
            f"{option} {str(path)!r} is a folder of stores ({', '.join(stores[:3])}{', ...' if len(stores) > 3 else ''}), "
            f"not a store; give a new path, or one of its stores"
        )
    raise StoreError(f"{option} {str(path)!r} exists, is not empty and is not a store; give a new path")


def model_text(model: ModelInfo) -> str:
    """``induction-d64 (gpt2, 2 layers of 4 heads, d_model 64, d_head 16)``: the model and its geometry."""
    kv = f", {model.n_kv_heads} key-value heads" if model.n_kv_heads not in (None, model.n_heads) else ""
    layers = f"{model.n_layers} layer{'s' if model.n_layers != 1 else ''}"
    heads = f"{model.n_heads} head{'s' if model.n_heads != 1 else ''}"
    return (
        f"{model.id or 'an unnamed model'} ({model.family}, {layers} of {heads}{kv}, "
        f"d_model {model.d_model}, d_head {model.d_head})"
    )


def check_same_model(path: str | Path, stored: Meta, model: ModelInfo, *, source: str, option: str = "--out") -> None:
    """Refuse to add ``source``'s checkpoints (of ``model``) to the store at ``path`` (``stored``) of another model.

    Two models are the same when their geometry is (`analysis.store.meta.ModelInfo.geometry`): the names may
    differ (a run folder renamed, ``--model-id``).

    Raises:
        StoreError: the geometries differ; the message names both models.
    """
    if stored.model.geometry() != model.geometry():
        raise StoreError(
            f"{option} {str(path)!r} is the store of another model: {model_text(stored.model)}, not "
            f"{model_text(model)} of {source!r}; give a new {option}"
        )


def check_files_folder(path: str | Path, *, what: str, option: str = "--out") -> None:
    """Refuse an output folder for ``what`` (``the report``) that is a file or a statistics store.

    A missing folder is created by the command; an existing one that is not a store takes the files (a rerun
    replaces them).

    Raises:
        StoreError: ``path`` is a file, or a store (its folder is the job's, and ``headwatch publish`` uploads
            every file in it as the store's).
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise StoreError(f"{option} {str(path)!r} is a file; give a folder for {what} (it is created when missing)")
    if (path / META_FILE).is_file():
        raise StoreError(f"{option} {str(path)!r} is a statistics store; give a folder of its own for {what}")
