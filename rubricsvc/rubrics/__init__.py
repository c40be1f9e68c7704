"""Rubrics: file schemas, loading, the repository, and ``versions`` (saving, versioning and
approving rubric versions)."""
