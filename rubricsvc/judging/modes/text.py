"""Prompt pieces the built-in modes share, and reading a backend's reply.

Every prompt puts the long shared part first (instructions, conversation, response) and
the criterion last, so a backend can reuse the shared prefix across a completion's criteria.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rubricsvc.judging import verdicts as v
from rubricsvc.judging.modes.base import CallContext, CompletionView, CriterionView, Item, Parser
from rubricsvc.judging.neutral import judged
from rubricsvc.judging.types import ChoiceResult, Generation, GenerationRequest


def render_conversation(messages: Sequence[dict[str, Any]]) -> str:
    if len(messages) == 1 and messages[0].get("role") == "user":
        return judged(str(messages[0]["content"]))
    return "\n\n".join(f"[{judged(str(m['role']))}]\n{judged(str(m['content']))}" for m in messages)


def criterion_block(criterion: CriterionView) -> str:
    text = f"Criterion: {judged(criterion.text)}"
    if criterion.explanation:
        text += f"\nDetails: {judged(criterion.explanation)}"
    return text


def levels_block(criterion: CriterionView) -> str:
    return "\n".join(
        f"{level['score']}: {judged(str(level['description']))}" for level in criterion.levels or []
    )


def question(criterion: CriterionView) -> str:
    if criterion.levels:
        return (
            f"{criterion_block(criterion)}\nRate how well the response meets the criterion:\n"
            f"{levels_block(criterion)}"
        )
    return f"{criterion_block(criterion)}\nDoes the response meet the criterion?"


def numbered(criteria: Sequence[CriterionView]) -> str:
    lines = []
    for number, criterion in enumerate(criteria, start=1):
        line = f"{number}. {judged(criterion.text)}"
        if criterion.explanation:
            line += f" ({judged(criterion.explanation)})"
        if criterion.levels:
            line += " Scale: " + "; ".join(
                f"{lv['score']} = {judged(str(lv['description']))}" for lv in criterion.levels
            )
        lines.append(line)
    return "\n".join(lines)


def framed(completion: CompletionView) -> dict[str, str]:
    """The conversation and response as template fields: rendered and defused once per completion."""
    return {
        "conversation": render_conversation(completion.messages),
        "response": judged(completion.response),
    }


def generation(context: CallContext, chat: list[dict[str, str]]) -> GenerationRequest:
    """A decoding request with the judge's sampling settings."""
    spec = context.spec
    # A retry with sampling on gets a new seed: the same seed would repeat the same failure.
    seed = None if spec.seed is None else spec.seed + context.attempt
    return GenerationRequest(
        chat, max_tokens=spec.max_tokens, temperature=spec.temperature, seed=seed
    )


def text_of(result: Generation | ChoiceResult) -> str:
    assert isinstance(result, Generation)
    return result.text


def probs_of(result: Generation | ChoiceResult) -> dict[str, float]:
    assert isinstance(result, ChoiceResult)
    return result.probs


def numbered_answers(items: Sequence[Item], read: Callable[[Any, Item], v.Verdict]) -> Parser:
    """The parser of a reply that answers ``items`` as one JSON object keyed "1", "2", ... in
    their order (every number, nothing else); ``read`` turns one answer into its verdict."""

    def parse(result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
        answer = v.json_object(text_of(result))
        v.expect_keys(answer, len(items))
        return {item.key: read(answer[str(n)], item) for n, item in enumerate(items, start=1)}

    return parse
