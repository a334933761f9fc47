"""Weight matrices (``/weights``): every whole-layer block weight (``layers.parquet``): one layer's singular values
against the Marchenko-Pastur law of a random matrix of its shape, animated over training, every layer's at one
step, and every layer's Frobenius norm and power-law tail exponent alpha over training."""
