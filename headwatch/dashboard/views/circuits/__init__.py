"""Circuits (``/circuits``): how heads wire together over training, from the weights: the Q-, K- or V-composition
between every pair of heads, animated over training with each induction head's strongest previous-token source
ringed, and one head's strongest sources and targets over training."""
