"""Dashboard frame: navigation over the pages, the shared sidebar (run picker, model card, time axis), the URL.

Run with ``python -m headwatch.dashboard.serve`` (``streamlit run app.py`` plus one setting, see
`dashboard.serve`). The environment is read once per run (`dashboard.settings`). The
whole run happens inside one view (`dashboard.viewstate.view_state`): each page reads
the run chosen here through ``viewstate.frame()`` and makes its widgets there; leaving
the block publishes the view, so its state is written to the query string and the
address bar (and the sidebar's link) reproduces it. With $STORE_REPO set, the run
picker also offers the stores of that Hugging Face dataset repo; on a Space
($SPACE_ID), links name the Space page (`dashboard.sharing`).
"""

import functools

import streamlit as st

from headwatch.analysis.errors import StoreError
from headwatch.dashboard import charts, live, loader, viewstate, widgets
from headwatch.dashboard.data import SCALES, Scale, Unit
from headwatch.dashboard.export import loss_csv
from headwatch.dashboard.figures.loss import loss_curve
from headwatch.dashboard.frame import Frame
from headwatch.dashboard.model_card import loss_series, model_card_lines
from headwatch.dashboard.navigation import PAGES as PAGE_SPECS
from headwatch.dashboard.navigation import time_scale_of
from headwatch.dashboard.settings import read_settings

# An emoji favicon: Streamlit draws it as an inline SVG. A ":material/...:" page_icon would be fetched from a
# font CDN (fonts.gstatic.com) and be missing offline; the sidebar's Material icons use the font Streamlit ships.
st.set_page_config(page_title="headwatch: attention heads over training", page_icon="🔭", layout="wide")

# The one page list (dashboard.navigation, which says why each url_path differs from its file's name).
PAGES = [st.Page(p.file, title=p.title, icon=p.icon, url_path=p.url_path, default=p.default) for p in PAGE_SPECS]

settings = read_settings()  # the environment, read once per run
with viewstate.view_state(settings) as view:
    page = st.navigation(PAGES, expanded=True)  # every view listed (past 10, Streamlit would hide some behind 'View more')
    view.open(page, PAGES)  # a Space link names its page as ?page=... on the root URL
    notice_slot = view.notices_in(st.container())

    # --- store repo on the Hub ($STORE_REPO): a failed download is explained, the data/ stores still offered ---
    offered = loader.runs(settings)
    if offered.hub_error:
        with notice_slot:
            st.error(f"**Statistics store from the Hub unavailable.** {offered.hub_error}", icon=":material/cloud_off:")

    # --- sidebar: run picker ---
    runs = offered.paths
    store = None
    run = None
    with st.sidebar:
        if runs:
            run = widgets.select(
                "run",
                "Run",
                list(runs),
                next(iter(runs)),
                where=st.sidebar,
                help="Statistics stores from $STORE_REPO on the Hub, under data/ and $HEADWATCH_STORE",
            )
            opened = loader.try_load_store(runs[run])
            if isinstance(opened, StoreError):
                st.error(str(opened))
            else:
                store = opened
        else:
            st.info(
                "No statistics stores found under data/. Make one with `headwatch precompute`, or point HEADWATCH_STORE at one."
            )

        # --- sidebar: a run still training (its follower's status; new checkpoints redraw the page) ---
        if store is not None:
            live.watch(store)

        # --- sidebar: model card ---
        loss = None
        if store is not None:
            with st.container(border=True):
                for line in model_card_lines(store.meta):
                    st.markdown(line)
                if store.meta.mixed:  # partial duplicates: shown as training states only when asked
                    mixed = widgets.toggle(
                        "mixed",
                        "Show checkpoints with mixed weights",
                        False,
                        where=st.sidebar,
                        help="Checkpoints with a weight file identical to a later checkpoint's (two revisions' "
                        "weights mixed) are left out of every plot; this plots them as training states.",
                    )
                    store = store.view(include_mixed=mixed)
                loss = loss_series(store)
                loss_slot = st.container()  # drawn once the time axis below is known (its log scale applies)

        # --- sidebar: training-time axis ---
        unit: Unit = "step"
        scale: Scale = "linear"
        if store is not None:
            has_tokens = store.meta.tokens_at(store.steps) is not None
            unit = widgets.select(
                "xunit",
                "Time axis",
                ["step", "tokens"] if has_tokens else ["step"],
                "step",
                kind="radio",
                fmt={"step": "steps", "tokens": "tokens seen"}.__getitem__,
                where=st.sidebar,
            )
            scale = widgets.select(
                "xscale",
                "Time scale",
                list(SCALES),
                time_scale_of(page.url_path),
                kind="radio",
                fmt=SCALES.__getitem__,
                where=st.sidebar,
                help="Early checkpoints are log-spaced. A log axis plots step + 1, so step 0 sits at 1; a checkpoint "
                "index axis puts every checkpoint one unit apart (0, 1, 2, ...), its ticks labelled with their steps. "
                "Each page keeps its own and opens on the one that reads its early training: log for the heatmaps, "
                "the timeline and Compare runs, checkpoint index for the head explorer, the layer view, the weight "
                "matrices and the refined LLC.",
            )

            if loss is not None:
                with loss_slot:
                    st.plotly_chart(loss_curve(*loss, log_x=scale == "log"), key="loss_curve", config={"displayModeBar": False})
                    st.caption("Loss over training as recorded by the run (nats per token).")
                    charts.download(
                        "Loss (CSV)",
                        functools.partial(loss_csv, run, *loss),
                        file_name=f"{run}_loss.csv",
                        mime="text/csv",
                        key="loss_csv",
                    )

        # --- sidebar: link to this view (drawn when the view is published) ---
        view.link_in(st.container())
        st.caption(
            "W_QK = W_Qᵀ W_K per head, from the raw checkpoint weights: no 1/√d_head factor, "
            "rotary position encoding ignored, no biases."
        )
        view.history_in(st.empty())  # the browser-history guard: one history entry per view (dashboard.history)

    view.set_frame(Frame(store=store, run=run, unit=unit, scale=scale, runs=runs))
    page.run()
