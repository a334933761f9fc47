"""Figure builders: tidy arrays plus keyword options in, a `plotly.graph_objects.Figure` out.

One module per view family; `common` holds the shared axis, colour and marking helpers.
No streamlit here: pages pass the figures to ``st.plotly_chart``.
"""
