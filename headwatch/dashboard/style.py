"""Styling constants shared by every figure: colours, colour scales, sizes, margins."""

from __future__ import annotations

from plotly.colors import get_colorscale, sample_colorscale

# Colour scales are written out as [position, colour] lists: figures are built without
# plotly's validation, which is what turns a name such as "Turbo" into a list plotly.js knows.
# Sequential scale for densities and statistic heatmaps; diverging for signed statistics.
HEATMAP_SCALE = get_colorscale("Viridis")
SIGNED_SCALE = get_colorscale("RdBu_r")
SIGNED_STATS = ("mean", "skew", "eig_positivity")

# Chosen steps: early to late along navy, purple, magenta, orange, brown: every hue dark enough on white and
# neighbours far apart (Plasma put the first two steps in two near-identical dark blues and the last in pale yellow).
STEP_SCALE = [[0.0, "#08306b"], [0.25, "#6a3d9a"], [0.5, "#d01c8b"], [0.75, "#e6550d"], [1.0, "#7f2704"]]
STEP_SCALE_SPAN = (0.0, 1.0)

# Layers (trajectory map, layer means) and heads (layer view) are coloured along continuous scales.
LAYER_SCALE = get_colorscale("Turbo")
HEAD_SCALE = get_colorscale("Turbo")

REFERENCE_FILL = "rgba(120,120,120,0.16)"  # the random-head 5-95% band
REFERENCE_LINE = "rgba(80,80,80,0.7)"  # its mean, dotted
THRESHOLD_COLOUR = "#6a3d9a"  # a head type's entry threshold (dashed) and exit level (dotted) on its score
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
# Runs compared side by side (Compare runs page, joint trajectory map): one colour and one marker symbol each.
RUN_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
RUN_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "x", "star", "cross", "pentagon")
# The joint trajectory map's clusters (several runs on one map, the runs told apart by their marker symbols): none of
# them a run's colour, nor a head type's (`views.trajectories.data.maps.TYPE_COLOURS`); the heads outlined in one grey.
JOINT_CLUSTER_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")
GROUP_OUTLINE = "#333333"
# Series of one chart that are not runs (the Across-sizes timescales): each its own colour and its own marker symbol,
# twelve of each; past twelve the symbols shift by one per round, so no two series share both.
SERIES_COLOURS = (*RUN_COLOURS, "#bcbd22", "#393b79", "#7f7f7f", "#637939")
SERIES_SYMBOLS = (*RUN_SYMBOLS, "triangle-down", "hexagon", "star-diamond", "hourglass")
LOSS_COLOUR = "#222222"  # the loss curve overlaid on time axes: black, dotted

HEIGHT = 440
SMALL_HEIGHT = 260
MARGIN = dict(l=64, r=24, t=36, b=68)
# Charts stacked over one time axis on a page share a fixed left and right margin (no margin grows to fit a
# y axis's tick labels), so a step sits at the same pixel in each (`figures.common.stacked`): the left holds the
# value axis's ticks and title; the right, chosen per page for its widest, a colour bar, a legend or the loss axis.
STACK_MARGIN = dict(l=80, r=170)
FONT_SIZE = 13
# A legend under the figure's title, above the plot: in the container's frame, so that Plotly deepens the top margin
# to the rows it wraps to in a narrow column instead of writing them over the title (a paper-frame legend above the
# plot grows upward into the title); `dashboard.export.titled` moves it just below the title's last line.
LEGEND_TOP = dict(orientation="h", yref="container", y=0.92, yanchor="top", xanchor="left", x=0)


def step_colours(n: int) -> list[str]:
    """``n`` colours from early to late along `STEP_SCALE`."""
    if n <= 0:
        return []
    lo, hi = STEP_SCALE_SPAN
    points = [lo + (hi - lo) * i / max(n - 1, 1) for i in range(n)]
    return sample_colorscale(STEP_SCALE, points)


LAYER_SPAN = (0.08, 0.92)  # Turbo's ends are near black and dark red: layer 0 reads blue, the last red


def layer_colours(n: int) -> list[str]:
    """``n`` layer colours along `LAYER_SCALE`, from blue (layer 0) to red (the last)."""
    lo, hi = LAYER_SPAN
    return sample_colorscale(LAYER_SCALE, [lo + (hi - lo) * i / max(n - 1, 1) for i in range(n)]) if n > 0 else []


def layer_steps(n: int) -> list:
    """A stepped colour scale for ``n`` discrete layers (one flat band per layer, `layer_colours`), for cmin -0.5,
    cmax n - 0.5."""
    colours = layer_colours(max(n, 1))
    out = []
    for i, c in enumerate(colours):
        out += [[i / len(colours), c], [(i + 1) / len(colours), c]]
    return out


def scale_colours(scale: list, n: int) -> list[str]:
    """``n`` colours evenly along a named continuous scale."""
    return sample_colorscale(scale, [i / max(n - 1, 1) for i in range(n)]) if n > 0 else []


def run_colour(i: int, alpha: float | None = None) -> str:
    """The colour of the ``i``-th compared run (cycling), as ``rgba(...)`` when ``alpha`` is given."""
    c = RUN_COLOURS[i % len(RUN_COLOURS)]
    if alpha is None:
        return c
    r, g, b = (int(c[j : j + 2], 16) for j in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def series_style(i: int) -> tuple[str, str]:
    """The colour and marker symbol of a chart's ``i``-th series (`SERIES_COLOURS`, `SERIES_SYMBOLS`): distinct in
    both for the first twelve, and no two of the first 144 alike in both."""
    n = len(SERIES_COLOURS)
    return SERIES_COLOURS[i % n], SERIES_SYMBOLS[(i + i // n) % len(SERIES_SYMBOLS)]


# Developmental stages shaded behind the loss (Timeline page, Overview card): by the stage's trend.
STAGE_FILLS = {
    "rising": "rgba(230,85,13,0.14)",
    "falling": "rgba(31,119,180,0.14)",
    "flat": "rgba(120,120,120,0.10)",
    "drop": "rgba(44,160,44,0.14)",
    "plateau": "rgba(120,120,120,0.10)",
    "rise": "rgba(214,39,40,0.14)",
}
# One marker and colour per kind of event (analysis.findings.events.KINDS).
EVENT_STYLE = {
    "stage boundary": ("#444444", "line-ns-open"),
    "head type": ("#2ca02c", "star"),
    "rLLC rise": ("#e6550d", "triangle-up"),
    "MP departure": ("#9467bd", "diamond"),
    "level crossing": ("#1f77b4", "x"),
}
