"""Head explorer (``/head``): one head of one run over training, W_QK or W_OV or both side by side, with chosen steps
marked and other heads overlaid, one tab at a time: its weight distribution P(w) (over training and at the chosen
steps, with sigma and D_KL), its spectrum lambda_k (with stable rank, spectral entropy and the random-head null),
lambda_0 .. lambda_3 with their crossings and repulsions, and any statistic of it against the other heads of its
layer."""
