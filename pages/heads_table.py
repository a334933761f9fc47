"""Heads: every head as one row of a sortable, filterable table of a statistic (`headwatch.dashboard.views.heads`)."""

from headwatch.dashboard.views.heads.page import main

main()
