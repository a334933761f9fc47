"""Refined LLC: every head's local learning coefficient over training, the whole model's beside it with the loss, and
the heads clustered by the shape of their curves (`headwatch.dashboard.views.llc`)."""

from headwatch.dashboard.views.llc.page import main

main()
