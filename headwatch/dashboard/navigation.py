"""The dashboard's pages, listed once: app.py turns them into ``st.Page`` objects, the Overview links to them.

Pure, no streamlit. Adding a view is its folder in `dashboard.views` (named by its url_path), the two lines in
``pages/`` that call its ``main()``, and one `PageSpec` here: the sidebar's navigation and the Overview's list of
views both follow.

Each url_path differs from its file's name on purpose: under plain ``streamlit run app.py``
Streamlit also indexes files in ``pages/`` by name for the first run after a server start,
and a URL that equals a file name could run that file without app.py's frame (no sidebar).
``python -m headwatch.dashboard.serve`` turns that legacy mode off before the server starts (see
`dashboard.serve`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class PageSpec:
    """One page of the dashboard.

    Attributes:
        file: its script, relative to the repository root (``pages/head_explorer.py``).
        title: navigation label and link text.
        icon: Material icon (``:material/home:``).
        url_path: its URL (``/head``); the default page is served at ``/`` whatever this says.
        description: one line for the Overview: what the view shows.
        default: the page at ``/`` (the Overview).
        time_scale: the time axis it opens on (the sidebar's ``xscale`` until the page's own is chosen):
            ``log`` where a linear axis squeezes early training (steps 0 to 128 of a run of 1,536 into a
            sliver of a heatmap, the first checkpoints of runs aligned by fraction on top of each other);
            ``index`` (one unit per checkpoint) where lines and cells of every checkpoint should read alike.
    """

    file: str
    title: str
    icon: str
    url_path: str
    description: str
    default: bool = False
    time_scale: Literal["linear", "log", "index"] = "linear"


PAGES: tuple[PageSpec, ...] = (
    PageSpec(
        "pages/index.py",
        "Overview",
        ":material/home:",
        "overview",
        "what headwatch measures, a link to every view, a card per run",
        default=True,
    ),
    PageSpec(
        "pages/run_timeline.py",
        "Timeline",
        ":material/timeline:",
        "timeline",
        "what happened in the run: the loss with its developmental stages shaded, and every event (head types "
        "emerging, the largest rLLC rises, weights leaving their Marchenko-Pastur law, level crossings) on one "
        "time axis, each a link to its evidence; below, the essential dynamics: the path of the model's outputs "
        "in their first two principal components, whose turns tend to mark stage boundaries",
        time_scale="log",
    ),
    PageSpec(
        "pages/heads_table.py",
        "Heads",
        ":material/table_rows:",
        "heads",
        "every head in one sortable table: a statistic at a step, its change, rank, against random heads, "
        "its level crossings; the model's close approaches",
    ),
    PageSpec(
        "pages/head_explorer.py",
        "Head explorer",
        ":material/center_focus_strong:",
        "head",
        "one head: its weight distribution P(w) and its spectrum λ_k over training, at chosen steps, against its layer",
        time_scale="index",
    ),
    PageSpec(
        "pages/layer_view.py",
        "Layer view",
        ":material/stacked_line_chart:",
        "layers",
        "every head of a layer over training for any statistic, the layer mean red dashed; all layers in a grid",
        time_scale="index",
    ),
    PageSpec(
        "pages/architecture_heatmaps.py",
        "Architecture heatmaps",
        ":material/grid_on:",
        "architecture",
        "any statistic (λ_k with a k slider too) for every head at every checkpoint, layer boundaries drawn",
        time_scale="log",
    ),
    PageSpec(
        "pages/animated_heatmap.py",
        "Animation",
        ":material/play_circle:",
        "animation",
        "the layer × head heatmap played through every checkpoint, with layer and head marginals",
    ),
    PageSpec(
        "pages/trajectory_map.py",
        "Trajectory map",
        ":material/scatter_plot:",
        "trajectories",
        "UMAP of each head's training trajectory: heads that change alike sit together",
    ),
    PageSpec(
        "pages/composition_circuits.py",
        "Circuits",
        ":material/hub:",
        "circuits",
        "how heads wire together over training, from the weights: Q-, K- and V-composition between every pair of "
        "heads, animated, and one head's strongest sources and targets, each induction head's strongest previous-token "
        "source ringed",
        time_scale="log",
    ),
    PageSpec(
        "pages/head_similarity.py",
        "Head similarity",
        ":material/join_inner:",
        "similarity",
        "how alike heads are from the weights, whatever the residual basis: W_QK and W_OV inner products and principal "
        "angles for every pair of heads, each layer ordered by a dendrogram, and how hierarchical each layer is",
        time_scale="log",
    ),
    PageSpec(
        "pages/weight_matrices.py",
        "Weight matrices",
        ":material/bar_chart:",
        "weights",
        "every block weight (QKV, attention out, MLP in/out): its singular values against Marchenko-Pastur over "
        "training and depth, and the Frobenius norm of every layer's",
        time_scale="index",
    ),
    PageSpec(
        "pages/forward_lenses.py",
        "Forward lenses",
        ":material/visibility:",
        "lenses",
        "what the heads do on text: attention entropy and span per layer, layer-pair divergence, "
        "previous-token / induction / sink heads over training, with the loss",
        time_scale="log",
    ),
    PageSpec(
        "pages/compare_runs.py",
        "Compare runs",
        ":material/compare:",
        "compare",
        "two or more runs side by side: a statistic per relative-depth bin over training (aligned by step, tokens "
        "or fraction of the run), one bin's heads run by run, the distribution over heads at a point of training",
        time_scale="log",
    ),
    PageSpec(
        "pages/refined_llc.py",
        "Refined LLC",
        ":material/landscape:",
        "llc",
        "the loss landscape around each head: every head's refined local learning coefficient over training, "
        "the whole model's with the loss, and the heads clustered by the shape of their curves",
        time_scale="index",
    ),
    PageSpec(
        "pages/rmt_lab.py",
        "Random-matrix lab",
        ":material/casino:",
        "lab",
        "no store needed: W_QK of random W_Q and W_K, its entries and spectrum against the null laws",
    ),
)
VIEWS: tuple[PageSpec, ...] = tuple(p for p in PAGES if not p.default)  # what the Overview links to


def time_scale_of(url_path: str) -> Literal["linear", "log", "index"]:
    """The time axis the page at ``url_path`` opens on (``linear`` for an unknown path)."""
    return next((p.time_scale for p in PAGES if p.url_path == url_path), "linear")
