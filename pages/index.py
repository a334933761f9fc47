"""Overview, the app's front page: what headwatch shows, a link to every view, a card per run
(`headwatch.dashboard.views.overview`)."""

from headwatch.dashboard.views.overview.page import main

main()
