"""Trajectory map: every head placed by a UMAP embedding of its training trajectory of one statistic
(`headwatch.dashboard.views.trajectories`)."""

from headwatch.dashboard.views.trajectories.page import main

main()
