"""The lenses: one module each, holding the computation of its tables and its computation class
(`precompute.job.context.Computation`); each is declared once in `precompute.registry`."""
