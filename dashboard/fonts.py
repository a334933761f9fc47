"""Code in the system's monospace font, so that no chart is drawn a third time when a web font arrives.

Pure helper, no streamlit: ``app.py`` puts `SYSTEM_CODE_FONT` (a ``<style>`` element) on the page with ``st.html``
as the sidebar's first element.

Why. Plotly.js (the copy Streamlit bundles) notes, when it starts drawing a chart, the page's font faces
that are not yet loaded; when the draw ends, it draws the chart once more after any of them has started
loading meanwhile (its text may have been measured in a fallback font). Streamlit's fonts are declared
with ``@font-face`` and a face is fetched only once some text on the page uses it. The app's one use of
Streamlit's code font (Source Code Pro) is the sidebar's "Link to this view", which appears when the view is
published at the end of the run (`dashboard.viewstate`): while a page's charts were still drawing then, every
chart in mid-draw was drawn a third time (on the head explorer with a core busy, 9 or 10 of its 13 charts in 2
of 5 loads; docs/dashboard.md). Fetching the font earlier (a hidden character in it at the top of the page) only
narrowed the race: in a warm load the run's elements reach the page in one render, and under load the first chart
could start drawing while the font was still loading. Code set in the system's monospace font needs no web font,
so no face starts loading while a chart draws.

The rule is the sidebar's first element: it reaches the page with the link or before it, so the code font is
never asked for. ``!important``: Streamlit's own rules for code name the font by class.
"""

from __future__ import annotations

CODE_FONT = "Source Code Pro"  # Streamlit's theme.codeFont, a web font fetched on first use
# The system's monospace fonts, in the order a browser would pick them (macOS, Linux, Windows), then the generic.
SYSTEM_MONOSPACE = "ui-monospace, Menlo, 'DejaVu Sans Mono', Consolas, monospace"

SYSTEM_CODE_FONT = "<style>code, pre, kbd, samp {font-family: " + SYSTEM_MONOSPACE + " !important}</style>"
