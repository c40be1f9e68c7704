"""Evolving rubrics: criteria a generator adds per prompt during training, pruned by spread."""
