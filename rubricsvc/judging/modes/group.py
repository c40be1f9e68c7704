"""A whole group of responses to one prompt (a GRPO group) scored together in one call.

Seeing the group lets the judge spread its scores across it, which is what a group-relative
advantage needs. Position bias is the known weakness of judging many responses at once, so
each repeat shows the group in another order (shuffled by the repeat's key, so the same
repeat always shows the same order and is cached like any judgment) and a completion's value
is the mean of its scores over the repeats; the spread between repeats is kept. Every member
of a group plans the same judgments (keyed on the group's content and the repeat), so a group
costs ``group_repeats`` calls, whichever member asks first. A judgment that a member's response
made fail (``scoring.attribution``) gives that member its worst score, 0, and the others the
scores of the same call with that member replaced by a neutral text.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from rubricsvc.backends.types import ChoiceResult, Generation, GenerationRequest
from rubricsvc.judging import keys
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.aggregation import Status
from rubricsvc.judging.failures import FailureClass
from rubricsvc.judging.modes import text
from rubricsvc.judging.modes.assess import NOT_JUDGED, charged_to, failure_class
from rubricsvc.judging.modes.base import (
    Assessment,
    AssessOptions,
    Call,
    CallContext,
    Case,
    CompletionView,
    Item,
    Plan,
    RubricCriterion,
    Ruling,
)
from rubricsvc.judging.modes.pairwise import own_view, rubric_lines
from rubricsvc.neutral import judged

TOP_SCORE = 10
DEFAULT_REPEATS = 2


def shown_order(item: Item) -> list[CompletionView]:
    """The group in the order this repeat shows it: a shuffle seeded by the repeat's key."""
    order = list(item.responses)
    random.Random(int(item.key[:16], 16)).shuffle(order)
    return order


def _answer_schema(count: int) -> dict[str, Any]:
    # String levels: schema-guided decoding picks one of them (it decodes enums, not numbers).
    levels = [str(n) for n in range(TOP_SCORE + 1)]
    properties = {str(n): {"type": "string", "enum": levels} for n in range(1, count + 1)}
    return {"type": "object", "properties": properties, "required": list(properties)}


def _score(raw: Any) -> int:
    if isinstance(raw, bool):
        raise v.VerdictParseError(f"{raw!r} is not a score from 0 to {TOP_SCORE}")
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw.strip())
    if not isinstance(raw, int) or not 0 <= raw <= TOP_SCORE:
        raise v.VerdictParseError(f"{raw!r} is not a score from 0 to {TOP_SCORE}")
    return raw


def group_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """One decoded JSON answer per repeat, scoring every response of the group."""
    calls = []
    for item in items:
        order = shown_order(item)
        blocks = "\n\n".join(
            f'<response id="{n}">\n{judged(view.response)}\n</response>'
            for n, view in enumerate(order, start=1)
        )
        # Placeholders, not numbers: a small judge copies an example's numbers into every slot.
        example = "{" + ", ".join(f'"{n}": "<score>"' for n in range(1, len(order) + 1)) + "}"
        chat = context.template.render(
            conversation=text.render_conversation(order[0].messages),
            responses=blocks,
            criteria=rubric_lines(item.rubric),
            example=example,
        )
        base = text.generation(context, chat)
        request = GenerationRequest(
            base.chat,
            max_tokens=max(base.max_tokens, 8 * len(order) + 8),
            temperature=base.temperature,
            seed=base.seed,
            json_schema=_answer_schema(len(order)),
        )

        def parse(
            result: Generation | ChoiceResult,
            key: str = item.key,
            order: list[CompletionView] = order,
        ) -> dict[str, v.Verdict]:
            answer = v.json_object(text.text_of(result))
            v.expect_keys(answer, len(order))
            by_hash: dict[str, list[float]] = {}
            for n, view in enumerate(order, start=1):
                value = _score(answer[str(n)]) / TOP_SCORE
                by_hash.setdefault(view.response_hash, []).append(value)
            scores = {h: math.fsum(vs) / len(vs) for h, vs in by_hash.items()}
            detail = {"order": [view.id for view in order], "scores": scores}
            mean = math.fsum(scores.values()) / len(scores)
            return {key: v.Verdict(mean, f"group of {len(order)}", detail=detail)}

        calls.append(Call(request, (item.key,), parse))
    return calls


