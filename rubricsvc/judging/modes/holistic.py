"""The whole rubric at once: one Likert score, which is the completion's score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rubricsvc.backends.types import ChoiceResult, Generation
from rubricsvc.hashing import content_hash
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
    CriterionView,
    Item,
    Plan,
    RubricCriterion,
    Ruling,
)
from rubricsvc.neutral import judged


def rubric_scale(rubric: Sequence[CriterionView]) -> list[int] | None:
    """The rubric's own scale when it has one: every criterion ordinal on the same levels (a
    Prometheus score rubric, say); None: the judge's 1..likert_max."""
    scales = {tuple(c.scores) for c in rubric}
    if len(scales) != 1 or not all(c.levels for c in rubric):
        return None
    return list(scales.pop())


def rubric_lines(rubric: Sequence[CriterionView]) -> str:
    """Each criterion as a weighted line, with its explanation and its level descriptions."""
    lines = []
    for criterion in rubric:
        line = f"- [{criterion.weight:+g}] {judged(criterion.text)}"
        if criterion.explanation:
            line += f" ({judged(criterion.explanation)})"
        lines.append(line)
        lines += [
            f"  Score {level['score']}: {judged(str(level['description']))}"
            for level in criterion.levels or []
        ]
    return "\n".join(lines)


def scale_question(scale: list[int] | None, likert_max: int) -> str:
    """What the judge is asked to answer, on the rubric's scale or 1..likert_max."""
    if scale is None:
        return (
            f"Rate how well the response satisfies the rubric on a scale from 1 (not at all) to "
            f"{likert_max} (fully). Explain briefly, then write your score alone on the last "
            f"line, exactly in this form: SCORE: <number from 1 to {likert_max}>"
        )
    return (
        f"Rate the response on the rubric's own scale, from {min(scale)} (lowest) to "
        f"{max(scale)} (highest), choosing the score whose description fits it best. Explain "
        "briefly, then write your score alone on the last line, exactly in this form: "
        f"SCORE: <one of {', '.join(map(str, scale))}>"
    )


def holistic_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """One call with every weighted criterion (and its levels), answered on the rubric's own
    scale when it has one, else on 1..likert_max."""
    spec, template, completion = context.spec, context.template, context.completion
    (item,) = items
    scale = rubric_scale(item.rubric)
    chat = template.render(
        **(text.framed(completion) | text.reference_field(context)),
        criteria=rubric_lines(item.rubric),
        likert_max=str(spec.likert_max),
        scale=scale_question(scale, spec.likert_max),
    )

    def parse(result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
        reply = text.text_of(result)
        if scale is not None:
            return {item.key: v.level_from_text(reply, scale)}
        return {item.key: v.likert_from_text(reply, spec.likert_max)}

    return text.missing_reference(
        context, [Call(text.generation(context, chat), (item.key,), parse)]
    )


class Holistic:
    """One judgment of the whole rubric; its value is the score (aggregation "holistic")."""

    name = "holistic"
    template = "holistic"
    aggregation: str | None = "holistic"
    decodes = True
    options = frozenset({"likert_max", "reference"})
    # 2: criteria with their explanations and level descriptions; the rubric's own scale.
    wording = "2"
    compares = False
    gives_probability = False  # a Likert score
    per_criterion = False  # the whole rubric at once
    judges_pairs = False

    def plan(self, case: Case) -> Plan:
        prompt_hash = case.prompt_hash
        if case.spec is not None and case.spec.reference:
            # The reference shown (none is content too) is part of what was judged.
            prompt_hash = content_hash([prompt_hash, case.completion.reference or ""])
        key = keys.holistic_key(case.judge_hash, case.rubric_hash, prompt_hash, case.response_hash)
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
        if text.lacks_reference(case.spec, case.completion):
            assessment.reasons.append(text.NO_REFERENCE_REASON)
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
