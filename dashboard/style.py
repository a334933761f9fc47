"""Styling constants shared by every figure: colours, colour scales, sizes, margins."""

from __future__ import annotations

from plotly.colors import get_colorscale, sample_colorscale

# Colour scales are written out as [position, colour] lists: figures are built without
# plotly's validation, which is what turns a name such as "Turbo" into a list plotly.js knows.
# Sequential scale for densities and statistic heatmaps; diverging for signed statistics.
HEATMAP_SCALE = get_colorscale("Viridis")
SIGNED_SCALE = get_colorscale("RdBu_r")
SIGNED_STATS = ("mean", "skew")

# Chosen steps: sampled from early (dark) to late (bright) so order reads at a glance.
STEP_SCALE = get_colorscale("Plasma")
STEP_SCALE_SPAN = (0.0, 0.85)  # the top of Plasma is too pale on white

# Layers (trajectory map, layer means) and heads (layer view) are coloured along continuous scales.
LAYER_SCALE = get_colorscale("Turbo")
HEAD_SCALE = get_colorscale("Turbo")

LAYER_MEAN_COLOUR = "#d62728"  # the layer mean: red, dashed
LAYER_MEAN_DASH = "dash"
LAYER_MEAN_WIDTH = 2.5
CONTEXT_COLOUR = "rgba(120,120,120,0.35)"  # other heads behind the chosen one
FOCUS_WIDTH = 2.5
THIN_WIDTH = 1.0
DUPLICATE_COLOUR = "rgba(110,110,110,0.8)"  # duplicate checkpoints: grey dotted marks
BOUNDARY_COLOUR = "white"  # layer boundaries on architecture heatmaps
EDGE_COLOUR = "rgba(140,140,140,0.35)"  # kNN edges of the trajectory map
LEADING_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")  # lambda_0 .. lambda_3
TRAIN_COLOUR, VAL_COLOUR = "#1f77b4", "#ff7f0e"
LOSS_COLOUR = "#222222"  # the loss curve overlaid on time axes: black, dotted

HEIGHT = 440
SMALL_HEIGHT = 260
MARGIN = dict(l=64, r=24, t=36, b=52)
FONT_SIZE = 13


def step_colours(n: int) -> list[str]:
    """``n`` colours from early to late along `STEP_SCALE`."""
    if n <= 0:
        return []
    lo, hi = STEP_SCALE_SPAN
    points = [lo + (hi - lo) * i / max(n - 1, 1) for i in range(n)]
    return sample_colorscale(STEP_SCALE, points)


def scale_colours(scale: list, n: int) -> list[str]:
    """``n`` colours evenly along a named continuous scale."""
    return sample_colorscale(scale, [i / max(n - 1, 1) for i in range(n)]) if n > 0 else []
