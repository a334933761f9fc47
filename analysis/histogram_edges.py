"""The standardized histogram's fixed edges, shared by every head, step and model.

Part of the element-wise statistics' definition (docs/design-notes.md section 3): z = (w - mu) / sigma
in [-10, 10] with bin width 0.1 (200 bins); two more bins catch z < -10 (underflow, first) and
z >= 10 (overflow, last), so ``hist_z`` has 202 probabilities that sum to 1 and nothing is dropped.
The store format records them (`analysis.store.format`, meta.json ``hist_edges``); the statistics
(`analysis.stats`) and the random-matrix references (`analysis.rmt.references`) read them from here,
so that the maths does not import the store.
"""

from __future__ import annotations

import numpy as np

HIST_Z_LO = -10.0
HIST_Z_HI = 10.0
HIST_Z_BINS = 200
HIST_Z_EDGES = np.linspace(HIST_Z_LO, HIST_Z_HI, HIST_Z_BINS + 1)
