"""Batches of ids and rows small enough for one SQL statement."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

# Keeps IN (...) lists and multi-row inserts well under every driver's parameter limit
# (SQLite's default is 32,766 parameters; a multi-row insert binds one per column).
BATCH_SIZE = 500


def batches(items: Sequence[T], size: int = BATCH_SIZE) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``items``, each at most ``size`` long."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
