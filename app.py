"""Dashboard frame: navigation over the pages in ``pages/``; nothing else runs here."""

import streamlit as st

st.set_page_config(page_title="headwatch: attention heads over training", layout="wide")

pages = [st.Page("pages/stores.py", title="Stores", icon=":material/folder:", default=True)]
st.navigation(pages).run()
