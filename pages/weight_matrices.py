"""Weight matrices: each block weight's spectrum, norm and tail exponent over training (`headwatch.dashboard.views.weights`)."""

from headwatch.dashboard.views.weights.page import main

main()
