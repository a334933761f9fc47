"""The lenses: one module each, holding the computation of its tables and its computation class
(`precompute.job.context.Computation`) of a lens declared once in `analysis.store.lenses`; `computations` indexes them."""
