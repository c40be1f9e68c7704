"""Turning per-criterion values into one score per completion.

Every aggregation sees only the criteria that were judged: a failed judgment is masked
(left out and the rest renormalized), the score carries its coverage (the share of the
rubric's absolute weight that was judged), and below ``min_coverage`` there is no score
at all. A failure never counts as 0.
"""

from __future__ import annotations

import enum
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import AfterValidator

from rubricsvc.errors import ValidationFailed

DEFAULT_MIN_COVERAGE = 0.8
GATE_THRESHOLD = 0.5  # a required criterion judged below this has failed its gate


@dataclass(frozen=True)
class Outcome:
    """One criterion of a rubric version and its judged value (None: the judgment failed)."""

    criterion_id: int
    weight: float
    value: float | None
    theme: str | None = None
    required: bool = False
    # Reference-relative judging: the reference report's value on the same criterion.
    reference: float | None = None


class Status(enum.StrEnum):
    OK = "ok"
    PARTIAL = "partial"
    MASKED = "masked"


@dataclass(frozen=True)
class Aggregate:
    value: float | None
    coverage: float
    status: Status
    reasons: list[str] = field(default_factory=list)


AggregationFn = Callable[[Sequence[Outcome], Mapping[str, float] | None], float | None]


def healthbench(outcomes: Sequence[Outcome], _dims: Mapping[str, float] | None) -> float | None:
    """Points met over the positive points available; pitfalls subtract; not clipped."""
    positive = math.fsum(o.weight for o in outcomes if o.weight > 0)
    if positive == 0:
        return None
    return math.fsum(o.weight * (o.value or 0.0) for o in outcomes) / positive


def rar(outcomes: Sequence[Outcome], _dims: Mapping[str, float] | None) -> float | None:
    """RaR explicit aggregation: sum of weight x value over the sum of absolute weights."""
    total = math.fsum(abs(o.weight) for o in outcomes)
    if total == 0:
        return None
    return math.fsum(o.weight * (o.value or 0.0) for o in outcomes) / total


def race(outcomes: Sequence[Outcome], dims: Mapping[str, float] | None) -> float | None:
    """Dimension-weighted: a RaR mean within each theme, then themes by their weights.

    Themes without a judged criterion drop out and the remaining weights renormalize;
    without dimension weights every theme counts equally. When every outcome carries a
    reference value (reference-relative judging), the result is RACE's relative score
    target / (target + reference) of the two dimension-weighted totals.
    """
    if outcomes and all(o.reference is not None for o in outcomes):
        target = _dimension_weighted(outcomes, dims)
        reference = _dimension_weighted(
            [Outcome(o.criterion_id, o.weight, o.reference, o.theme) for o in outcomes], dims
        )
        if target is None or reference is None or target + reference <= 0:
            return None
        return target / (target + reference)
    return _dimension_weighted(outcomes, dims)


def _dimension_weighted(
    outcomes: Sequence[Outcome], dims: Mapping[str, float] | None
) -> float | None:
    by_theme: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_theme[outcome.theme or ""].append(outcome)
    weighted = []
    for theme, members in by_theme.items():
        mean = rar(members, None)
        if mean is None:
            continue
        weight = 1.0 if dims is None else dims.get(theme, 0.0)
        weighted.append((weight, mean))
    total = math.fsum(w for w, _ in weighted)
    if total == 0:
        return None
    return math.fsum(w * m for w, m in weighted) / total


AGGREGATIONS: dict[str, AggregationFn] = {"healthbench": healthbench, "rar": rar, "race": race}


def get_aggregation(name: str) -> AggregationFn:
    try:
        return AGGREGATIONS[name]
    except KeyError:
        raise ValidationFailed(
            f"unknown aggregation {name!r}; choose one of {', '.join(sorted(AGGREGATIONS))}"
        ) from None


def _known(name: str) -> str:
    try:
        get_aggregation(name)
    except ValidationFailed as err:
        raise ValueError(str(err)) from None  # pydantic reports it as a validation error
    return name


# The name of an aggregation, for request bodies and configs: refused before any work starts.
AggregationName = Annotated[str, AfterValidator(_known)]


def aggregate(
    name: str,
    outcomes: Sequence[Outcome],
    *,
    dimension_weights: Mapping[str, float] | None = None,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    gate_cap: float | None = 0.0,
) -> Aggregate:
    """Aggregate ``outcomes`` with the aggregation ``name``, masking failed judgments.

    ``gate_cap``: the highest score a completion may get when a required criterion failed
    (None disables gates). A required criterion whose judgment failed masks the score:
    the gate cannot be decided.
    """
    function = get_aggregation(name)
    total = math.fsum(abs(o.weight) for o in outcomes)
    judged = [o for o in outcomes if o.value is not None]
    coverage = math.fsum(abs(o.weight) for o in judged) / total if total else 0.0
    if coverage < min_coverage:
        return Aggregate(
            None, coverage, Status.MASKED, [f"coverage {coverage:.2f} below {min_coverage:.2f}"]
        )
    reasons: list[str] = []
    if gate_cap is not None:
        undecided = [o.criterion_id for o in outcomes if o.required and o.value is None]
        if undecided:
            return Aggregate(
                None, coverage, Status.MASKED, [f"required criterion {undecided[0]} not judged"]
            )
    value = function(judged, dimension_weights)
    if value is None:
        return Aggregate(None, coverage, Status.MASKED, ["no judged criterion carries weight"])
    if gate_cap is not None:
        failed = [
            o.criterion_id for o in judged if o.required and (o.value or 0.0) < GATE_THRESHOLD
        ]
        if failed and value > gate_cap:
            value = gate_cap
            reasons.append(f"capped at {gate_cap:g}: required criterion {failed[0]} not met")
    status = Status.OK if coverage >= 1.0 - 1e-12 else Status.PARTIAL
    if status is Status.PARTIAL:
        reasons.append(f"renormalized over {coverage:.2f} of the rubric's weight")
    return Aggregate(value, coverage, status, reasons)
