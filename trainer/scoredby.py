"""Which judge config scored a batch of rewards: what every step's logged reward names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ScoredBy:
    """The judge config that scored a scorer's last batch: its name and config hash (the name
    a reward asks for may come to mean another config; the hash says which one judged)."""

    judge: str
    config_hash: str


def scored_by(scorer: Any) -> ScoredBy | None:
    """The judge config of ``scorer``'s last batch (None before its first, or for a scorer
    that does not say)."""
    found = getattr(scorer, "last_scored_by", None)
    return found if isinstance(found, ScoredBy) else None
