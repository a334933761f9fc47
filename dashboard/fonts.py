"""The code font loaded at the top of every page, so that no chart is drawn a third time when it arrives.

Pure helper, no streamlit: ``app.py`` puts `PRELOAD` (a ``<style>`` element) on the page with ``st.html`` as the
sidebar's first element. (At the top of the main area it reached the page after the sidebar's link in 2 of 6 warm
loads with a core busy, up to 6 s later: Streamlit drew the main area's elements late.)

Why. Plotly.js (the copy Streamlit bundles) notes, when it starts drawing a chart, the page's font faces
that are not yet loaded; when the draw ends, it draws the chart once more after any of them has started
loading meanwhile (its text may have been measured in a fallback font). Streamlit's fonts are declared
with ``@font-face`` and a face is fetched only once some text on the page uses it. The app's one use of
the code font (Source Code Pro) is the sidebar's "Link to this view", which appears when the view is
published at the end of the run (`dashboard.viewstate`): while a page's charts were still drawing then, every
chart in mid-draw was drawn a third time (on the head explorer under load, 9 or 10 of its 13 charts; docs/dashboard.md).
A hidden character in that font, the sidebar's first element, starts the fetch when the browser first draws the
run's elements (with the link at the latest), seconds before the first chart draws: a chart waits for Plotly's
code, which is loaded once the first chart arrives.

The character is hidden (``visibility: hidden``, not ``display: none``: a face is fetched only for text that is
laid out) and taken out of the flow (absolutely placed, no size), so nothing on the page moves.
"""

from __future__ import annotations

CODE_FONT = "Source Code Pro"  # Streamlit's theme.codeFont: inline code in markdown, the sidebar's link

# the browser fetches the code font as soon as this reaches the page
PRELOAD = (
    "<style>body::after{content:'0';font-family:'" + CODE_FONT + "',monospace;position:absolute;left:0;top:0;"
    "width:0;height:0;overflow:hidden;visibility:hidden;pointer-events:none}</style>"
)
