"""Overview (``/overview``, the app's front page): what headwatch shows, the chosen run's headline, a link to every
view, and a card per run with its compact timeline."""
