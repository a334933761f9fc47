"""Animation: the layer x head heatmap of a statistic played through every checkpoint (`headwatch.dashboard.views.animation`)."""

from headwatch.dashboard.views.animation.page import main

main()
