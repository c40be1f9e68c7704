"""Judging proposed criteria over a group, in memory: the verdicts pruning reads.

A proposed criterion is not part of any stored version yet, so it is judged as an audit
judges (the same verdict mode, neutralizing step, backend and failure classes as scoring),
without storing the judgments. Once a criterion is in an evolved version, its rewards come
from ordinary scoring of that version, stored and cached like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rubricsvc.backends.base import JudgeBackend
from rubricsvc.errors import ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import ResponseFailurePolicy
from rubricsvc.judging.modes import (
    AssessOptions,
    Case,
    CompletionView,
    CriterionView,
    RubricCriterion,
    Ruling,
    get_mode,
)
from rubricsvc.rubrics.schemas import CriterionSpec
from rubricsvc.scoring.executor import CallExecutor, JudgeResult


class CriterionJudge(Protocol):
    def __call__(
        self,
        messages: Sequence[dict[str, Any]],
        criteria: Sequence[CriterionSpec],
        responses: Sequence[str],
    ) -> list[list[float | None]]:
        """Each criterion's value on each response (``values[criterion][response]``; None:
        the judgment failed for a reason outside the response, which the step reads as an
        outage: a failure the response caused is its worst value)."""
        ...


class ExecutorJudge:
    """A ``CriterionJudge`` on a judge spec and its backend (per-criterion modes only)."""

    def __init__(self, spec: JudgeSpec, backend_factory: Callable[[], JudgeBackend]) -> None:
        self.mode = get_mode(spec.mode)
        if not self.mode.per_criterion or self.mode.compares:
            raise ValidationFailed(
                f"judge {spec.name!r} ({spec.mode}) does not judge criteria one by one: "
                "evolving rubrics needs a per-criterion verdict mode to measure each "
                "criterion's spread"
            )
        self.spec = spec
        self.backend_factory = backend_factory

    def __call__(
        self,
        messages: Sequence[dict[str, Any]],
        criteria: Sequence[CriterionSpec],
        responses: Sequence[str],
    ) -> list[list[float | None]]:
        if not criteria:
            return []
        rubric = tuple(
            RubricCriterion(
                position,
                position,
                CriterionView(
                    position,
                    c.text,
                    c.explanation,
                    c.weight,
                    c.scale.model_dump(),
                    c.theme,
                    c.target.value,
                ),
                content_hash(c.judged_content()),
            )
            for position, c in enumerate(criteria)
        )
        cases = [
            Case(
                CompletionView(index, list(messages), response),
                rubric,
                self.spec.config_hash(),
                "evolution",
                content_hash(list(messages)),
                content_hash(response),
            )
            for index, response in enumerate(responses)
        ]
        plans = [self.mode.plan(case) for case in cases]
        executor = CallExecutor(
            self.backend_factory, self.spec, self.mode.calls, self.spec.prompt_template()
        )
        try:
            results = executor.run(
                [(c.completion, p.items) for c, p in zip(cases, plans, strict=True)]
            )
        finally:
            executor.close()
        rulings = {key: _ruling(result) for key, result in results.items()}
        # A failure the response caused is charged its worst value, as scoring charges it;
        # a failure of the judge or the infrastructure is no value at all.
        options = AssessOptions("rar", 0.0, response_failure=ResponseFailurePolicy.WORST)
        by_response = [
            [_value(entry) for entry in self.mode.assess(case, plan, rulings, options).criteria]
            for case, plan in zip(cases, plans, strict=True)
        ]
        return [[verdicts[i] for verdicts in by_response] for i in range(len(criteria))]


def _value(entry: dict[str, Any]) -> float | None:
    value = entry.get("value")
    return None if value is None else float(value)


def _ruling(result: JudgeResult) -> Ruling:
    verdict = result.verdict
    return Ruling(
        verdict.value if verdict is not None else None,
        verdict.label if verdict is not None else None,
        verdict.detail if verdict is not None else result.detail,
        result.failure.value if result.failure is not None else None,
        result.error,
    )
