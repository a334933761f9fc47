"""Animation (``/animation``): the layer × head heatmap of a statistic played through every checkpoint, with each
layer's and each head index's mean beside and below it, colours fixed over the run, and as a GIF."""
