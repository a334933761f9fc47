"""Head explorer: one head's weight distribution and spectrum over training (`headwatch.dashboard.views.head`)."""

from headwatch.dashboard.views.head.page import main

main()