class Group:
    """Every completion of a prompt's group scored in one call, repeated in shuffled orders."""

    name = "group"
    template = "group"
    aggregation: str | None = "group"
    decodes = True
    options: frozenset[str] = frozenset({"group_size", "group_repeats"})
    wording = "1"
    compares = True
    gives_probability = False
    per_criterion = False
    judges_pairs = False  # a group of completions at once

    def plan(self, case: Case) -> Plan:
        members = (own_view(case), *case.peers)
        hashes = [m.response_hash for m in members]
        canonical = tuple(sorted(members, key=lambda m: (m.response_hash, m.id)))
        rubric = tuple(c.view for c in case.criteria)
        repeats = case.spec.group_repeats if case.spec is not None else DEFAULT_REPEATS
        items = [
            Item(
                keys.group_key(case.judge_hash, case.rubric_hash, case.prompt_hash, hashes, r),
                None,
                rubric=rubric,
                responses=canonical,
            )
            for r in range(repeats)
        ]
        return Plan(items, {})

    def count(self, criteria: Sequence[RubricCriterion]) -> int:
        return DEFAULT_REPEATS  # per group; shared by its members

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        return group_calls(context, items)

    def assess(
        self, case: Case, plan: Plan, rulings: Mapping[str, Ruling], options: AssessOptions
    ) -> Assessment:
        assessment = Assessment(None, 0.0, Status.MASKED, [])
        values: list[float] = []
        for repeat, item in enumerate(plan.items):
            ruling = rulings.get(item.key, NOT_JUDGED)
            charged = charged_to(ruling, case.response_hash, options.response_failure)
            # Judged again with the members that broke it replaced (``scoring.attribution``).
            rest = (ruling.detail or {}).get("attribution", {}).get("rest") or {}
            detail = rest if charged is False else (ruling.detail or {})
            scores = detail.get("scores", {})
            value = scores.get(case.response_hash) if ruling.value is not None else None
            if charged is False:
                value = scores.get(case.response_hash)
            order = detail.get("order")
            entry: dict[str, Any] = {
                "repeat": repeat,
                "weight": 1.0,  # as a criterion row reads: each repeat counts alike
                "text": f"repeat {repeat + 1}, shown in the order {order}",
                "status": "ok" if value is not None else "failed",
                "value": value,
                "order": order,
                "judgment_id": ruling.judgment_id,
            }
            assessment.verdicts.append(value)
            if charged:
                # This response broke the group's judgment: its worst score.
                value = 0.0
                assessment.failures[FailureClass.RESPONSE.value] += 1
                entry.update(status="unjudgeable", value=value, error=ruling.error)
            if value is None:
                if charged is None:
                    assessment.failures[failure_class(ruling)] += 1
                entry["error"] = ruling.error or "the group's judgment has no score for it"
            else:
                values.append(value)
            assessment.criteria.append(entry)
        if not plan.items:
            return assessment
        assessment.coverage = len(values) / len(plan.items)
        if not values or assessment.coverage < options.min_coverage:
            assessment.reasons.append(
                f"{len(plan.items) - len(values)} of {len(plan.items)} group judgments failed"
            )
            return assessment
        assessment.value = math.fsum(values) / len(values)
        assessment.status = Status.OK if len(values) == len(plan.items) else Status.PARTIAL
        if len(values) > 1:
            assessment.reasons.append(
                f"spread between the {len(values)} shuffled repeats: "
                f"{max(values) - min(values):.3f}"
            )
        return assessment
