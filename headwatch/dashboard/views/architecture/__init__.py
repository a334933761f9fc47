"""Architecture heatmaps (``/architecture``): one statistic (λ_k with its k too) for every head at every checkpoint,
the layer boundaries drawn, a click on a cell opening its head; below, each layer's mean over its heads over training,
with the loss."""
