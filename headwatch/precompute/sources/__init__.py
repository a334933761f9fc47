"""Where checkpoints come from: local folders, the Hugging Face Hub (its cache and byte-range reads),
revisions and weight files."""
