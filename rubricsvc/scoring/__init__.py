"""Scoring: expand (completion x criterion) into judgments, reuse cached ones, aggregate."""
