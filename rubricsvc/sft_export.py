"""Rejection sampling from the store: each prompt's best-scored completions as a supervised
fine-tuning set (``rubricsvc completions export-sft``).

A completion is ranked by its stored score under one judge config (the newest of a name, the
one that answers to it) and one aggregation; masked scores (no value) never rank. The scores
of a prompt must all be under one rubric version, or the ranking would compare figures of
different checklists: a prompt scored under several is an error that says to choose one with
``rubrics`` (a name, ``NAME@N``, or a ``{prompt_id}`` template naming each prompt's own, as a
training config's ``reward.rubric`` does). Ties go to the completion stored first (the lower
id), so the same store always gives the same set.

Each row is what TRL's ``SFTTrainer`` reads, ``{"messages": [...]}``: the prompt's messages,
then the completion as the assistant's turns (a plain answer as one turn; an agent's stored
trajectory as its turns, tool calls in the chat template's ``tool_calls`` shape and tool
results as ``tool`` messages, then its final answer), and ``provenance``: where the row came
from and the score that chose it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.judging.readers.trajectory import message_text
from rubricsvc.models import Completion, JudgeConfig, Prompt, RubricVersion, Score
from rubricsvc.rubrics.repository import get_rubric, resolve_version
from rubricsvc.scoring.judge_configs import latest_judge_config
from rubricsvc.scoring.selection import Selection, selected_completions

PROMPT_ID = "{prompt_id}"


@dataclass(frozen=True)
class SftChoice:
    """Which completions a prompt contributes: its ``best`` by their score under ``judge``
    and ``aggregation``, those at or above ``min_score`` (None: any), under the rubric
    versions ``rubrics`` name (empty: whichever each prompt's scores are under)."""

    judge: str
    aggregation: str = "rar"
    best: int = 1
    min_score: float | None = None
    rubrics: tuple[str, ...] = ()


@dataclass(frozen=True)
class SftExport:
    rows: list[dict[str, Any]]
    scored_prompts: int  # prompts with a ranked score under the judge
    below_min_score: int  # of those, prompts with none at or above min_score


@dataclass(frozen=True)
class _Ranked:
    score: Score
    completion: Completion
    version: RubricVersion


def export_sft(session: Session, selection: Selection, choice: SftChoice) -> SftExport:
    """The SFT rows of the completions ``selection`` names, chosen as ``choice`` says; a
    one-line error when the judge is unknown, nothing is scored under it, or no score reaches
    the minimum."""
    if choice.best < 1:
        raise ValidationFailed(f"best must be at least 1, got {choice.best}")
    judge = latest_judge_config(session, choice.judge)
    if judge is None:
        raise NotFoundError(
            f"no stored judge config named {choice.judge!r} (see `rubricsvc judges list`)"
        )
    completions = {c.id: c for c in selected_completions(session, selection)}
    rubric_filter = _RubricFilter(session, choice.rubrics)
    ranked: dict[int, list[_Ranked]] = defaultdict(list)  # by prompt id
    masked = 0
    for score, version in _scores(session, judge, choice.aggregation, list(completions)):
        completion = completions[score.completion_id]
        if not rubric_filter.keeps(version, completion.prompt):
            continue
        if score.value is None:
            masked += 1
            continue
        ranked[completion.prompt_id].append(_Ranked(score, completion, version))
    if not ranked:
        raise NotFoundError(_nothing_scored(session, judge, choice, list(completions), masked))
    rows: list[dict[str, Any]] = []
    below = 0
    for prompt_id in sorted(ranked):
        candidates = ranked[prompt_id]
        _one_version(candidates)
        candidates.sort(key=lambda r: (-float(r.score.value or 0.0), r.completion.id))
        kept = [
            r
            for r in candidates
            if choice.min_score is None or float(r.score.value or 0.0) >= choice.min_score
        ][: choice.best]
        below += 0 if kept else 1
        rows += [_row(r, rank, judge, choice.aggregation) for rank, r in enumerate(kept, 1)]
    if not rows:
        best = max(float(r.score.value or 0.0) for group in ranked.values() for r in group)
        raise NotFoundError(
            f"no completion scores at least {choice.min_score:g} under judge {choice.judge!r} "
            f"(aggregation {choice.aggregation}); the best stored score is {best:.4g}: "
            "lower --min-score"
        )
    return SftExport(rows, len(ranked), below)


def _scores(
    session: Session, judge: JudgeConfig, aggregation: str, completion_ids: Sequence[int]
) -> list[tuple[Score, RubricVersion]]:
    """The scores of these completions by ``judge`` under ``aggregation``, with their rubric
    versions."""
    found: list[tuple[Score, RubricVersion]] = []
    for ids in batches(sorted(completion_ids)):
        query = (
            select(Score, RubricVersion)
            .join(RubricVersion, Score.rubric_version_id == RubricVersion.id)
            .where(
                Score.judge_config_id == judge.id,
                Score.aggregation == aggregation,
                Score.completion_id.in_(ids),
            )
            .order_by(Score.completion_id, Score.rubric_version_id)
        )
        found += [(score, version) for score, version in session.execute(query)]
    return found


def _nothing_scored(
    session: Session,
    judge: JudgeConfig,
    choice: SftChoice,
    completion_ids: Sequence[int],
    masked: int,
) -> str:
    """Why no score ranks: every one masked, scores only under other aggregations, or none
    at all; with what to do."""
    where = f"judge {choice.judge!r} (aggregation {choice.aggregation})"
    if choice.rubrics:
        where += f" under the rubric(s) {', '.join(choice.rubrics)}"
    if masked:
        return (
            f"every score of the selected completions by {where} is masked ({masked}): "
            "no judge verdict to rank them by; score them again once the judge works"
        )
    others: set[str] = set()
    for ids in batches(sorted(completion_ids)):
        others |= set(
            session.scalars(
                select(Score.aggregation)
                .where(Score.judge_config_id == judge.id, Score.completion_id.in_(ids))
                .distinct()
            )
        )
    others.discard(choice.aggregation)
    if others and not choice.rubrics:
        return (
            f"no selected completion has a score by {where}; they have scores under the "
            f"aggregation(s) {', '.join(sorted(others))}: pass --aggregation"
        )
    return (
        f"no selected completion has a score by {where}: score them first, e.g. "
        f"`rubricsvc score --judge {choice.judge} --aggregation {choice.aggregation}` "
        "(with the same --prompt/--source/--completion selection)"
    )


def _one_version(candidates: list[_Ranked]) -> None:
    """The candidates of one prompt are all scored under one rubric version, else an error."""
    versions = sorted({r.version.ref for r in candidates})
    if len(versions) > 1:
        prompt = candidates[0].completion.prompt
        label = prompt.external_id or f"id {prompt.id}"
        raise ValidationFailed(
            f"prompt {label!r} has scores under {len(versions)} rubric versions "
            f"({', '.join(versions)}): rank by one, with --rubric NAME@N (or a template "
            f"naming each prompt's own, e.g. --rubric '{PROMPT_ID}/proxy')"
        )


class _RubricFilter:
    """The rubric versions ``refs`` name: a rubric name (every version), ``NAME@N`` or a
    version id (that version), or a template with ``{prompt_id}`` (each prompt's own rubric,
    by the prompt's external id; ``@N`` after it names a version). No refs: every version."""

    def __init__(self, session: Session, refs: Sequence[str]) -> None:
        self.templates: list[str] = []
        self.version_ids: set[int] = set()
        self.rubric_ids: set[int] = set()
        for ref in (r.strip() for r in refs):
            if PROMPT_ID in ref:
                try:
                    ref.format(prompt_id="p")
                except (KeyError, IndexError, ValueError):
                    raise ValidationFailed(
                        f"--rubric {ref!r}: the only placeholder a rubric may hold is {PROMPT_ID}"
                    ) from None
                self.templates.append(ref)
            elif "@" in ref or ref.isdigit():
                self.version_ids.add(resolve_version(session, ref).id)
            else:
                found = get_rubric(session, ref)
                if found is None:
                    raise NotFoundError(f"no rubric named {ref!r}")
                self.rubric_ids.add(found.id)
        self.every = not refs

    def keeps(self, version: RubricVersion, prompt: Prompt) -> bool:
        if self.every or version.id in self.version_ids or version.rubric_id in self.rubric_ids:
            return True
        if prompt.external_id is None:
            return False
        for template in self.templates:
            name, _, number = template.format(prompt_id=prompt.external_id).partition("@")
            if version.rubric.name == name and (not number or number == str(version.number)):
                return True
        return False


def _row(ranked: _Ranked, rank: int, judge: JudgeConfig, aggregation: str) -> dict[str, Any]:
    completion, score, version = ranked.completion, ranked.score, ranked.version
    prompt = completion.prompt
    return {
        "messages": [dict(m) for m in prompt.messages] + completion_turns(completion),
        "provenance": {
            "completion_id": completion.id,
            "completion_external_id": completion.external_id,
            "prompt_id": prompt.id,
            "prompt_external_id": prompt.external_id,
            "source": completion.source,
            "rank": rank,
            "score": score.value,
            "coverage": score.coverage,
            "status": score.status.value,
            "judge": judge.name,
            "judge_config_hash": judge.config_hash,
            "aggregation": aggregation,
            "rubric": version.ref,
            "rubric_name": version.rubric.name,
            "rubric_version": version.number,
            "rubric_version_id": version.id,
        },
    }


def completion_turns(completion: Completion) -> list[dict[str, Any]]:
    """The completion as the assistant's turns in chat-template form: a plain answer as one
    turn; a stored trajectory as its turns, then the final answer unless the trajectory
    already ends with it."""
    if not completion.messages:
        return [{"role": "assistant", "content": completion.text}]
    turns = [chat_turn(m) for m in completion.messages]
    last = turns[-1]
    ends_with_answer = (
        last["role"] == "assistant"
        and not last.get("tool_calls")
        and last["content"].strip() == completion.text.strip()
    )
    if completion.text.strip() and not ends_with_answer:
        turns.append({"role": "assistant", "content": completion.text})
    return turns


def chat_turn(message: dict[str, Any]) -> dict[str, Any]:
    """A stored trajectory message as chat templates read it: the content as text (templates
    concatenate strings; a list of parts would fail or vanish), each tool call's arguments as
    a mapping where they are JSON (templates write them with ``tojson``: a JSON string would
    be quoted twice)."""
    turn: dict[str, Any] = {"role": message["role"], "content": message_text(message)}
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
    if calls:
        turn["tool_calls"] = [_tool_call(c) for c in calls]
    for key in ("name", "tool_call_id"):
        if message.get(key) is not None:
            turn[key] = message[key]
    return turn


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    assert isinstance(function, dict)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            parsed = arguments
        arguments = parsed if isinstance(parsed, dict) else arguments
    converted: dict[str, Any] = {
        "type": "function",
        "function": {"name": str(function.get("name", "")), "arguments": arguments},
    }
    if call.get("id") is not None:
        converted["id"] = call["id"]
    return converted
