"""A layer-major head axis (``L0 H0``, ``L0 H1``, ...): its categories, the lines between layers, the ticks that name
the heads and their font; shared by the heatmaps of the Architecture, Forward lenses and Circuits views."""

from __future__ import annotations

from typing import Any

from headwatch.dashboard import style


def head_labels(n_layers: int, n_heads: int) -> list[str]:
    """``L{layer} H{head}`` for every head in layer-major order (the heatmap's categories)."""
    return [f"L{layer} H{head}" for layer in range(n_layers) for head in range(n_heads)]


def layer_boundaries(n_layers: int, n_heads: int, *, xref: str = "x", yref: str = "y") -> list[dict[str, Any]]:
    """One vertical line between consecutive layers (at category index layer * n_heads - 0.5), any number of layers."""
    line = dict(color=style.BOUNDARY_COLOUR, width=1.2 if n_layers < 40 else 0.8)
    return [
        dict(
            type="line",
            xref=xref,
            yref=f"{yref} domain",
            x0=b * n_heads - 0.5,
            x1=b * n_heads - 0.5,
            y0=0,
            y1=1,
            line=line,
            layer="above",
        )
        for b in range(1, n_layers)
    ]


def head_ticks(n_layers: int, n_heads: int, *, max_labels: int = 64) -> tuple[list[str], list[str]]:
    """Ticks on a layer-major head axis that name the head: ``L{layer} H{head}``, every head when they fit.

    With more than ``max_labels`` heads, every ``stride``-th head of each layer is labelled (head 0 first;
    the smallest power-of-two stride that fits); when even one label per layer is too many, head 0 of
    every few layers. The tick values are the heatmap's categories (`head_labels`), so the text is the value.

    Returns:
        ``(tickvals, ticktext)``, equal lists.
    """
    if n_layers * n_heads <= max_labels:
        ticks = head_labels(n_layers, n_heads)
        return ticks, list(ticks)
    stride = 1
    while stride < n_heads and n_layers * -(-n_heads // stride) > max_labels:
        stride *= 2
    heads = range(0, n_heads, stride) if stride < n_heads else range(1)
    every = max(1, -(-n_layers * len(heads) // max_labels))
    ticks = [f"L{layer} H{head}" for layer in range(0, n_layers, every) for head in heads]
    return ticks, list(ticks)


def head_tick_font(n_labels: int) -> dict[str, Any]:
    """The tick font of a head axis with ``n_labels`` labels (smaller when many)."""
    return dict(size=11 if n_labels <= 24 else 9)
