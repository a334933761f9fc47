"""Forward lenses (``/lenses``): what the heads do on text over training: attention entropy and span per layer, how
differently the layers attend (layer-pair divergence, animated), previous-token, induction, sink and current-token
scores of every head with the heads' types marked, and the loss on the induction probe's second copy, with the run's loss."""
