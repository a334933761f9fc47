"""The refined LLC's estimates read (docs/views/llc.md): the convergence diagnostics of each estimate's chains and
the flag they give it (`diagnostics`)."""
