"""Random-matrix lab (``/lab``): what W_QK = W_Q^T W_K looks like when W_Q and W_K are pure noise, the null hypothesis
the head statistics are compared against: one seeded draw at a chosen d_model, number of heads and entry widths (the
open run's by default), its statistics against the random-head reference, its entries, its singular values and its
spectrum against the free-product and plain Marchenko-Pastur laws."""
