"""Refined LLC (``/llc``): every head's refined local learning coefficient over training, the whole model's beside
it with the loss, whether the chains behind each estimate can be trusted, and the heads clustered by the shape of
their curves."""
