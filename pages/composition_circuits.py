"""Circuits: how heads wire together over training, from the weights (`headwatch.dashboard.views.circuits`)."""

from headwatch.dashboard.views.circuits.page import main

main()
