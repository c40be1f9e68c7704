"""Which evolved criteria stay active after a step: pruning by spread, then ``max_active``.

Pure arithmetic on the verdicts over one group, so a reader can check it by hand. A
criterion's spread is the population standard deviation of its values over the group's
rollouts (failed verdicts left out): 0 when every rollout got the same verdict, 0.5 when half
met it and half did not, sqrt(p(1-p)) for a yes/no criterion met by a share p. A criterion
with fewer than two values has no spread (None) and counts as one that does not vary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import pstdev

from rubricsvc.evolution.settings import MAX_SPREAD, EvolutionSettings, Weighting

WEIGHT_DIGITS = 4  # weights are rounded so a version's content hash does not hang on noise


def spread(values: Sequence[float | None]) -> float | None:
    """The population standard deviation of the values present (None: fewer than two)."""
    present = [v for v in values if v is not None]
    return pstdev(present) if len(present) >= 2 else None


@dataclass(frozen=True)
class Candidate:
    """An evolved criterion up for this step: active before it, or just proposed."""

    key: str  # its content hash
    base_weight: float  # the weight its category gives it (negative: a pitfall)
    age: int  # smaller is older: older criteria win ties
    values: tuple[float | None, ...]

    @property
    def spread(self) -> float | None:
        return spread(self.values)


@dataclass(frozen=True)
class Decision:
    key: str
    spread: float | None
    active: bool
    weight: float  # the weight it carries while active (its base weight under ``fixed``)
    reason: str | None  # why it went inactive: "no spread" or "past max_active"


def decide(candidates: Sequence[Candidate], settings: EvolutionSettings) -> list[Decision]:
    """Each candidate's fate, in the order given: inactive when its spread is at most
    ``prune_tolerance`` (or unknown); of the rest, the ``max_active`` with the highest spread
    stay active (ties: the older first), the others go inactive."""
    varying = [
        c for c in candidates if c.spread is not None and c.spread > settings.prune_tolerance
    ]
    ranked = sorted(varying, key=lambda c: (-(c.spread or 0.0), c.age))
    kept = {c.key for c in ranked[: settings.max_active]}
    decisions = []
    for candidate in candidates:
        value = candidate.spread
        if candidate.key in kept:
            reason = None
        elif candidate in varying:
            reason = "past max_active"
        else:
            reason = "no spread"
        decisions.append(
            Decision(
                candidate.key,
                value,
                reason is None,
                weight_of(candidate.base_weight, value, settings.weighting),
                reason,
            )
        )
    return decisions


def weight_of(base: float, value: float | None, weighting: Weighting) -> float:
    """``fixed``: the base weight. ``separation``: base x spread / 0.5, so a criterion that
    splits the group in half keeps its full weight and one that barely separates it weighs
    little (never 0: an active criterion's spread is above the tolerance)."""
    if weighting == Weighting.FIXED or value is None or value == 0:
        return base
    scaled = round(base * min(value, MAX_SPREAD) / MAX_SPREAD, WEIGHT_DIGITS)
    return scaled if scaled != 0 else math.copysign(10**-WEIGHT_DIGITS, base)
