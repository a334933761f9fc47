"""What a head's statistics are called and binned on: the scalar statistics' names and the standardized
histogram's fixed edges, shared by the maths that computes them (`analysis.stats`, `analysis.rmt.references`)
and the store that records them (`analysis.store.format`: columns, meta.json ``hist_edges``), so that the
maths does not import the store. Numpy only: the dashboard reads it through the store format.

Definitions: docs/design-notes.md section 3. The names are in the order the store writes its columns. The
histogram is part of the element-wise statistics' definition: z = (w - mu) / sigma in [-10, 10] with bin
width 0.1 (200 bins); two more bins catch z < -10 (underflow, first) and z >= 10 (overflow, last), so
``hist_z`` has 202 probabilities that sum to 1 and nothing is dropped.
"""

from __future__ import annotations

import numpy as np

HIST_Z_LO = -10.0
HIST_Z_HI = 10.0
HIST_Z_BINS = 200
HIST_Z_EDGES = np.linspace(HIST_Z_LO, HIST_Z_HI, HIST_Z_BINS + 1)

# Element-wise statistics of a head's dense matrix (`analysis.stats.elementwise`), then its exact spectrum's
# (`analysis.stats.spectrum`).
ELEMENTWISE_STATS = ("mean", "std", "skew", "kurtosis", "min", "max", "kl_gauss")
SPECTRAL_STATS = (
    "stable_rank",
    "spectral_entropy",
    "participation_ratio",
    "condition_number",
    "frob_norm",
    "spectral_norm",
)
