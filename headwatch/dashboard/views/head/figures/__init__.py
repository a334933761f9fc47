"""The head explorer's figure builders (plotly, no streamlit): P(w) (`density`), the spectrum and the leading
eigenvalues (`spectrum`), one statistic against its layer and both matrices (`lines`), and what they share: the
over-training map and the slices' layout (`panels`)."""
