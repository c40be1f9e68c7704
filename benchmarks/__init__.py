"""Reproducible performance measurements: each prints a ratio against a baseline of the same run."""
