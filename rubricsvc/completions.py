"""Completions: the JSON Lines ingestion format and its service.

One record per line::

    {"prompt_external_id": "sleep-1", "text": "Keep a regular schedule...", "source": "policy-a",
     "external_id": "sleep-1/a", "metadata": {"step": 10}}

The prompt is named by ``prompt_external_id``, ``prompt_id`` or given in full as
``prompt`` (text) / ``prompt_messages``; a new prompt given in full is created (with
``prompt_external_id`` as its id when both are given). Records of one prompt (pairs, groups)
are completions of that one prompt. ``rubric`` (a name or a list) assigns shared rubrics to
the completion (``rubricsvc.assignments``). An agent's completion may carry its
``trajectory``: the OpenAI-style messages (assistant turns with ``tool_calls``, ``tool``
results, the final answer) that trajectory criteria and checks read (``messages`` is its older
name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.assignments import assign, assignable_rubric
from rubricsvc.documents import (
    DocumentRecord,
    attach_documents,
    labelled,
    listed_documents,
    resolve_documents,
)
from rubricsvc.errors import RubricsvcError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_items
from rubricsvc.hashing import content_hash
from rubricsvc.models import Completion, Prompt, Rubric
from rubricsvc.prompts import find_prompt, near_duplicate_warnings, store_prompt
from rubricsvc.rubrics.schemas import Message, TrajectoryMessage


class CompletionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_id: int | None = None
    prompt_external_id: str | None = None
    prompt: str | None = Field(default=None, min_length=1)
    prompt_messages: list[Message] | None = None
    text: str
    # The turns that led to the answer (tool calls, tool results); ``messages``: its older name.
    trajectory: list[TrajectoryMessage] | None = Field(default=None, min_length=1)
    messages: list[TrajectoryMessage] | None = Field(default=None, min_length=1)
    external_id: str | None = Field(default=None, min_length=1, max_length=200)
    source: str | None = Field(default=None, max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # The evidence it used (search results, cited pages): ``rubricsvc.documents``.
    documents: list[DocumentRecord] | None = None
    # Shared rubrics this completion is scored against (names; besides its prompt's own).
    rubric: str | list[str] | None = None

    @model_validator(mode="after")
    def _one_prompt_reference(self) -> CompletionRecord:
        given = [
            name
            for name in ("prompt_id", "prompt_external_id", "prompt", "prompt_messages")
            if getattr(self, name) is not None
        ]
        # The prompt's id may come with its text: the first record creates it, the rest find it.
        with_id = {"prompt_external_id", "prompt"} == set(given) or {
            "prompt_external_id",
            "prompt_messages",
        } == set(given)
        if len(given) != 1 and not with_id:
            raise ValueError(
                "give exactly one of prompt_id, prompt_external_id, prompt, prompt_messages "
                "(prompt_external_id may come with prompt or prompt_messages)"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.documents is not None:
            self.documents = labelled(self.documents)
        if self.trajectory is not None and self.messages is not None:
            raise ValueError("give trajectory or its older name messages, not both")
        for name in self.rubric_names():
            if not name.strip():
                raise ValueError("rubric: a rubric name must not be empty")
        return self

    def stored_trajectory(self) -> list[dict[str, Any]] | None:
        """The trajectory as it is stored: each message without its unset fields."""
        given = self.trajectory if self.trajectory is not None else self.messages
        return [m.model_dump(exclude_none=True) for m in given] if given else None

    def rubric_names(self) -> list[str]:
        if self.rubric is None:
            return []
        return [self.rubric] if isinstance(self.rubric, str) else list(self.rubric)


@dataclass(frozen=True)
class IngestResult:
    added: int
    unchanged: int
    assigned: int = 0  # rubric assignments stored
    # Near-duplicate prompts created (differ from a stored one by case, spaces or a character).
    warnings: list[str] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)  # each record's prompt, in order


_TRAJECTORY = TypeAdapter(list[TrajectoryMessage])


def normalized_trajectory(messages: Sequence[Any], where: str) -> list[dict[str, Any]]:
    """``messages`` checked as a trajectory and in its stored form (``stored_trajectory``), so
    one trajectory is stored and keyed alike however it arrived; ValidationFailed, one line
    naming ``where``, if it is not an OpenAI-style message list."""
    try:
        checked = _TRAJECTORY.validate_python(messages)
    except ValidationError as err:
        raise ValidationFailed(f"{where}: trajectory: {describe_validation_error(err)}") from None
    if not checked:
        raise ValidationFailed(f"{where}: trajectory: an empty message list")
    return [m.model_dump(exclude_none=True) for m in checked]


def load_completion_file(path: Path) -> list[tuple[str, CompletionRecord]]:
    records = []
    for location, data in read_items(path, "completion"):
        try:
            records.append((location, CompletionRecord.model_validate(data)))
        except ValidationError as err:
            raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
    return records


def _resolve_prompt(session: Session, record: CompletionRecord) -> tuple[Prompt, bool]:
    """The record's prompt, and whether it was created."""
    if record.prompt_id is not None:
        return find_prompt(session, prompt_id=record.prompt_id), False
    if record.prompt is None and record.prompt_messages is None:
        return find_prompt(session, external_id=record.prompt_external_id), False
    messages = (
        [m.model_dump() for m in record.prompt_messages]
        if record.prompt_messages
        else [{"role": "user", "content": record.prompt}]
    )
    return store_prompt(session, messages, external_id=record.prompt_external_id)


