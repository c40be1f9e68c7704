"""Prompt pieces the built-in modes share, and reading a backend's reply.

Every prompt puts the long shared part first (instructions, conversation, response) and
the criterion last, so a backend can reuse the shared prefix across a completion's criteria.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from rubricsvc.backends.types import ChoiceResult, Generation, GenerationRequest
from rubricsvc.hashing import content_hash
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.modes.base import (
    Call,
    CallContext,
    CompletionView,
    CriterionView,
    Item,
    Parser,
    RubricCriterion,
)
from rubricsvc.judging.readers.trajectory import (
    is_tool_result,
    looks_like_error,
    message_text,
    tool_calls,
)
from rubricsvc.neutral import judged


def render_conversation(messages: Sequence[dict[str, Any]]) -> str:
    if len(messages) == 1 and messages[0].get("role") == "user":
        return judged(str(messages[0]["content"]))
    return "\n\n".join(f"[{judged(str(m['role']))}]\n{judged(str(m['content']))}" for m in messages)


# Bounds of a rendered trajectory: the judge reads what the agent did, not every byte it read.
TRAJECTORY_ARGUMENT_CHARS = 200
TRAJECTORY_RESULT_HEAD_CHARS = 300
TRAJECTORY_TEXT_CHARS = 1000
TRAJECTORY_TOTAL_CHARS = 8000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def render_trajectory(
    messages: Sequence[dict[str, Any]],
    *,
    argument_chars: int = TRAJECTORY_ARGUMENT_CHARS,
    result_head_chars: int = TRAJECTORY_RESULT_HEAD_CHARS,
    text_chars: int = TRAJECTORY_TEXT_CHARS,
    total_chars: int = TRAJECTORY_TOTAL_CHARS,
) -> str:
    """A compact, defused rendering of an agent trajectory: each assistant turn's text, each tool
    call as ``name(arguments)`` (arguments cut), each tool result's head, marked ``error`` when
    it looks like one; user and system turns are left out (the conversation is shown apart).
    Every piece is cut before it is defused, and the whole stops at ``total_chars`` with a note
    of how many steps were left out, so the rendering is bounded however long the trajectory."""
    lines: list[str] = []
    size = 0
    for index, message in enumerate(messages):
        role = message.get("role")
        step: list[str] = []
        if role == "assistant":
            text = message_text(message).strip()
            if text:
                step.append(f"[assistant] {judged(_cut(text, text_chars))}")
            for name, arguments in tool_calls(message):
                call = f"{_cut(name, 100)}({_cut(arguments, argument_chars)})"
                step.append(f"[tool call] {judged(call)}")
        elif is_tool_result(message):
            marker = "tool result, error" if looks_like_error(message) else "tool result"
            head = _cut(message_text(message).strip(), result_head_chars)
            step.append(f"[{marker}] {judged(head)}")
        for line in step:
            if size + len(line) + 1 > total_chars:
                lines.append(f"[… {len(messages) - index} more message(s) not shown]")
                return "\n".join(lines)
            lines.append(line)
            size += len(line) + 1
    return "\n".join(lines)


def trajectory_hash(response_hash: str, trajectory: Sequence[dict[str, Any]]) -> str:
    """What a trajectory criterion's judgment covers in place of the response alone."""
    return content_hash({"response": response_hash, "trajectory": list(trajectory)})


def lacks_trajectory(criterion: RubricCriterion, completion: CompletionView) -> bool:
    """A trajectory criterion on a completion stored without its trajectory: not judged."""
    return criterion.view.on_trajectory and completion.trajectory is None


# What a trajectory criterion's judge reads before the trajectory, right after the conversation.
TRAJECTORY_INTRO = (
    "The steps the assistant took before its final response (its messages, tool calls and the "
    "first part of each tool result); the criterion is about these steps."
)


def trajectory_field(completion: CompletionView, fields: dict[str, str]) -> dict[str, str]:
    """The template fields of a trajectory criterion: the rendered trajectory, framed
    ``<trajectory>``, appended to the ``${reference}`` slot (after the conversation and any
    reference answer, before the response), so the bundled templates serve both targets."""
    rendered = render_trajectory(completion.trajectory or ())
    block = f"\n\n{TRAJECTORY_INTRO}\n<trajectory>\n{rendered}\n</trajectory>"
    return fields | {"reference": fields.get("reference", "") + block}


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
    """The conversation and response as template fields: rendered and defused once per
    completion. ``reference`` is empty: the bundled templates' ``${reference}`` slot stays
    empty unless a mode fills it (``reference_field``), so a plugin mode that renders a bundled
    template with these fields gets the prompt it always got."""
    return {
        "conversation": render_conversation(completion.messages),
        "reference": "",
        "response": judged(completion.response),
    }


# What a judge with ``reference: true`` reads before the prompt's reference answer.
REFERENCE_INTRO = (
    "A reference answer to the conversation, for comparison: the response need not match it "
    "word for word, but it shows what a correct and complete answer contains."
)
# The judgment detail of a judge with ``reference: true`` on a prompt that has none.
NO_REFERENCE = "none: the prompt has no reference answer"
# ... and the reason its score gives.
NO_REFERENCE_REASON = "judged without a reference answer: the prompt has none"


def reference_field(context: CallContext) -> dict[str, str]:
    """The template field ``${reference}``: with ``reference: true`` the prompt's reference
    answer, defused and framed like the response, placed right after the conversation (so every
    completion of a prompt shares it as a prefix); otherwise, or when the prompt has none,
    empty (the judge then judges without it, and ``missing_reference`` notes that)."""
    reference = context.completion.reference
    if not context.spec.reference or not reference:
        return {"reference": ""}
    return {
        "reference": f"\n\n{REFERENCE_INTRO}\n<reference_answer>\n{judged(reference)}\n"
        "</reference_answer>"
    }


def lacks_reference(spec: object, completion: CompletionView) -> bool:
    """Whether a judge that shows references (``reference: true``) judges ``completion``
    without one, because its prompt has none."""
    return bool(getattr(spec, "reference", False)) and not completion.reference


def missing_reference(context: CallContext, calls: list[Call]) -> list[Call]:
    """``calls``, whose verdicts record (detail ``reference``) that they were judged without a
    reference answer when the judge shows one and the prompt has none."""
    if not lacks_reference(context.spec, context.completion):
        return calls

    def noted(parse: Parser) -> Parser:
        def parse_noted(result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
            return {
                key: dataclasses.replace(
                    verdict, detail={**verdict.detail, "reference": NO_REFERENCE}
                )
                for key, verdict in parse(result).items()
            }

        return parse_noted

    return [dataclasses.replace(call, parse=noted(call.parse)) for call in calls]


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
