"""The target against a reference report, per dimension (RACE)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from rubricsvc.hashing import content_hash
from rubricsvc.judging import keys
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.aggregation import Outcome
from rubricsvc.judging.modes import text
from rubricsvc.judging.modes.base import (
    Call,
    CallContext,
    Case,
    Item,
    ModeError,
    RubricCriterion,
    Ruling,
)
from rubricsvc.judging.modes.citation import citation_calls, split_citation_items
from rubricsvc.judging.modes.per_criterion import PerCriterionMode
from rubricsvc.neutral import judged

REFERENCE_SCALE_MAX = 10


def reference_relative_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """One call per theme, scoring the target and the reference on each of its criteria."""
    template, completion = context.template, context.completion
    if not completion.reference:
        raise ModeError(
            "reference-relative judging needs the prompt's reference answer; it has none"
        )
    by_theme: dict[str, list[Item]] = defaultdict(list)
    for item in items:
        assert item.criterion is not None
        by_theme[item.criterion.theme or "overall"].append(item)
    framed = text.framed(completion)
    reference = judged(completion.reference)
    calls = []
    for theme, members in by_theme.items():
        chat = template.render(
            **(framed | {"reference": reference}),
            dimension=judged(theme),
            criteria=text.numbered([m.criterion for m in members if m.criterion is not None]),
        )
        parse = text.numbered_answers(members, _pair_verdict)
        calls.append(Call(text.generation(context, chat), tuple(m.key for m in members), parse))
    return calls


def _pair_verdict(raw: Any, _item: Item) -> v.Verdict:
    if not isinstance(raw, dict) or set(raw) != {"target", "reference"}:
        raise v.VerdictParseError(f'{raw!r} is not {{"target": <0-10>, "reference": <0-10>}}')
    scores = []
    for side in ("target", "reference"):
        score = raw[side]
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not 0 <= score <= REFERENCE_SCALE_MAX
        ):
            raise v.VerdictParseError(f"{side} score {score!r} is not a number from 0 to 10")
        scores.append(float(score))
    target, reference = scores
    return v.Verdict(
        target / REFERENCE_SCALE_MAX,
        f"{target:g} vs {reference:g}",
        detail={"target": target, "reference": reference},
    )


class ReferenceRelative(PerCriterionMode):
    """Target vs reference report per dimension; the race aggregation reads both."""

    name = "reference-relative"
    template = "reference_relative"
    # Each judgment rates the target on one dimension beside the reference report: not
    # whether a criterion is met.
    per_criterion = False

    def key(self, case: Case, criterion: RubricCriterion) -> str:
        """Also the reference report: another reference is another comparison."""
        return keys.reference_key(
            case.judge_hash,
            criterion.content_hash,
            case.prompt_hash,
            content_hash(case.completion.reference or ""),
            case.response_hash,
        )

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        citing, rest = split_citation_items(items)
        return reference_relative_calls(context, rest) + citation_calls(
            context, citing, decode=True
        )

    def outcome(self, criterion: RubricCriterion, ruling: Ruling) -> Outcome:
        """The target's value, and the reference's on the same criterion."""
        outcome = super().outcome(criterion, ruling)
        reference_score = (ruling.detail or {}).get("reference")
        if reference_score is None:
            return outcome
        reference = float(reference_score) / REFERENCE_SCALE_MAX
        view = criterion.view
        return Outcome(
            criterion.id, view.weight, ruling.value, view.theme, criterion.required, reference
        )
