"""Architecture heatmaps: every head at every checkpoint, layer boundaries drawn (`headwatch.dashboard.views.architecture`)."""

from headwatch.dashboard.views.architecture.page import main

main()
