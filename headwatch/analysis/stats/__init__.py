"""Statistics of per-head circuits: exact spectra, element-wise moments and histograms, symmetry and
change, level crossings, densities."""
