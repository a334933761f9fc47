"""Layer view (``/layers``): any statistic of every head of one layer over training, one colour per head with the
layer mean dashed, and below it a grid of all layers on shared axes; a click on a head's line opens it in the head
explorer."""
