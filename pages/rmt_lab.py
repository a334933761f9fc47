"""Random-matrix lab: what W_QK = W_Q^T W_K looks like when W_Q and W_K are pure noise (`headwatch.dashboard.views.lab`)."""

from headwatch.dashboard.views.lab.page import main

main()
