"""Reading an agent trajectory: the OpenAI-style message list (assistant turns with
``tool_calls``, ``tool`` results) that led to a final answer.

Everything here is a single pass over the messages, and every text it looks at is cut to a
bounded head first: the trajectory is written by the policy being trained, so its size must
not decide how long scoring takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

# A tool result "looks like an error" by its first characters only: tools report failure up
# front ("Error: ...", "Traceback ...", an HTTP status), and reading a bounded head keeps the
# test linear in the trajectory however long each result is.
ERROR_HEAD_CHARS = 200
_ERROR_STARTS = ("error", "exception", "traceback", "failed", "failure")
_ERROR_MARKERS = (
    "error:",
    '"error"',
    "{'error'",  # TRL's GRPOTrainer reports a failed tool as str({"error": ...})
    "traceback (most recent call last)",
    "exception:",
    "status code 4",
    "status code 5",
    "http 4",
    "http 5",
    "not found",
    "timed out",
)


def message_text(message: dict[str, Any]) -> str:
    """A message's text: a string content, or the text parts of a list content."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def tool_calls(message: dict[str, Any]) -> list[tuple[str, str]]:
    """An assistant message's tool calls as (name, arguments), the arguments canonical JSON
    (keys sorted) when they parse, so the same call is the same string however it was spelled."""
    calls: list[tuple[str, str]] = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        nested = call.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else call
        name = str(function.get("name", ""))
        calls.append((name, canonical_arguments(function.get("arguments"))))
    return calls


def canonical_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return str(arguments)
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(arguments)


def is_tool_result(message: dict[str, Any]) -> bool:
    return message.get("role") in {"tool", "function", "ipython"}


def looks_like_error(message: dict[str, Any]) -> bool:
    """Whether a tool result reports a failure: an explicit ``is_error``/``status: error`` field,
    or its head starts with or carries one of the usual error markers."""
    if message.get("is_error") is True or message.get("status") == "error":
        return True
    head = message_text(message)[:ERROR_HEAD_CHARS].lstrip().casefold()
    return head.startswith(_ERROR_STARTS) or any(marker in head for marker in _ERROR_MARKERS)


def all_tool_calls(messages: Sequence[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for message in messages:
        if message.get("role") == "assistant":
            yield from tool_calls(message)
