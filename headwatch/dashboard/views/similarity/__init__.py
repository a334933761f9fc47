"""Head similarity (``/similarity``): how alike the heads are over training, from the weights, whatever the basis of
the residual stream: every head against every head (or one layer's heads) ordered by a dendrogram of their distances,
and how hierarchical (ultrametric) each layer's heads are against random heads of the same shapes."""
