"""Forward lenses: what the heads do on text over training (`headwatch.dashboard.views.lenses`)."""

from headwatch.dashboard.views.lenses.page import main

main()
