"""A tool-using rollout as the platform stores it: the final answer, the trajectory and the
documents the agent opened (a completion's ``text``, ``trajectory`` and ``documents``).

Training frameworks hand a rollout over as chat messages, each in its own spelling: TRL's
GRPOTrainer gives tool results a ``name`` and tool-call arguments as a mapping; verl's tool
agent loop gives them a ``tool_call_id`` (when the model wrote one) and keeps arguments it
could not parse as the raw string. ``stored_trajectory`` writes both the same way, so the same
calls are the same stored trajectory (and the same completion) whichever framework ran them.

The trajectory ends where the research ended: at the first tool result that reports an error
(a bad call, an empty search, the budget spent: the environment's own ``error:`` results, or
TRL's for a call it could not make). What the policy did after that is not evidence; its final
answer (its last message without a tool call) is kept, and only documents opened before the
end count as opened.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc.judging.readers.trajectory import looks_like_error, message_text
from rubricsvc.scoring.rewards import strip_end_tokens
from trainer.environments.deepresearch import OPEN, RolloutRecord


@dataclass(frozen=True)
class Rollout:
    text: str  # the final answer ("" when the policy never wrote one)
    trajectory: list[dict[str, Any]]
    documents: list[dict[str, Any]]  # opened, in the order opened; each labelled by its id
    ended_by_error: bool  # the research ended on a tool result reporting an error


def _arguments(raw: Any) -> Any:
    """Tool-call arguments as a mapping where they are JSON; else as they came."""
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
        return parsed if isinstance(parsed, dict) else raw
    return raw


def _stored_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    assert isinstance(function, dict)
    return {
        "type": "function",
        "function": {
            "name": str(function.get("name", "")),
            "arguments": _arguments(function.get("arguments", {})),
        },
    }


def stored_trajectory(
    messages: Sequence[dict[str, Any]], end_tokens: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The generated ``messages`` (assistant turns, tool results) as the platform stores a
    trajectory: one shape whatever framework produced them. Each tool result is named by the
    call it answers (the calls of a turn are answered in order); call ids are left out, as
    they are the framework's bookkeeping, not the agent's doing. An assistant turn's text
    loses the ``end_tokens`` it ends with (verl decodes a turn with its end-of-turn token;
    TRL's parser leaves it out) and the whitespace around it."""
    stored: list[dict[str, Any]] = []
    pending: list[str] = []  # names of the last turn's calls not yet answered
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            calls = [
                _stored_call(c) for c in message.get("tool_calls") or () if isinstance(c, dict)
            ]
            text = strip_end_tokens(message_text(message), end_tokens).strip()
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                entry["tool_calls"] = calls
            pending = [c["function"]["name"] for c in calls]
            stored.append(entry)
        elif role == "tool":
            name = pending.pop(0) if pending else message.get("name")
            entry = {"role": "tool", "content": message_text(message)}
            if name:
                entry["name"] = str(name)
            stored.append(entry)
    return stored


def final_answer(trajectory: Sequence[dict[str, Any]]) -> str:
    """The content of the last assistant message that calls no tool and comes after every tool
    result ("" if the rollout ends on a call or a result)."""
    if trajectory and trajectory[-1].get("role") == "assistant":
        last = trajectory[-1]
        if not last.get("tool_calls"):
            return str(last.get("content") or "")
    return ""


def cut_at_error(trajectory: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """The trajectory up to its first tool result reporting an error, that result included,
    then its final answer; and whether it was cut."""
    for index, message in enumerate(trajectory):
        if message.get("role") == "tool" and looks_like_error(message):
            kept = trajectory[: index + 1]
            answer = final_answer(trajectory)
            if answer:
                kept.append({"role": "assistant", "content": answer})
            return kept, True
    return trajectory, False


def opened_documents(
    trajectory: Sequence[dict[str, Any]], record: RolloutRecord
) -> list[dict[str, Any]]:
    """The documents the trajectory's ``open`` calls opened, as completion documents: each as
    the environment showed it (``RolloutRecord.documents``), not the whole corpus document. A
    call is matched to the environment's record by its result: a call the framework could not
    make (and the environment never saw) opened nothing."""
    opened_by_result = {c.result: c.opened for c in record.calls if c.opened and not c.refused}
    documents: list[dict[str, Any]] = []
    seen: set[str] = set()
    for message in trajectory:
        if message.get("role") != "tool" or message.get("name") != OPEN:
            continue
        doc_id = opened_by_result.get(message_text(message))
        if doc_id is not None and doc_id not in seen and doc_id in record.documents:
            seen.add(doc_id)
            documents.append(record.documents[doc_id].record())
    return documents


def rollout(
    messages: Sequence[dict[str, Any]], record: RolloutRecord, end_tokens: Sequence[str] = ()
) -> Rollout:
    """The rollout of ``messages`` (what the policy generated, tool results included) in an
    environment whose record is ``record``."""
    trajectory, cut = cut_at_error(stored_trajectory(messages, end_tokens))
    ended = cut or record.ended is not None
    return Rollout(
        final_answer(trajectory), trajectory, opened_documents(trajectory, record), ended
    )
