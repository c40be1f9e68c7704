"""One criterion per call: the verdict token's probability, or a reasoned verdict line."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.modes import text
from rubricsvc.judging.modes.base import Call, CallContext, CriterionView, Item, Parser
from rubricsvc.judging.modes.citation import citation_calls, split_citation_items
from rubricsvc.judging.modes.per_criterion import PerCriterionMode


def _from_probs(
    key: str, scores: list[int], result: Generation | ChoiceResult
) -> dict[str, v.Verdict]:
    """A choice result's verdict: a level's expected score on a scale, else P(yes)."""
    probs = text.probs_of(result)
    return {key: v.ordinal_from_probs(probs, scores) if scores else v.binary_from_probs(probs)}


def _from_text(
    key: str, scores: list[int], result: Generation | ChoiceResult
) -> dict[str, v.Verdict]:
    """A reply's verdict line: a level on a scale, else yes or no."""
    reply = text.text_of(result)
    return {key: v.ordinal_from_text(reply, scores) if scores else v.binary_from_text(reply)}


def _each_criterion(
    context: CallContext,
    items: Sequence[Item],
    call_for: Callable[[dict[str, str], Item, CriterionView], Call],
) -> list[Call]:
    """One call per item, each deciding its own criterion."""
    # Rendered once for all the criteria.
    framed = text.framed(context.completion) | text.reference_field(context)
    with_trajectory: dict[str, str] | None = None  # rendered once, for trajectory criteria only
    calls = []
    for item in items:
        assert item.criterion is not None
        fields = framed
        if item.criterion.on_trajectory:
            if with_trajectory is None:
                with_trajectory = text.trajectory_field(context.completion, framed)
            fields = with_trajectory
        calls.append(call_for(fields, item, item.criterion))
    return text.missing_reference(context, calls)


def criterion_prob_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """One forward pass per criterion: the probability of each verdict token."""

    def call(framed: dict[str, str], item: Item, criterion: CriterionView) -> Call:
        if criterion.levels:
            question = f"{text.question(criterion)}\nAnswer with one number."
            choices = tuple(str(s) for s in criterion.scores)
        else:
            question = f"{text.question(criterion)} Answer with one word: Yes or No."
            choices = v.YES_TOKENS + v.NO_TOKENS
        chat = context.template.render(**framed, question=question)
        request = ChoiceRequest(chat, choices, group=str(context.completion.id))
        # criterion.scores is empty for a yes/no criterion
        parse: Parser = partial(_from_probs, item.key, criterion.scores)
        return Call(request, (item.key,), parse)

    return _each_criterion(context, items, call)


def criterion_text_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """One decoded reply per criterion, ending in a strictly parsed verdict line."""

    def call(framed: dict[str, str], item: Item, criterion: CriterionView) -> Call:
        if criterion.levels:
            verdict_format = f"VERDICT: <one of {', '.join(map(str, criterion.scores))}>"
        else:
            verdict_format = "VERDICT: YES or VERDICT: NO"
        chat = context.template.render(
            **framed, question=text.question(criterion), verdict_format=verdict_format
        )
        parse: Parser = partial(_from_text, item.key, criterion.scores)
        return Call(text.generation(context, chat), (item.key,), parse)

    return _each_criterion(context, items, call)


class CriterionProb(PerCriterionMode):
    """The probability of the verdict token, one forward pass per criterion."""

    name = "criterion-prob"
    template = "criterion_prob"
    decodes = False  # one forward pass: no decoding settings apply
    options = frozenset({"reference"})
    gives_probability = True  # P(yes) / (P(yes) + P(no)): what a calibration corrects

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        citing, rest = split_citation_items(items)
        return criterion_prob_calls(context, rest) + citation_calls(context, citing, decode=False)


class CriterionText(PerCriterionMode):
    """Reasoning, then a strictly parsed verdict line, one call per criterion."""

    name = "criterion-text"
    template = "criterion_text"
    options = frozenset({"reference"})

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        citing, rest = split_citation_items(items)
        return criterion_text_calls(context, rest) + citation_calls(context, citing, decode=True)
