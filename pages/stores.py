"""Stores page: every statistics store the app can see, with its model and checkpoints."""

import streamlit as st

from analysis.errors import StoreError
from dashboard.loader import find_stores, try_load_store


def main() -> None:
    st.title("Statistics stores")
    stores = find_stores()
    # --- empty case ---
    if not stores:
        st.info("No stores found under data/. Make one with `python -m precompute --source DIR --out data/NAME`.")
        return
    # --- one card per store ---
    for path in stores:
        store = try_load_store(path)
        with st.container(border=True):
            st.subheader(path.name)
            if isinstance(store, StoreError):
                st.error(str(store))
                continue
            m = store.model
            st.write(
                f"**{m.get('id', '?')}** ({m['family']}): {m['n_layers']} layers x {m['n_heads']} heads, "
                f"d_model {m['d_model']}, d_head {m['d_head']}; {len(store.steps)} checkpoints with statistics"
            )
            dups = store.checkpoints[store.checkpoints["duplicate_of"].notna()] if len(store.checkpoints) else []
            if len(dups):
                st.warning(f"{len(dups)} checkpoints duplicate an earlier one's weights and are not plotted.")


main()
