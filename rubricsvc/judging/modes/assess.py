"""From rulings to a score, for every mode and for scoring and audits alike.

A failed judgment is masked unless the response caused it (it overflows the judge's context,
or the judge fails on it but not on a neutral text in its place: ``scoring.attribution``):
then it counts at its worst value, so provoking a failure never pays, unless the policy says
to mask that too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rubricsvc.judging.aggregation import Outcome, Status, aggregate
from rubricsvc.judging.failures import FailureClass, ResponseFailurePolicy, worst_value
from rubricsvc.judging.modes.base import (
    Assessment,
    AssessOptions,
    Case,
    Plan,
    RubricCriterion,
    Ruling,
)
from rubricsvc.judging.modes.citation import citations_outcome
from rubricsvc.judging.readers.checks import TRAJECTORY_CHECKS, run_check, run_trajectory_check

NOT_JUDGED = Ruling(None, error="not judged")

OutcomeOf = Callable[[RubricCriterion, Ruling], Outcome]


def failure_class(ruling: Ruling) -> str:
    """A failed ruling's class; one never judged counts as the infrastructure's."""
    return ruling.failure or FailureClass.INFRASTRUCTURE.value


def charged_value(ruling: Ruling, policy: ResponseFailurePolicy, weight: float) -> float | None:
    """What a failed ruling counts for: its worst value when the response caused it, else
    nothing (masked)."""
    if ruling.failure == FailureClass.RESPONSE.value and policy == ResponseFailurePolicy.WORST:
        return worst_value(weight)
    return None


def charged_to(ruling: Ruling, response_hash: str, policy: ResponseFailurePolicy) -> bool | None:
    """For a failed comparison (pairwise, group) charged to responses: whether the response
    ``response_hash`` is one of those that caused it (True), or a bystander whose comparison is
    left out (False); None when the ruling is no such failure or the policy masks it."""
    if ruling.value is not None or charged_value(ruling, policy, 1.0) is None:
        return None
    culprits = (ruling.detail or {}).get("attribution", {}).get("culprits")
    if culprits is None:
        return None
    return response_hash in culprits


def plain_outcome(criterion: RubricCriterion, ruling: Ruling) -> Outcome:
    """A criterion's outcome from its judgment's value."""
    view = criterion.view
    return Outcome(criterion.id, view.weight, ruling.value, view.theme, criterion.required)


def assess_criteria(
    case: Case,
    plan: Plan,
    rulings: Mapping[str, Ruling],
    options: AssessOptions,
    outcome_of: OutcomeOf = plain_outcome,
) -> Assessment:
    """Each criterion's value (checks computed, judged ones read), aggregated with the run's
    aggregation."""
    assessment = Assessment(None, 0.0, Status.MASKED, [])
    outcomes = []
    for criterion in case.criteria:
        entry, outcome = _criterion_outcome(criterion, case, plan, rulings, options, outcome_of)
        assessment.criteria.append(entry)
        outcomes.append(outcome)
        if criterion.check is None and not criterion.citations:
            # (a trajectory criterion without a trajectory was never planned: not judged)
            ruling = rulings.get(plan.key_of.get(criterion.id, ""), NOT_JUDGED)
            assessment.verdicts.append(ruling.value)
        if "failure" in entry:
            assessment.failures[entry["failure"]] += 1
        # Citation checks the claims made fail, each counted as that claim unsupported.
        assessment.failures[FailureClass.RESPONSE.value] += entry.get("citations", {}).get(
            "unjudgeable", 0
        )
    result = aggregate(
        options.aggregation,
        outcomes,
        dimension_weights=case.dimension_weights,
        min_coverage=options.min_coverage,
        gate_cap=options.gate_cap,
    )
    assessment.value, assessment.coverage, assessment.status = (
        result.value,
        result.coverage,
        result.status,
    )
    assessment.reasons = result.reasons
    worst = sum(1 for entry in assessment.criteria if entry["status"] == "unjudgeable")
    if worst:
        assessment.reasons = [
            f"{worst} criteria scored at their worst value: the response could not be "
            "judged (it does not fit the judge's context, or the judge fails on it and not "
            "without it)",
            *result.reasons,
        ]
    return assessment


# A trajectory criterion or check, for a completion given without a trajectory: masked like a
# mode that cannot judge an item as configured. The caller left the trajectory out, the response
# did nothing to provoke it, so neither a pass nor the worst value would be true of it.
NO_TRAJECTORY = "the completion has no trajectory: a trajectory criterion cannot be judged"


def _criterion_outcome(
    criterion: RubricCriterion,
    case: Case,
    plan: Plan,
    rulings: Mapping[str, Ruling],
    options: AssessOptions,
    outcome_of: OutcomeOf,
) -> tuple[dict[str, Any], Outcome]:
    view = criterion.view
    entry: dict[str, Any] = {
        "criterion_id": criterion.id,
        "position": criterion.position,
        "text": view.text,
        "weight": view.weight,
        "theme": view.theme,
    }
    if criterion.required:  # a gate: what a reward recomputed from this breakdown must keep
        entry["required"] = True
    if criterion.citations:
        fields, value = citations_outcome(
            plan.citations[criterion.id], rulings, options.response_failure
        )
        entry.update(fields, value=value)
        return entry, plain_outcome(criterion, Ruling(value))
    if criterion.check is not None and criterion.check["type"] in TRAJECTORY_CHECKS:
        trajectory = case.completion.trajectory
        if trajectory is None:
            entry.update(status="failed", value=None, error=NO_TRAJECTORY)
            entry["failure"] = FailureClass.INFRASTRUCTURE.value
            return entry, plain_outcome(criterion, Ruling(None))
        passed = run_trajectory_check(criterion.check, trajectory)
        entry.update(
            status="check", value=1.0 if passed else 0.0, verdict="pass" if passed else "fail"
        )
        return entry, plain_outcome(criterion, Ruling(entry["value"]))
    if criterion.check is not None:
        passed = run_check(criterion.check, case.completion.response)
        entry.update(
            status="check", value=1.0 if passed else 0.0, verdict="pass" if passed else "fail"
        )
        return entry, plain_outcome(criterion, Ruling(entry["value"]))
    if view.on_trajectory and case.completion.trajectory is None:
        entry.update(status="failed", value=None, error=NO_TRAJECTORY)
        entry["failure"] = FailureClass.INFRASTRUCTURE.value
        return entry, plain_outcome(criterion, Ruling(None))
    ruling = rulings.get(plan.key_of[criterion.id], NOT_JUDGED)
    if ruling.value is not None:
        entry.update(
            status="ok", value=ruling.value, verdict=ruling.label, judgment_id=ruling.judgment_id
        )
        outcome = outcome_of(criterion, ruling)
        if outcome.reference is not None:  # reference-relative: the reference's own value
            entry["reference"] = outcome.reference
        return entry, outcome
    entry.update(
        status="failed",
        value=None,
        error=ruling.error,
        failure=failure_class(ruling),
        judgment_id=ruling.judgment_id,
    )
    value = charged_value(ruling, options.response_failure, view.weight)
    if value is not None:
        entry.update(status="unjudgeable", value=value, verdict="worst")
    return entry, plain_outcome(criterion, Ruling(value))
