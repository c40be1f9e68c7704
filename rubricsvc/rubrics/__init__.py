"""Rubrics: file schemas, loading, the repository and the versioning service."""
