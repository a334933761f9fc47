"""Layer view: every head of a layer over training, and a grid of all layers (`headwatch.dashboard.views.layers`)."""

from headwatch.dashboard.views.layers.page import main

main()
