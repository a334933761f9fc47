"""Pure computation, no streamlit, no network, one folder per subject of the docs (docs/layout.md):

- `weights`: what a checkpoint's weights alone say (head and layer statistics, composition, similarity), on
  `stats` (per-head statistics) and `rmt` (random-matrix references);
- `attention`: attention-pattern statistics and the head types decided from them;
- `llc`: the refined LLC's convergence diagnostics;
- `stages`: developmental stages of a curve and of a run, and essential dynamics;
- `trajectories`: one run's head trajectories, their clusters against the head types, and the p-values;
- `across_sizes`: several runs together, joint clusters and scaling;
- `findings`: what the pages and ``headwatch report`` both say, computed once below both;
- `store`: the store format and its reader.

At the top, what every subject shares: the extraction adapters (`extract`, `blocks`), `threads`, `errors`.
"""
