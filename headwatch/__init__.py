"""headwatch: watch attention heads learn over training.

The ``headwatch`` command (`headwatch.cli`) serves the dashboard, runs the precompute
job, trains a reference run, publishes a store, and describes a store (``info``) or a
run before it starts (``plan``).
"""

__version__ = "0.1.0"
