"""The lenses that need more than a checkpoint's weights: forward passes on an evaluation set, the
refined LLC, overlaps between checkpoints, trajectory embeddings."""
