"""Judging: backends, prompt templates, verdict parsing and aggregation."""
