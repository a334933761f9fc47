"""What the dashboard's pages and ``headwatch report`` both say about a run, computed once, below both.

Pure functions over an opened `analysis.store.Store` and pandas frames: no streamlit, no dashboard, no
network (``.importlinter``'s findings contract). One module each:

- `values`: a statistic's values per (step, layer, head), by the name the views and the report use;
- `approaches`: every head's close approaches and level crossings of lambda_0..lambda_3;
- `held_types`: the head types as the views and the report read them (who holds which type when);
- `events`: what happened in a run, as events on one time axis, and the stages read for display;
- `comparison`: comparing runs: relative-depth bins, time alignment, the numbers per run at a point of training;
- `paths`: composition's paths (previous-token -> induction pairs) and a head's strongest partners;
- `llc_flags`: how many refined-LLC estimates hold each diagnostic flag, and what the negative ones mean;
- `headline`: which heads formed when, the run's headline;
- `association`: whether the trajectory clusters correspond to the head types, in this run and its replicates;
- `replicates`: which runs are replicates of a run (the same recipe, another seed);
- `sizes`: across sizes: each run's size, emergence and consolidation, the joint clusters, the scaling fits;
- `names`: how a head is named (``L1 H0``).
"""
