"""Random-matrix references: Marchenko-Pastur, the free-product null model of W_QK, Gaussian reference
values, the random-matrix lab."""
