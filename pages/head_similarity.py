"""Head similarity: how alike heads are over training, from the weights (`headwatch.dashboard.views.similarity`)."""

from headwatch.dashboard.views.similarity.page import main

main()
