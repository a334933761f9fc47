"""Taking the numbers and pictures out of the dashboard: tidy CSV, figure-export settings, the animation as a GIF.

Pure (no streamlit). Every chart's data leaves as a *tidy* table, one row per plotted point,
with the columns ``run, layer, head, matrix, statistic, k, step, value`` (plus what a chart
adds, e.g. ``w`` and ``density`` for P(w)); ``k`` is the singular-value index of lambda_k
and empty otherwise. Figures are exported in the user's browser by Plotly's camera button,
set here to paper size (`chart_config`) with a file name naming run, layer, head
and statistic; `titled` writes the same names into the figure's title. The animation is
exported as a GIF drawn with Pillow (a dependency of Streamlit itself: no kaleido, no
headless browser, no extra requirement).
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from headwatch.dashboard import style

# The camera button's figure: 720 CSS px wide at the chart's own height, so its 12-13 px ticks and 15 px title
# are 1/60 to 1/48 of the width (at 6.5 in across a page, 8 to 10 pt);
# a PNG is drawn at 4x (2,880 px wide), an SVG is vector and needs no scale.
EXPORT_WIDTH, EXPORT_SCALE = 720, 4
EXPORT_HEIGHT = 440  # a figure without a height of its own (`dashboard.style.HEIGHT`)
TITLE_SIZE = 15  # px: the exported figure's title (`titled`)
# Plotly anchors a title's "top" at its first line's text, so the box rises above the anchor by about 5 px and 10 px
# more per extra line: a two-line title (W_QK and W_OV side by side) would lose the top of its first line. `titled`
# places the anchor this far below the figure's top edge, plus `TITLE_LINE_SHIFT` per line break.
TITLE_TOP, TITLE_LINE_SHIFT = 8, 10  # px
# A title's box ends about TITLE_TOP + 16 px below the figure's top, and 19 px lower per line more; a legend under the
# title (`style.LEGEND_TOP`) starts `LEGEND_GAP` below its first line and `TITLE_LINE_PX` lower per line more, as
# `titled` deepens the top margin per line.
TITLE_LINE_PX, LEGEND_GAP = 18, 22  # px
# A title line's most characters: 15 px text is about 7 px a character, so 80 fit the 720 px export and a chart
# beside the sidebar at 1,024 px; a longer line would run past the chart's right edge and be cut (`titled` breaks it).
TITLE_CHARS = 80
IMAGE_FORMATS = ("png", "svg")  # the camera button's formats (URL ``img``, `dashboard.widgets.image_format`)
TIDY_COLUMNS = ["run", "layer", "head", "matrix", "statistic", "k", "step", "value"]


def safe_name(*parts: Any) -> str:
    """A file name from its parts: ``shakespeare-pythia-6x8_L4H5_stable_rank`` (no spaces or odd characters)."""
    text = "_".join(str(p) for p in parts if p not in (None, ""))
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-_") or "headwatch"


def chart_config(filename: str, image_format: str = "png", *, height: float | None = None) -> dict[str, Any]:
    """Plotly config: the camera button downloads ``filename``.{png,svg} at paper size (`EXPORT_WIDTH` wide,
    ``height`` high: the chart's own, so its panels keep their proportions); no Plotly logo.

    An unknown ``image_format`` saves PNG (the URL's value is checked where it is read, `dashboard.widgets`).
    """
    fmt = image_format if image_format in IMAGE_FORMATS else "png"
    return {
        "displaylogo": False,
        "toImageButtonOptions": {
            "format": fmt,
            "filename": filename,
            "width": EXPORT_WIDTH,
            "height": int(height or EXPORT_HEIGHT),
            "scale": EXPORT_SCALE if fmt == "png" else 1,
        },
    }


def titled(fig: go.Figure, title: str) -> go.Figure:
    """Write ``title`` (run, head, statistic) at the top of the figure, above its legend, so an export names it.

    A figure that already has a title (the animation's current step) gets ``title`` in front of it. A legend under
    the title (`style.LEGEND_TOP`: the container's frame, anchored at its top) is placed below the title's last line,
    so that Plotly deepens the top margin to the rows it wraps to rather than writing them over the title.
    """
    own = fig.layout.title.text if fig.layout.title and fig.layout.title.text else ""
    if own.startswith(title):  # the builder wrote it already (the animation's frames carry it)
        own, title = "", own
    text = f"{title} · {own}" if own else title
    if not fig.frames:  # an animation's frames set its title at every step: broken here, it would jump while playing
        text = wrapped_title(text)
    top = fig.layout.margin.t if fig.layout.margin and fig.layout.margin.t is not None else style.MARGIN["t"]
    breaks = text.count("<br>")
    height = fig.layout.height or EXPORT_HEIGHT
    fig.update_layout(
        title=dict(
            text=text,
            x=0.01,
            xanchor="left",
            y=1 - (TITLE_TOP + TITLE_LINE_SHIFT * breaks) / height,  # the whole first line inside (`TITLE_TOP`)
            yanchor="top",
            yref="container",
            font=dict(size=TITLE_SIZE),
        ),
        margin=dict(t=top + 30 + 18 * breaks),  # a line more for each break
    )
    legend = fig.layout.legend
    if legend.yref == "container" and legend.yanchor == "top":  # under the title (`style.LEGEND_TOP`), clear of it
        fig.update_layout(legend_y=1 - (TITLE_TOP + LEGEND_GAP + TITLE_LINE_PX * breaks) / height)
    return fig


def wrapped_title(text: str) -> str:
    """``text`` with each line (lines end at ``<br>``) broken at spaces into lines of at most `TITLE_CHARS`
    characters; "step 1,400", "layer 1", "head 5" and HTML tags are never split."""
    lines = []
    for line in text.split("<br>"):
        if len(line) <= TITLE_CHARS:
            lines.append(line)
            continue
        glued = re.sub(r"<[^>]*>", lambda m: m.group(0).replace(" ", "\0"), line)
        glued = re.sub(r"\b(step|steps|layer|head) (?=\S)", lambda m: m.group(1) + "\0", glued)
        parts = textwrap.wrap(glued, TITLE_CHARS, break_long_words=False, break_on_hyphens=False)
        lines += [part.replace("\0", " ") for part in parts]
    return "<br>".join(lines)


def tidy(
    values: np.ndarray,
    steps: np.ndarray,
    *,
    run: str,
    statistic: str,
    k: int | None = None,
    matrix: str = "qk",
    layers: list[int] | None = None,
    heads: list[int] | None = None,
) -> pd.DataFrame:
    """``values[step, layer, head]`` as tidy rows (only the given layers and heads, all by default)."""
    values = np.asarray(values)
    s, n_layers, n_heads = values.shape
    layers = list(range(n_layers)) if layers is None else list(layers)
    heads = list(range(n_heads)) if heads is None else list(heads)
    sub = values[:, layers][:, :, heads]  # (S, len(layers), len(heads))
    li, hi = np.meshgrid(layers, heads, indexing="ij")
    return pd.DataFrame(
        {
            "run": run,
            "layer": np.tile(li.ravel(), s).astype(np.int64),
            "head": np.tile(hi.ravel(), s).astype(np.int64),
            "matrix": matrix,
            "statistic": statistic,
            "k": pd.array([k] * (s * len(layers) * len(heads)), dtype="Int64"),
            "step": np.repeat(np.asarray(steps, dtype=np.int64), len(layers) * len(heads)),
            "value": sub.reshape(s, -1).ravel().astype(np.float64),
        }
    )


def loss_csv(run: str | None, steps: np.ndarray, train: np.ndarray, val: np.ndarray) -> bytes:
    """The sidebar's loss curve as tidy CSV: run, split, step, value (validation only where recorded)."""
    rows = [
        pd.DataFrame({"run": run, "split": split, "step": np.asarray(steps, dtype=np.int64), "value": v})
        for split, v in (("train", train), ("validation", val))
    ]
    frame = pd.concat(rows, ignore_index=True)
    return to_csv(frame[np.isfinite(frame["value"])])


def to_csv(frame: pd.DataFrame) -> bytes:
    """CSV bytes (float64 written with full precision, so it reads back equal)."""
    return frame.to_csv(index=False, float_format="%.17g").encode()


# --------------------------------------------------------------------------- the animation as a GIF


def _lut(scale: list) -> np.ndarray:
    """(256, 3) uint8 colours along a Plotly colour scale."""
    out = []
    for c in sample_colorscale(scale, list(np.linspace(0, 1, 256))):
        out.append([int(float(x)) for x in c[c.index("(") + 1 : c.index(")")].split(",")[:3]])
    return np.array(out, dtype=np.uint8)


def animation_gif(
    values: np.ndarray,
    steps: list[int],
    *,
    title: str,
    zmin: float,
    zmax: float,
    log: bool = False,
    signed: bool = False,
    frame_ms: int = 180,
    cell: int | None = None,
) -> bytes:
    """The layer x head heatmap at every checkpoint as an animated GIF (Pillow), colours fixed over the run.

    Layers are rows (layer 0 on top), heads columns; a colour bar with its two ends labelled stands to the right.

    Args:
        values: ``(S, n_layers, n_heads)``; colour by log10 when ``log`` (non-positive cells grey).
        steps: frame labels.
        title: drawn above every frame (run and statistic); each frame adds its step.
        zmin, zmax: the colour range (log10 units when ``log``), the same as the page's heatmap.
        signed: the diverging scale of signed statistics.
        cell: pixels per cell (default: the heatmap about 640 px wide).
    """
    from PIL import Image, ImageDraw

    s, _n_layers, n_heads = values.shape
    cell = cell or max(4, min(48, 640 // max(n_heads, 1)))
    lut = _lut(style.SIGNED_SCALE if signed else style.HEATMAP_SCALE)
    v = np.asarray(values, dtype=np.float64)
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(v > 0, np.log10(np.where(v > 0, v, 1)), np.nan)
    span = zmax - zmin if zmax > zmin else 1.0
    idx = np.clip(np.round((v - zmin) / span * 255), 0, 255)
    band = 28
    frames = []
    for i in range(s):
        rgb = np.where(np.isfinite(idx[i])[..., None], lut[np.nan_to_num(idx[i]).astype(np.int64)], 200).astype(np.uint8)
        big = np.kron(rgb, np.ones((cell, cell, 1), dtype=np.uint8))
        # at least 420 px wide, so the title and the step always show (and no two frames are identical:
        # Pillow would merge them, and the GIF would lose a checkpoint)
        width = big.shape[1]
        canvas = np.full((big.shape[0] + band, max(width + 90, 420), 3), 255, dtype=np.uint8)
        canvas[band:, :width] = big
        # the colour bar: the scale from zmax (top) to zmin (bottom) beside the heatmap, its ends labelled
        rows = np.linspace(255, 0, big.shape[0]).round().astype(np.int64)
        canvas[band:, width + 8 : width + 20] = lut[rows][:, None, :]
        img = Image.fromarray(canvas)
        draw = ImageDraw.Draw(img)
        draw.text((4, 8), f"{title} · step {steps[i]:,}", fill=(0, 0, 0))
        hi_text, lo_text = (f"1e{zmax:.2f}", f"1e{zmin:.2f}") if log else (f"{zmax:.3g}", f"{zmin:.3g}")
        draw.text((width + 24, band), hi_text, fill=(0, 0, 0))
        draw.text((width + 24, band + big.shape[0] - 12), lo_text, fill=(0, 0, 0))
        frames.append(img.convert("P", palette=Image.Palette.ADAPTIVE, colors=255))
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=frame_ms, loop=0)
    return buf.getvalue()
