"""Trajectory map (``/trajectories``): every head placed by a UMAP embedding of its training trajectory of one
statistic, joined to its nearest trajectories and coloured by layer, head type or cluster; several runs' heads on one
map; and whether the trajectory clusters correspond to head types, in this run and across the runs."""
