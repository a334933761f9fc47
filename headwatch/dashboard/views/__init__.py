"""The dashboard's views, one folder each, named by the view's URL path (``/timeline`` is `views.timeline`).

A view's folder holds everything that view draws and computes:

- ``page.py``: its ``main()``, which reads as the page's layout (the empty case, the widgets as one frozen record,
  one call per panel), the panels themselves, and the caches of what it alone derives from a store
  (`dashboard.cache.store_cached`, at the edge); a page that outgrows ~300 lines splits its panels into more
  modules of the folder, each named for what it draws;
- ``data.py``: what the view computes before it draws, pure (no streamlit), tested on its own;
- ``figures.py`` (or modules named for their charts): its figure builders, pure (plotly, no streamlit).

``pages/<file>.py`` is only what Streamlit's navigation runs (``app.py`` lists them in `dashboard.navigation`):
two lines that call the view's ``main()``. No view imports another; what several views share lives beside this
package (`dashboard.derived`, the caches several views read; `dashboard.data`, `dashboard.tables`,
`dashboard.labels`; the figures several views draw, `dashboard.figures`), and what a page and ``headwatch report``
both say in `analysis.findings`.
"""
