"""The whole rubric at once: one Likert score, which is the completion's score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rubricsvc.judging import keys
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.aggregation import Status
from rubricsvc.judging.modes import text
from rubricsvc.judging.modes.assess import NOT_JUDGED, charged_value, failure_class
from rubricsvc.judging.modes.base import (
    Assessment,
    AssessOptions,
    Call,
    CallContext,
    Case,
    Item,
    Plan,
    RubricCriterion,
    Ruling,
)
from rubricsvc.judging.neutral import judged
from rubricsvc.judging.types import ChoiceResult, Generation


def holistic_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """One call with every weighted criterion, answered on a 1..likert_max scale."""
    spec, template, completion = context.spec, context.template, context.completion
    (item,) = items
    lines = "\n".join(f"- [{c.weight:+g}] {judged(c.text)}" for c in item.rubric)
    chat = template.render(
        **text.framed(completion),
        criteria=lines,
        likert_max=str(spec.likert_max),
    )

    def parse(result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
        return {item.key: v.likert_from_text(text.text_of(result), spec.likert_max)}

    return [Call(text.generation(context, chat), (item.key,), parse)]


class Holistic:
    """One judgment of the whole rubric; its value is the score (aggregation "holistic")."""

    name = "holistic"
    template = "holistic"
    aggregation: str | None = "holistic"
    decodes = True
    options = frozenset({"likert_max"})
    wording = "1"
    compares = False

    def plan(self, case: Case) -> Plan:
        key = keys.holistic_key(
            case.judge_hash, case.rubric_hash, case.prompt_hash, case.response_hash
        )
        return Plan([Item(key, None, rubric=tuple(c.view for c in case.criteria))], {})

    def count(self, criteria: Sequence[RubricCriterion]) -> int:
        return 1

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        return holistic_calls(context, items)

    def assess(
        self, case: Case, plan: Plan, rulings: Mapping[str, Ruling], options: AssessOptions
    ) -> Assessment:
        ruling = rulings.get(plan.items[0].key, NOT_JUDGED)
        assessment = Assessment(ruling.value, 1.0, Status.OK, [], verdicts=[ruling.value])
        if ruling.value is None:
            failure = failure_class(ruling)
            assessment.failures[failure] += 1
            # The whole rubric as one criterion to meet: its worst value is 0.
            assessment.value = charged_value(ruling, options.response_failure, 1.0)
            if assessment.value is not None:
                assessment.reasons.append(
                    f"the response could not be judged, scored at the worst: {ruling.error}"
                )
            else:
                assessment.reasons.append(
                    f"holistic judgment failed ({ruling.failure}): {ruling.error}"
                )
                assessment.coverage, assessment.status = 0.0, Status.MASKED
        return assessment
