"""Compare runs: two or more runs side by side, in relative depth and training time (`headwatch.dashboard.views.compare`)."""

from headwatch.dashboard.views.compare.page import main

main()
