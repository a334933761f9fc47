"""Error types shared by the analysis library, the precompute job and the app.

Each subclasses the built-in a caller would naturally catch, and every message
quotes the bad value and says what to do about it.
"""

from __future__ import annotations


class StoreError(ValueError):
    """A statistics store is missing, malformed, inconsistent or from an unknown version."""


class SchemaVersionError(StoreError):
    """A store was written by a newer (or unknown) schema version than this code reads."""


class UnknownArchitectureError(ValueError):
    """A checkpoint's ``model_type`` has no extraction adapter."""


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be used (corrupt, truncated, wrong shapes)."""


class CheckpointNotFoundError(FileNotFoundError):
    """A checkpoint, or the weight files inside it, does not exist."""


class HubUnreachableError(ConnectionError):
    """The network failed on every retry; the run stops, and the same command resumes it."""


class ClusterError(ConnectionError):
    """The Ray cluster could not be reached or was lost, or a task's worker kept dying; the run
    stops, the store keeps every committed checkpoint, and the same command resumes it."""
