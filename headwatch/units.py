"""Byte counts as people read them (shared by `headwatch info` and `headwatch plan`)."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """``1234567`` -> ``1.2 MB`` (decimal units, as ``du --si``)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