def add_completions(session: Session, records: list[tuple[str, CompletionRecord]]) -> IngestResult:
    """Store the records; one with a known ``external_id`` is skipped if identical, refused if
    not. A record's ``rubric`` names are assigned to its completion (unknown names refused)."""
    added = assigned = 0
    rubrics: dict[str, Rubric] = {}
    created: list[tuple[str, Prompt]] = []
    prompt_ids: list[int] = []
    for location, record in records:
        completion, new, prompt_created = _store(session, location, record)
        added += new
        prompt_ids.append(completion.prompt_id)
        if prompt_created:
            created.append((location, completion.prompt))
        for name in record.rubric_names():
            try:
                if name not in rubrics:
                    rubrics[name] = assignable_rubric(session, name)
                assigned += assign(session, rubrics[name], completion=completion)
            except RubricsvcError as err:
                raise type(err)(f"{location}: rubric: {err}") from None
    warnings = near_duplicate_warnings(session, created)
    return IngestResult(added, len(records) - added, assigned, warnings, prompt_ids)


def store_completion(
    session: Session, location: str, record: CompletionRecord
) -> tuple[Completion, bool]:
    """The completion of ``record``, stored if new, and whether it was (see ``add_completions``)."""
    completion, new, _ = _store(session, location, record)
    return completion, new


def _store(
    session: Session, location: str, record: CompletionRecord
) -> tuple[Completion, bool, bool]:
    """``store_completion``, and whether the record's prompt was created."""
    try:
        prompt, prompt_created = _resolve_prompt(session, record)
    except RubricsvcError as err:
        raise type(err)(f"{location}: {err}") from None
    digest = content_hash(record.text)
    if record.external_id is not None:
        existing = session.scalar(
            select(Completion).where(Completion.external_id == record.external_id)
        )
        if existing is not None:
            if (
                existing.content_hash != digest
                or existing.prompt_id != prompt.id
                or existing.messages != record.stored_trajectory()
                or listed_documents(existing)
                != [[r.label, r.digest()] for r in record.documents or ()]
            ):
                raise ValidationFailed(
                    f"{location}: completion {record.external_id!r} is already stored "
                    "with a different prompt, text, trajectory or documents"
                )
            return existing, False, prompt_created
    resolved = resolve_documents(session, record.documents or (), location)
    completion = Completion(
        prompt_id=prompt.id,
        external_id=record.external_id,
        text=record.text,
        messages=record.stored_trajectory(),
        content_hash=digest,
        source=record.source,
        meta=record.metadata,
    )
    session.add(completion)
    session.flush()
    attach_documents(session, completion, resolved)
    return completion, True, prompt_created
