"""Timeline: what happened in a run, on one time axis (`headwatch.dashboard.views.timeline`)."""

from headwatch.dashboard.views.timeline.page import main

main()
