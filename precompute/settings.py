"""Precompute settings: defaults and environment variables are read here and nowhere else.

The resolved settings are written into every store's ``meta.json`` under
``settings`` so each figure can be traced to how it was made.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any, Literal

DeviceName = Literal["auto", "cpu", "cuda"]

# HEADWATCH_DEVICE sets the default of --device.
DEFAULT_DEVICE: DeviceName = os.environ.get("HEADWATCH_DEVICE", "auto")  # type: ignore[assignment]


@dataclass(frozen=True)
class Settings:
    """How a store is computed. Everything here lands in meta.json."""

    source: str
    device: str  # resolved: "cpu" or "cuda"
    dtype: str = "float32"  # dense product and element-wise statistics
    spectrum_dtype: str = "float64"  # QR core and its SVD
    chunk_elements: int = 2**26  # dense entries per work buffer
    tokens_per_step: int | None = None

    def as_meta(self) -> dict[str, Any]:
        return asdict(self)


def software_versions() -> dict[str, str]:
    """Versions of the libraries that shape the numbers, for meta.json."""
    out = {"python": platform.python_version()}
    for name in ("torch", "numpy", "safetensors", "pyarrow", "transformers", "huggingface_hub"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out
