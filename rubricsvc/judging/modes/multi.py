"""Several criteria per call, answered as one JSON object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rubricsvc.judging import verdicts as v
from rubricsvc.judging.modes import text
from rubricsvc.judging.modes.base import Call, CallContext, Item
from rubricsvc.judging.modes.citation import citation_calls, split_citation_items
from rubricsvc.judging.modes.per_criterion import PerCriterionMode


def multi_criterion_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """Up to ``spec.max_criteria`` criteria per call; a reply must answer every one."""
    completion = context.completion
    framed = text.framed(completion) | text.reference_field(context)
    # Criteria on the trajectory are asked in calls of their own, which show it.
    on_response = [i for i in items if i.criterion is None or not i.criterion.on_trajectory]
    on_trajectory = [i for i in items if i.criterion is not None and i.criterion.on_trajectory]
    calls = _chunked_calls(context, on_response, framed)
    if on_trajectory:
        with_trajectory = text.trajectory_field(completion, framed)
        calls += _chunked_calls(context, on_trajectory, with_trajectory)
    return text.missing_reference(context, calls)


def _chunked_calls(
    context: CallContext, items: Sequence[Item], framed: dict[str, str]
) -> list[Call]:
    spec, template = context.spec, context.template
    calls = []
    for start in range(0, len(items), spec.max_criteria):
        chunk = list(items[start : start + spec.max_criteria])
        criteria = [item.criterion for item in chunk if item.criterion is not None]
        example = ", ".join(
            f'"{n}": {criterion.scores[-1] if criterion.levels else chr(34) + "yes" + chr(34)}'
            for n, criterion in enumerate(criteria, start=1)
        )
        chat = template.render(
            **framed,
            criteria=text.numbered(criteria),
            answer_format=f'"yes" or "no" (a number for a criterion with a scale), e.g. {{{example}}}',
        )
        parse = text.numbered_answers(chunk, _multi_verdict)
        calls.append(Call(text.generation(context, chat), tuple(i.key for i in chunk), parse))
    return calls


def _multi_verdict(raw: Any, item: Item) -> v.Verdict:
    criterion = item.criterion
    assert criterion is not None
    if criterion.levels:
        if not isinstance(raw, int) or isinstance(raw, bool) or raw not in criterion.scores:
            raise v.VerdictParseError(f"{raw!r} is not one of the levels {criterion.scores}")
        return v.Verdict(v.ordinal_value(raw, criterion.scores), str(raw))
    if not isinstance(raw, str) or raw.strip().lower() not in {"yes", "no"}:
        raise v.VerdictParseError(f'{raw!r} is not "yes" or "no"')
    label = raw.strip().lower()
    return v.Verdict(1.0 if label == "yes" else 0.0, label)


class MultiCriterion(PerCriterionMode):
    """Up to ``max_criteria`` criteria per call, a JSON answer."""

    name = "multi-criterion"
    template = "multi_criterion"
    options = frozenset({"max_criteria", "reference"})

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        citing, rest = split_citation_items(items)
        # Each citation check is a call of its own: it reads its document, not the response.
        return multi_criterion_calls(context, rest) + citation_calls(context, citing, decode=True)
